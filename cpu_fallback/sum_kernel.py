"""The compiled kernel of strided sums (cpu_fallback._sums, built from sums.c; see
cpu_fallback.sum_layout for the loop nest).

Imported through cpu_fallback.kernels by the first sum that uses it; where the extension
was not built, the import fails and sums run as NumPy reductions. Importing it loads
OpenMP's library (libgomp), which reads its spin setting then (cpu_fallback.openmp). A
threaded plan shares the outer loop among OpenMP's threads, every thread writing its own
outputs, or (``split``) the middle rows, every thread summing its share into its own
copy of the destination, the copies then added in order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import openmp

with openmp.spin_environment():
    import cpu_fallback._sums as _sums

from .raw_memory import flat
from .sum_layout import SumLayout

# The kinds of inner loop: summed (a register per output), or kept (rows added into
# output rows; UNIT_ROWS where those rows are contiguous, which lets the compiler
# vectorise them), or kept and summed a column at a time (COLUMNS: each output element
# in a register over the middle indices; COLUMNS_BY_FOURS: the same, four middle
# indices a pass). Their numbers are sums.c's.
REGISTERS, UNIT_ROWS, ROWS, COLUMNS, COLUMNS_BY_FOURS = 0, 1, 2, 3, 4

# The kernel's names of NumPy's types, and the pairs it sums: every type into itself,
# every integer into a 64-bit one, float32 into float64, complex64 into complex128.
_INTEGERS = ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8")
_PAIRS = frozenset(
    [(t, t) for t in (*_INTEGERS, "f4", "f8", "c8", "c16")]
    + [(t, wide) for t in _INTEGERS for wide in ("i8", "u8")]
    + [("f4", "f8"), ("c8", "c16")]
)


def type_name(dtype: np.dtype) -> str:
    """The kernel's name of a dtype: its kind and bytes ('f8', 'i1', 'c16')."""
    return f"{dtype.kind}{dtype.itemsize}"


def sums(source: str, destination: str) -> bool:
    """Whether the kernel sums dtype ``source`` into dtype ``destination``."""
    return (type_name(np.dtype(source)), type_name(np.dtype(destination))) in _PAIRS


def threads() -> int:
    """How many threads a threaded sum uses: OpenMP's count (OMP_NUM_THREADS, else one
    per CPU this process may run on); 1 in a forked child (see openmp.forked)."""
    return 1 if openmp.forked() else int(_sums.max_threads())


def memory(array: np.ndarray, base: int, span: int, writeable: bool) -> np.ndarray:
    """The memory under ``array`` as a buffer of ``span`` elements of its dtype from its
    lowest address (``base`` elements before its element 0): a C-ordered array that
    fills its span, or that a view spans whole (a square matrix's diagonal: a trace), is
    its own buffer (the kernels read bytes; a flat view costs ~1 us), anything else a
    flat 1-D view (raw_memory.flat)."""
    if not writeable or array.flags.writeable:
        if base == 0 and array.flags.c_contiguous and array.size == span:
            return array
        owner = array.base
        if (type(owner) is np.ndarray and owner.flags.c_contiguous
                and owner.nbytes == span * array.itemsize
                and (not writeable or owner.flags.writeable)):
            return owner
    return flat(array, array.dtype.str, base, span, writeable=writeable)


def bound(layout: SumLayout, source_dtype: np.dtype, destination_dtype: np.dtype,
          parallel: bool, by_column: bool = False, split: int = 0,
          by_fours: bool = False) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(source, destination)`` writing the sum ``layout`` describes of ``source`` (a
    strided view of ``source_dtype``) into ``destination`` (of ``destination_dtype``),
    its arguments gathered once. With the plans' fresh calls (cpu_fallback.strided_sum),
    a warm 64^4 'ijkj->ik' into a new result spent 13 us in Python before the kernel and
    5 after, against 22 and 8 through execute(): the kernel's 16 MiB of reads push the
    Python path out of cache (6.5 us before the kernel where the kernel was left out).

    ``parallel`` shares the outer loop among OpenMP's threads (not in a forked child:
    openmp.forked), or with ``split`` > 1 the middle rows in at most that many parts,
    each summed into its own copy of the destination's span, the copies then added in
    order; ``by_column`` sums a kept inner axis element by element over the middle
    indices (COLUMNS) instead of adding rows, ``by_fours`` adding four middle indices a
    pass (COLUMNS_BY_FOURS).

    The kernel checks that every element it would touch lies inside the two views'
    spans (a ValueError otherwise) and releases the GIL while it sums.
    """
    n, src_stride, dst_stride = layout.inner
    nest = (type_name(np.dtype(source_dtype)), type_name(np.dtype(destination_dtype)),
            _kind(dst_stride, by_column, by_fours), layout.kept_src, layout.kept_dst,
            layout.summed_src, n, src_stride, dst_stride)
    step = middle_step(layout.summed_src)
    src_base, src_span, dst_base, dst_span = (layout.src_base, layout.src_span,
                                              layout.dst_base, layout.dst_span)
    strided, forked, lock = _sums.strided, openmp.forked, openmp.LOCK

    def call(source: np.ndarray, destination: np.ndarray) -> None:
        src = memory(source, src_base, src_span, writeable=False)
        dst = memory(destination, dst_base, dst_span, writeable=True)
        if parallel and not forked():
            count = threads()
            with lock:
                strided(src, dst, *nest, min(count, split) if split > 1 else count, split > 1,
                        step)
        else:
            strided(src, dst, *nest, 0, False, step)

    return call


def middle_step(summed_src: np.ndarray) -> int:
    """The step between the middle rows where they lie one step apart (the kernel then
    computes their offsets, not reading the table: faster on narrow rows, see sums.c);
    else 0."""
    if summed_src.size < 2:
        return 0
    steps = np.diff(summed_src)
    return int(steps[0]) if steps[0] != 0 and (steps == steps[0]).all() else 0


def _kind(dst_stride: int, by_column: bool = False, by_fours: bool = False) -> int:
    """The inner loop for an inner axis written at ``dst_stride`` (0: summed);
    ``by_column`` sums a kept one a column at a time, ``by_fours`` four a pass."""
    if dst_stride == 0:
        return REGISTERS
    if by_column:
        return COLUMNS_BY_FOURS if by_fours else COLUMNS
    return UNIT_ROWS if dst_stride == 1 else ROWS
