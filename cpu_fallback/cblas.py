"""GEMM with beta through the BLAS library NumPy itself runs (its CBLAS ``?gemm``).

numpy.matmul computes ``D = A @ B`` only: adding a product into D (a contraction's
``beta * C``, or the chunks of a contracted label in tiles) would need the product in a
temporary of D's size first. CBLAS's gemm adds it in place, ``D = alpha A B + beta D``,
reading each element of D once, with no temporary. That gemm is already in the process:
NumPy links a BLAS (OpenBLAS in its wheels) and loads it with ``import numpy``, but
offers no call with beta; SciPy's wrappers would load a second BLAS with its own thread
pool and copy any D that is not one contiguous block. So the library is found among
the files the process has mapped (Linux: /proc/self/maps; NumPy's own copy first), its
CBLAS symbols are looked up under the names BLAS builds give them, and one small product
is checked against numpy.matmul before the first use. Where any of it fails (another
OS, a BLAS without CBLAS), :func:`available` says False and callers stage the product.

Integer arguments are passed as 64-bit: an LP64 library reads their low 32 bits, so
extents and leading dimensions must then stay below 2**31 (checked per call).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
# How BLAS builds name cblas_dgemm: NumPy's wheels (scipy-openblas, 64-bit integers),
# OpenBLAS built with a 64-bit interface suffix, and the plain name.
_PREFIXES = ("scipy_", "")
_SUFFIXES = (("64_", True), ("_64", True), ("", False))
_LIBRARY = re.compile(r"lib(scipy_)?(openblas|blas|cblas|mkl_rt|flexiblas|blis)[^/]*\.so")
_LP64_LIMIT = 1 << 31
# A CBLAS gemm and whether its integers are 64-bit.
Found = tuple[Callable[..., None], bool]
# The CBLAS type letter of each dtype BLAS computes in.
LETTERS: dict[np.dtype[Any], str] = {
    np.dtype(np.float32): "s", np.dtype(np.float64): "d",
    np.dtype(np.complex64): "c", np.dtype(np.complex128): "z",
}


def available(dtype: Any) -> bool:
    """Whether :func:`gemm` serves ``dtype`` in this process."""
    letter = LETTERS.get(np.dtype(dtype))
    return letter is not None and _gemm(letter) is not None


def gemm(a: np.ndarray, b: np.ndarray, d: np.ndarray, alpha: complex, beta: complex) -> bool:
    """``d = alpha * a @ b + beta * d`` for 2-d arrays of one supported dtype.

    Returns:
        False (nothing written) where BLAS cannot take the arrays as they are: a matrix
        without a unit stride, a negative stride, an unsupported dtype, a complex
        scalar with real arrays, or an extent an LP64 library cannot hold; True when
        ``d`` holds the result.
    """
    return gemm_by(_gemm, a, b, d, alpha, beta)


def gemm_by(find: Callable[[str], Found | None], a: np.ndarray, b: np.ndarray, d: np.ndarray,
            alpha: complex, beta: complex) -> bool:
    """:func:`gemm` through the CBLAS call ``find(letter)`` gives for D's type letter (of
    any library); False (nothing written) where it cannot take the arrays."""
    letter = LETTERS.get(d.dtype)
    found = None if letter is None else find(letter)
    if found is None or not a.dtype == b.dtype == d.dtype:
        return False
    if d.dtype.kind != "c" and (np.imag(alpha) != 0 or np.imag(beta) != 0):
        return False  # a real gemm takes real scalars: NumPy's rules decide elsewhere
    return run(found, a, b, d, alpha, beta)


def run(found: Found, a: np.ndarray, b: np.ndarray, d: np.ndarray, alpha: complex,
        beta: complex) -> bool:
    """:func:`gemm` through one CBLAS ``call`` (``wide``: 64-bit integers) of any
    library: False (nothing written) where it cannot take the arrays as they are."""
    call, wide = found
    if d.shape[0] == 0 or d.shape[1] == 0:
        return True
    args = _arguments(a, b, d, wide)
    if args is None:
        return False
    alpha_arg, beta_arg, _held = scalar_arguments(d.dtype, alpha, beta)
    trans_a, trans_b, m, n, k, lda, ldb, ldd, swapped = args
    if swapped:
        a, b = b, a
    call(ROW_MAJOR, trans_a, trans_b, m, n, k, alpha_arg, a.ctypes.data, lda,
         b.ctypes.data, ldb, beta_arg, d.ctypes.data, ldd)
    return True


def run_batched(found: Found, a: np.ndarray, b: np.ndarray, d: np.ndarray, alpha: complex,
                beta: complex) -> bool:
    """:func:`run` on stacks of matrices (batch, rows, cols) through one strided batch
    call (``cblas_?gemm_batch_strided``: the arguments of ``?gemm``, each matrix's stride
    after its leading dimension, then the count): each ``d[i] = alpha a[i] @ b[i] +
    beta d[i]``; False (nothing written) where it cannot take the stacks as they are: a
    negative batch stride, or D's matrices closer than its leading dimension times its
    rows (which also keeps them apart)."""
    call, wide = found
    count, rows, cols = d.shape
    if count == 0 or rows == 0 or cols == 0:
        return True
    args = _arguments(a[0], b[0], d[0], wide)
    steps = [x.strides[0] // x.itemsize for x in (a, b, d)]
    if args is None or min(steps) < 0 or (not wide and max(*steps, count) >= _LP64_LIMIT):
        return False
    trans_a, trans_b, m, n, k, lda, ldb, ldd, swapped = args
    if steps[2] < ldd * m:
        return False  # MKL refuses a D stride below ldd * m, writing nothing
    if swapped:
        a, b = b, a
        steps[0], steps[1] = steps[1], steps[0]
    alpha_arg, beta_arg, _held = scalar_arguments(d.dtype, alpha, beta)
    call(ROW_MAJOR, trans_a, trans_b, m, n, k, alpha_arg, a.ctypes.data, lda, steps[0],
         b.ctypes.data, ldb, steps[1], beta_arg, d.ctypes.data, ldd, steps[2], count)
    return True


class GemmLoop:
    """``d += alpha * a @ b`` again and again, with the three matrices moved by byte
    offsets each time: the later tiles of a loop of GEMMs on views (route "...:looped"),
    whose calls differ in their pointers only. Through :func:`gemm` a tile took 30-56 us
    of Python beside a GEMM of some 200 us (TCCG case 13 at half extents); here the
    arguments are worked out once, and a tile costs the call.
    """

    __slots__ = ("_call", "_head", "_pointers", "_lda", "_ldb", "_ldd", "_alpha", "_one",
                 "_swapped", "_lock", "_held")

    def __init__(self, call: Callable[..., None], arguments: tuple[Any, ...], a: np.ndarray,
                 b: np.ndarray, d: np.ndarray, alpha: complex,
                 lock: AbstractContextManager[Any]) -> None:
        """Use :meth:`of`, which checks that the call takes the matrices (``arguments``:
        their :func:`_arguments`)."""
        trans_a, trans_b, m, n, k, self._lda, self._ldb, self._ldd, self._swapped = arguments
        self._call = call
        self._head = (ROW_MAJOR, trans_a, trans_b, m, n, k)
        self._alpha, self._one, self._held = scalar_arguments(d.dtype, alpha, 1)
        first, second = (b, a) if self._swapped else (a, b)
        self._pointers = (first.ctypes.data, second.ctypes.data, d.ctypes.data)
        self._lock = lock

    @classmethod
    def of(cls, found: Found | None, a: np.ndarray, b: np.ndarray, d: np.ndarray,
           alpha: complex, lock: AbstractContextManager[Any]) -> GemmLoop | None:
        """The loop from its first tile's matrices, where ``found`` (a CBLAS gemm, taken
        under ``lock``) takes them as :func:`gemm_by` would; else None."""
        if (found is None or a.ndim != 2 or b.ndim != 2 or d.ndim != 2
                or not a.dtype == b.dtype == d.dtype or 0 in d.shape
                or (d.dtype.kind != "c" and np.imag(alpha) != 0)):
            return None
        arguments = _arguments(a, b, d, found[1])
        return None if arguments is None else cls(found[0], arguments, a, b, d, alpha, lock)

    def add(self, offset_a: int, offset_b: int, offset_d: int) -> None:
        """``d += alpha * a @ b`` on the matrices ``offset_*`` bytes past the first's."""
        if self._swapped:
            offset_a, offset_b = offset_b, offset_a
        a, b, d = self._pointers
        with self._lock:
            self._call(*self._head, self._alpha, a + offset_a, self._lda, b + offset_b,
                       self._ldb, self._one, d + offset_d, self._ldd)


