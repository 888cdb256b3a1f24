"""The numba kernels of strided sums (see cpu_fallback.sum_layout for the loop nest).

Imported only when a sum uses them, since it imports numba; compiled (or loaded from
numba's on-disk cache) once per dtype pair met. A threaded plan shares the outer
loop among numba's threads; every thread writes its own outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from . import numba_pool, openmp
from .sum_layout import SumLayout


class _Memory:
    """A NumPy array interface for ``span`` elements of ``dtype`` from ``address``,
    holding the array they lie under."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: np.ndarray, address: int, span: int, writeable: bool) -> None:
        self.owner = owner
        self.__array_interface__ = {
            "data": (address, not writeable),
            "shape": (span,),
            "typestr": owner.dtype.str,
            "version": 3,
        }


def memory(array: np.ndarray, base: int, span: int, writeable: bool) -> np.ndarray:
    """The memory under ``array`` as a 1-D array of ``span`` elements from its lowest
    address (``base`` elements before its element 0)."""
    address = array.__array_interface__["data"][0] - base * array.itemsize
    return np.asarray(_Memory(array, address, span, writeable))


def run(layout: SumLayout, source: np.ndarray, destination: np.ndarray, parallel: bool,
        by_column: bool = False) -> None:
    """Write the sum ``layout`` describes of ``source`` (a strided view) into
    ``destination``; ``parallel`` shares the outer loop among numba's threads (not in
    a forked child: openmp.forked); ``by_column`` sums a kept inner axis element by
    element over the middle indices (COLUMNS) instead of adding rows."""
    src = memory(source, layout.src_base, layout.src_span, writeable=False)
    dst = memory(destination, layout.dst_base, layout.dst_span, writeable=True)
    n, src_stride, dst_stride = layout.inner
    zero = destination.dtype.type(0)
    arguments = (_kind(dst_stride, by_column), src, dst, layout.kept_src, layout.kept_dst,
                 layout.summed_src, n, src_stride, dst_stride, zero)
    if parallel and not openmp.forked():
        numba_pool.launch(compiled(parallel=True), *arguments)
    else:
        compiled(parallel=False)(*arguments)


# The kinds of inner loop: summed (a register per output), or kept (rows added into
# output rows; UNIT_ROWS where those rows are contiguous, which lets the compiler
# vectorise them: 2x the general loop's speed on 'ijkj->ik'), or kept and summed a
# column at a time (COLUMNS: each output element in a register over the middle indices).
REGISTERS, UNIT_ROWS, ROWS, COLUMNS = 0, 1, 2, 3


def _kind(dst_stride: int, by_column: bool = False) -> int:
    """The inner loop for an inner axis written at ``dst_stride`` (0: summed);
    ``by_column`` sums a kept one a column at a time."""
    if dst_stride == 0:
        return REGISTERS
    if by_column:
        return COLUMNS
    return UNIT_ROWS if dst_stride == 1 else ROWS


@functools.cache
def compiled(parallel: bool) -> Callable[..., None]:
    """_sum_threaded (the outer loop shared among numba's threads) or _sum."""
    return numba_pool.jit(_sum_threaded if parallel else _sum, parallel)


def _sum(kind: int, src: Any, dst: Any, kept_src: Any, kept_dst: Any, summed_src: Any,
         n: int, ss: int, ds: int, zero: Any) -> None:
    """Every outer index's sum (:func:`_sum_at`), one after another."""
    for k in range(kept_src.shape[0]):
        _sum_at(kind, k, src, dst, kept_src, kept_dst, summed_src, n, ss, ds, zero)


def _sum_threaded(kind: int, src: Any, dst: Any, kept_src: Any, kept_dst: Any,
                  summed_src: Any, n: int, ss: int, ds: int, zero: Any) -> None:
    """Every outer index's sum (:func:`_sum_at`), shared among numba's threads."""
    for k in numba.prange(kept_src.shape[0]):
        _sum_at(kind, k, src, dst, kept_src, kept_dst, summed_src, n, ss, ds, zero)


@numba.njit(inline="always")
def _sum_at(kind: int, k: int, src: Any, dst: Any, kept_src: Any, kept_dst: Any,
            summed_src: Any, n: int, ss: int, ds: int, zero: Any) -> None:
    """Outer index ``k``: the src rows (kept_src[k] + summed_src[r], stride ss) summed
    over r, into the dst row (kept_dst[k], stride ds), or, for REGISTERS (the inner
    axis summed too), into the one element dst[kept_dst[k]]."""
    s0, d0 = kept_src[k], kept_dst[k]
    if kind == REGISTERS:
        total = zero
        for r in range(summed_src.shape[0]):
            s = s0 + summed_src[r]
            for j in range(n):
                total += src[s + j * ss]
        dst[d0] = total
    elif kind == UNIT_ROWS:
        for j in range(n):
            dst[d0 + j] = zero
        for r in range(summed_src.shape[0]):
            s = s0 + summed_src[r]
            for j in range(n):
                dst[d0 + j] += src[s + j * ss]
    elif kind == COLUMNS:
        for j in range(n):
            total = zero
            s = s0 + j * ss
            for r in range(summed_src.shape[0]):
                total += src[s + summed_src[r]]
            dst[d0 + j * ds] = total
    else:
        for j in range(n):
            dst[d0 + j * ds] = zero
        for r in range(summed_src.shape[0]):
            s = s0 + summed_src[r]
            for j in range(n):
                dst[d0 + j * ds] += src[s + j * ss]
