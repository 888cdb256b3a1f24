"""Intel MKL's GEMM as a second engine beside NumPy's BLAS, where the optional ``mkl``
package is installed (``pip install "gpu-tc[mkl]"``).

On the 2-core AVX-512 Xeon the benchmarks ran on, MKL's settled dgemm ran 1.13-1.24x
OpenBLAS's at four TCCG shapes and gpu_tc's own plans ran 1.29-1.84x faster on it at half
extents (benchmarks/results/xeon-avx512/current/gemm-engines/); its sgemm ran 0.96-1.08x.
No rule says where it wins, so a contraction plan offers its GEMM lowerings on both
engines and the measurement (cpu_fallback.measure) keeps the faster.

The library is libmkl_rt from the ``mkl`` wheel (under sys.prefix/lib, else the user
base's lib), loaded on the first plan that times its variants; there is no engine where
NumPy's own BLAS is MKL (it already runs every GEMM), where GPU_TC_MKL=0, off Linux, or
in a process forked after OpenMP was loaded (cpu_fallback.openmp: its threads would wait
forever there; a plan made before the fork runs NumPy's BLAS in the child). MKL runs its
threads on GNU OpenMP, libgomp: the threads of gpu_tc's compiled kernels, loaded first
with their spin count, and like them one GEMM at a time (openmp.LOCK), except GEMMs run
on their calling thread alone (MklEngine.one_thread, serial), several threads at once.
Without libgomp or MKL's GNU layer, or where MKL_THREADING_LAYER names another, there is
no engine (MKL would load a second OpenMP runtime, or end the process where it finds
none). Its thread count is OpenMP's, one per CPU this process may use, unless
MKL_NUM_THREADS or OMP_NUM_THREADS says otherwise; threadpoolctl's limits reach it once it
is loaded (not those of a ``threadpool_limits`` block entered before).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import functools
import glob
import math
import os
import site
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import cblas, openmp

DISABLE_VARIABLE = "GPU_TC_MKL"
# mkl_service.h: MKL_THREADING_INTEL, SEQUENTIAL, PGI, GNU, TBB = 0, 1, 2, 3, 4.
_THREADING_GNU = 3


class MklEngine:
    """MKL's ``?gemm`` and ``?gemm_batch_strided`` (64-bit integers) for float32,
    float64, complex64 and complex128.

    Args:
        library: libmkl_rt, loaded, its threading layer set.
        path: Where it was loaded from.
    """

    name = "mkl"

    def __init__(self, library: ctypes.CDLL, path: str) -> None:
        self.path = path
        text = ctypes.create_string_buffer(256)
        library.MKL_Get_Version_String(text, len(text))
        self.version = text.value.decode(errors="replace").strip()
        self._library = library
        letters = cblas.LETTERS.values()
        self._gemm = {letter: cblas.lookup(library, letter) for letter in letters}
        self._batched = {letter: _batched_call(library, letter) for letter in letters}
        library.MKL_Set_Num_Threads_Local.argtypes = [ctypes.c_int]
        library.MKL_Set_Num_Threads_Local.restype = ctypes.c_int
        # One OpenMP launch at a time; none for GEMMs on the calling thread (serial()).
        self._lock: contextlib.AbstractContextManager[Any] = openmp.LOCK

    def threads(self) -> int:
        """The threads MKL's next GEMM may use (MKL_Get_Max_Threads)."""
        return int(self._library.MKL_Get_Max_Threads())

    @contextlib.contextmanager
    def one_thread(self) -> Iterator[None]:
        """MKL's GEMMs on the calling thread alone while the body runs, on this thread
        only (MKL_Set_Num_Threads_Local); its previous setting after."""
        previous = self._library.MKL_Set_Num_Threads_Local(1)
        try:
            yield
        finally:
            self._library.MKL_Set_Num_Threads_Local(previous)

    def serial(self) -> MklEngine:
        """This engine without the launch lock, for threads that call it inside
        :meth:`one_thread` (no OpenMP team starts, so several run at once)."""
        twin = copy.copy(self)
        twin._lock = contextlib.nullcontext()
        return twin

    def describe(self) -> str:
        """One line for reports: version, file and threads (on GNU OpenMP)."""
        short = self.version.split(" Product")[0].split("-Product")[0]
        return f"{short} ({os.path.basename(self.path)}, GNU OpenMP, {self.threads()} threads)"

    def serves(self, dtype: Any) -> bool:
        """Whether MKL runs the GEMMs of ``dtype``."""
        letter = cblas.LETTERS.get(np.dtype(dtype))
        return letter is not None and self._gemm[letter] is not None

    def gemm(self, a: np.ndarray, b: np.ndarray, d: np.ndarray, alpha: complex,
             beta: complex) -> bool:
        """``d = alpha * a @ b + beta * d`` for matrices, as :func:`cblas.gemm` (False,
        nothing written, where MKL cannot take the arrays as they are, and in a process
        forked after OpenMP was loaded: its threads would wait forever there, see
        cpu_fallback.openmp)."""
        if openmp.forked():
            return False
        with self._lock:
            return cblas.gemm_by(self._gemm.__getitem__, a, b, d, alpha, beta)

    def gemm_loop(self, a: np.ndarray, b: np.ndarray, d: np.ndarray,
                  alpha: complex) -> cblas.GemmLoop | None:
        """A :class:`cblas.GemmLoop` on MKL from its first tile's matrices (None where
        :meth:`gemm` would not take them)."""
        letter = cblas.LETTERS.get(d.dtype)
        if letter is None or openmp.forked():
            return None
        return cblas.GemmLoop.of(self._gemm[letter], a, b, d, alpha, self._lock)

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """``out = a @ b`` for matrices or stacks (an operand's batch axes of extent 1
        broadcast), as numpy.matmul writes it; numpy.matmul runs what MKL cannot take
        as it is (see :meth:`gemm`)."""
        if out.ndim == 2 and a.ndim == b.ndim == 2:
            if self.gemm(a, b, out, 1, 0):
                return
        elif out.ndim > 2 and a.ndim == b.ndim == out.ndim:
            batch = out.shape[:-2]
            try:  # an operand's batch axes of extent 1, broadcast (stride 0) as matmul does
                stacks = (np.broadcast_to(a, batch + a.shape[-2:]),
                          np.broadcast_to(b, batch + b.shape[-2:]))
            except ValueError:
                stacks = None  # numpy.matmul's error follows
            if stacks is not None and self._stacks(*stacks, out):
                return
        np.matmul(a, b, out=out)

    def _stacks(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
        """``out = a @ b`` over stacks: one strided batch call where each stack's batch
        axes merge into one, else one per index of all batch axes but the last; False
        where MKL cannot take them (numpy.matmul then writes all of ``out``)."""
        letter = cblas.LETTERS.get(out.dtype)
        found = None if letter is None else self._batched[letter]
        if (found is None or not a.dtype == b.dtype == out.dtype or not _whole(a, b, out)
                or openmp.forked()):
            return False
        a3, b3, out3 = (_merged(x) for x in (a, b, out))
        if a3 is not None and b3 is not None and out3 is not None:
            with self._lock:
                return cblas.run_batched(found, a3, b3, out3, 1, 0)
        if out.ndim == 3:
            return False
        with self._lock:
            for index in np.ndindex(out.shape[:-3]):
                if not cblas.run_batched(found, a[index], b[index], out[index], 1, 0):
                    return False  # the first refuses where any would: the layouts repeat
        return True


def _whole(*arrays: np.ndarray) -> bool:
    """Whether every stride is a whole number of elements."""
    return all(s % x.itemsize == 0 for x in arrays for s in x.strides)


def _merged(x: np.ndarray) -> np.ndarray | None:
    """A stack's batch axes as one (a view), or None where no single stride steps
    through them in order."""
    if x.ndim == 3:
        return x
    step, expected = 0, None
    for extent, stride in reversed(list(zip(x.shape[:-2], x.strides[:-2]))):
        if extent == 1:
            continue
        if expected is None:
            step = stride
        elif stride != expected:
            return None
        expected = stride * extent
    return as_strided(x, (math.prod(x.shape[:-2]),) + x.shape[-2:], (step,) + x.strides[-2:],
                      writeable=x.flags.writeable)


@functools.cache
def engine() -> MklEngine | None:
    """This process's MKL engine, loaded on the first call; None where there is none
    (see the module docstring)."""
    if (os.environ.get(DISABLE_VARIABLE, "").lower() in {"0", "off", "false", "no"}
            or not sys.platform.startswith("linux") or openmp.forked() or _numpy_runs_mkl()):
        return None
    path = next(iter(_library_paths()), None)
    layer = os.environ.get("MKL_THREADING_LAYER")
    if path is None or layer not in (None, "GNU", "gnu") or not glob.glob(
            os.path.join(os.path.dirname(path), "libmkl_gnu_thread.so*")):
        return None
    cblas.find_all()  # NumPy's BLAS found first: libmkl_rt is a BLAS by its name too
    try:
        with openmp.spin_environment():  # as gpu_tc's kernels load it (a no-op after them)
            ctypes.CDLL("libgomp.so.1")
        library = ctypes.CDLL(path)
    except OSError:
        return None
    library.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
    library.MKL_Set_Threading_Layer.restype = ctypes.c_int
    if library.MKL_Set_Threading_Layer(_THREADING_GNU) != _THREADING_GNU:
        return None
    if "MKL_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        library.MKL_Set_Num_Threads.argtypes = [ctypes.c_int]
        library.MKL_Set_Num_Threads(len(os.sched_getaffinity(0)))
    found = MklEngine(library, path)
    return found if any(found.serves(t) for t in cblas.LETTERS) else None


def _numpy_runs_mkl() -> bool:
    """Whether NumPy's own BLAS is MKL (a conda or Intel build), as its build recorded."""
    try:
        name = np.__config__.CONFIG["Build Dependencies"]["blas"]["name"]  # type: ignore[attr-defined]
    except (AttributeError, KeyError, TypeError):
        return False
    return "mkl" in str(name).lower()


def _library_paths() -> list[str]:
    """libmkl_rt files where the ``mkl`` wheel installs them: sys.prefix/lib, then the
    user base's lib (``pip install --user``); the newest soname first."""
    found = []
    for base in dict.fromkeys((sys.prefix, site.getuserbase())):
        names = glob.glob(os.path.join(base, "lib", "libmkl_rt.so*"))
        found += sorted(names, key=lambda p: (len(p), p), reverse=True)
    return found


def _batched_call(library: ctypes.CDLL, letter: str) -> cblas.Found | None:
    """MKL's ``cblas_{letter}gemm_batch_strided_64``, checked on one small stack; None
    where it is missing or wrong."""
    call = getattr(library, f"cblas_{letter}gemm_batch_strided_64", None)
    if call is None:
        return None
    call.restype = None
    index, pointer, scalar = ctypes.c_int64, ctypes.c_void_p, cblas.scalar_type(letter)
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, index, index, index, scalar,
                     pointer, index, index, pointer, index, index, scalar, pointer, index,
                     index, index]
    dtype: np.dtype[Any] = next(t for t, x in cblas.LETTERS.items() if x == letter)
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (3, 2, 5)).astype(dtype)
    b = rng.integers(-3, 4, (3, 4, 5)).astype(dtype).swapaxes(1, 2)  # column-major
    base = rng.integers(-3, 4, (3, 2, 6)).astype(dtype)
    d = base.copy()[:, :, :4]
    try:
        ran = cblas.run_batched((call, True), a, b, d, 2, 1)
    except (ctypes.ArgumentError, OSError):
        return None
    return (call, True) if ran and np.array_equal(d, 2 * (a @ b) + base[:, :, :4]) else None