def gemm_loop(a: np.ndarray, b: np.ndarray, d: np.ndarray, alpha: complex) -> GemmLoop | None:
    """A :class:`GemmLoop` on NumPy's BLAS from its first tile's matrices (None where
    :func:`gemm` would not take them)."""
    letter = LETTERS.get(d.dtype)
    found = None if letter is None else _gemm(letter)
    return GemmLoop.of(found, a, b, d, alpha, contextlib.nullcontext())


# _matrix_arguments by the matrices' shapes, byte strides and item size, and ``wide``:
# a plan calls with the same layouts every time, and working them out again took ~4 us.
_ARGUMENTS: dict[tuple[Any, ...], tuple[int, ...] | None] = {}
_ARGUMENTS_MOST = 512


def _arguments(a: np.ndarray, b: np.ndarray, d: np.ndarray, wide: bool) -> Any:
    """:func:`_matrix_arguments` remembered by layout."""
    key = (a.shape, a.strides, b.shape, b.strides, d.shape, d.strides, d.itemsize, wide)
    try:
        return _ARGUMENTS[key]
    except KeyError:
        pass
    if len(_ARGUMENTS) >= _ARGUMENTS_MOST:
        _ARGUMENTS.clear()
    args = _ARGUMENTS[key] = _matrix_arguments(a, b, d, wide)
    return args


def _matrix_arguments(a: np.ndarray, b: np.ndarray, d: np.ndarray, wide: bool) -> Any:
    """(trans A, trans B, m, n, k, lda, ldb, ldd, swapped) of a row-major CBLAS call
    computing D from A and B (``swapped``: A and B exchanged and transposed, where D is
    column-major: D^T = B^T A^T; a transpose keeps an array's data pointer); None where
    a matrix has no unit stride or, with 32-bit integers (``wide`` False), an extent or
    leading dimension past them."""
    m, n, k = d.shape[0], d.shape[1], a.shape[1]
    d_layout = layout(d)
    if d_layout is None:
        return None
    swapped = d_layout[0] == TRANS
    if swapped:
        a, b, m, n = b.T, a.T, n, m
    a_layout, b_layout = layout(a), layout(b)
    if a_layout is None or b_layout is None:
        return None
    if not wide and max(m, n, k, a_layout[1], b_layout[1], d_layout[1]) >= _LP64_LIMIT:
        return None
    return (a_layout[0], b_layout[0], m, n, k, a_layout[1], b_layout[1], d_layout[1],
            swapped)


def scalar_arguments(dtype: np.dtype[Any], alpha: complex,
                     beta: complex) -> tuple[float | int, float | int, Any]:
    """alpha and beta as a CBLAS call of ``dtype`` takes them: real numbers, or for a
    complex dtype pointers into the third value returned (keep it until the call)."""
    if dtype.kind == "c":
        scalars = np.array([alpha, beta], dtype=dtype)
        return scalars[:1].ctypes.data, scalars[1:].ctypes.data, scalars
    return float(np.real(alpha)), float(np.real(beta)), None


def layout(x: np.ndarray) -> tuple[int, int] | None:
    """:func:`matrix_layout` of an array (strides in bytes, whole elements)."""
    if any(s % x.itemsize for s in x.strides):
        return None
    return matrix_layout(x.shape, tuple(s // x.itemsize for s in x.strides))


def matrix_layout(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int] | None:
    """(NO_TRANS or TRANS, leading dimension) of a matrix (strides in elements) seen
    row-major; None where it has no unit stride or a leading dimension BLAS refuses."""
    rows, cols = shape
    row, col = strides
    if cols <= 1 or col == 1:  # rows are contiguous
        ld = row if rows > 1 else max(cols, 1)
        return (NO_TRANS, ld) if ld >= max(cols, 1) else None
    if rows <= 1 or row == 1:  # columns are contiguous
        ld = col if cols > 1 else max(rows, 1)
        return (TRANS, ld) if ld >= max(rows, 1) else None
    return None


def find_all() -> None:
    """Look NumPy's gemm up for every dtype now (before another BLAS loads, which
    :func:`_libraries` could take for NumPy's)."""
    for letter in LETTERS.values():
        _gemm(letter)


@functools.cache
def _gemm(letter: str) -> Found | None:
    """CBLAS's ``{letter}gemm`` of NumPy's BLAS and whether its integers are 64-bit,
    checked on one product; None where it is not found or not right."""
    for path in _libraries():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        found = lookup(library, letter)
        if found is not None:
            return found
    return None


def lookup(library: ctypes.CDLL, letter: str) -> Found | None:
    """CBLAS's ``{letter}gemm`` in ``library`` under the names BLAS builds give it
    (64-bit integers first), checked on one product; None where none is right."""
    for prefix in _PREFIXES:
        for suffix, wide in _SUFFIXES:
            call = getattr(library, f"{prefix}cblas_{letter}gemm{suffix}", None)
            if call is None:
                continue
            call.restype = None
            index = ctypes.c_int64  # see the module docstring
            call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, index, index,
                             index, scalar_type(letter), ctypes.c_void_p, index,
                             ctypes.c_void_p, index, scalar_type(letter), ctypes.c_void_p,
                             index]
            if _checks((call, wide), letter):
                return call, wide
    return None


def scalar_type(letter: str) -> Any:
    """The ctypes type of alpha and beta in a CBLAS call of type ``letter``."""
    return {"s": ctypes.c_float, "d": ctypes.c_double}.get(letter, ctypes.c_void_p)


def _libraries() -> list[str]:
    """Shared libraries mapped into this process that may be a BLAS, NumPy's first."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "/" in line}
    except OSError:
        return []
    found = [p for p in paths if _LIBRARY.search(os.path.basename(p))]
    numpy_root = os.path.dirname(os.path.dirname(np.__file__))
    own = os.path.join(numpy_root, "numpy")
    return sorted(found, key=lambda p: (not p.startswith(own), p))


def _checks(found: tuple[Callable[..., None], bool], letter: str) -> bool:
    """Whether a CBLAS call adds a small product into a strided D as numpy.matmul
    computes it (a symbol of another ABI would not)."""
    dtype = next(t for t, x in LETTERS.items() if x == letter)
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (3, 5)).astype(dtype)
    b = rng.integers(-3, 4, (4, 5)).astype(dtype).T  # column-major
    base = rng.integers(-3, 4, (3, 6)).astype(dtype)
    d = base.copy()[:, :4]  # rows 6 apart
    try:
        ran = run(found, a, b, d, 2, 1)
    except (ctypes.ArgumentError, OSError):
        return False
    return ran and bool(np.array_equal(d, 2 * (a @ b) + base[:, :4]))
