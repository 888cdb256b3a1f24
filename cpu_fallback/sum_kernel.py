"""The numba kernels of strided sums (see cpu_fallback.sum_layout for the loop nest).

Imported only when a sum uses them, since it imports numba; compiled (or loaded from
numba's on-disk cache) once per dtype pair met. The outer loop is shared among
numba's threads when the sum is large; every thread writes its own outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from . import numba_pool
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


def _memory(array: np.ndarray, base: int, span: int, writeable: bool) -> np.ndarray:
    """The memory under ``array`` as a 1-D array of ``span`` elements from its lowest
    address (``base`` elements before its element 0)."""
    address = array.__array_interface__["data"][0] - base * array.itemsize
    return np.asarray(_Memory(array, address, span, writeable))


def run(layout: SumLayout, source: np.ndarray, destination: np.ndarray, parallel: bool) -> None:
    """Write the sum ``layout`` describes of ``source`` (a strided view) into
    ``destination``; ``parallel`` shares the outer loop among numba's threads."""
    src = _memory(source, layout.src_base, layout.src_span, writeable=False)
    dst = _memory(destination, layout.dst_base, layout.dst_span, writeable=True)
    n, src_stride, dst_stride = layout.inner
    zero = destination.dtype.type(0)
    arguments = (src, dst, layout.kept_src, layout.kept_dst, layout.summed_src, n,
                 src_stride, dst_stride, zero)
    kernel = compiled(layout.inner_kept, parallel)
    if not parallel:
        kernel(*arguments)
        return
    numba_pool.threads()
    with numba_pool.LOCK:
        kernel(*arguments)


@functools.cache
def compiled(inner_kept: bool, parallel: bool) -> Callable[..., None]:
    """The kernel for an inner axis that is kept (rows added into outputs) or summed
    (a register per output), threaded or not."""
    kernel = _rows if inner_kept else _registers
    try:
        return numba.njit(kernel, cache=True, nogil=True, parallel=parallel)
    except RuntimeError as err:  # no directory numba may cache in
        if "no locator available" not in str(err):
            raise
        return numba.njit(kernel, nogil=True, parallel=parallel)


def _rows(src: Any, dst: Any, kept_src: Any, kept_dst: Any, summed_src: Any,
          n: int, ss: int, ds: int, zero: Any) -> None:
    """dst row (kept_dst[k], stride ds) = sum over r of the src row (kept_src[k] +
    summed_src[r], stride ss), for every outer index k."""
    for k in numba.prange(kept_src.shape[0]):
        s0, d0 = kept_src[k], kept_dst[k]
        for j in range(n):
            dst[d0 + j * ds] = zero
        for r in range(summed_src.shape[0]):
            s = s0 + summed_src[r]
            for j in range(n):
                dst[d0 + j * ds] += src[s + j * ss]


def _registers(src: Any, dst: Any, kept_src: Any, kept_dst: Any, summed_src: Any,
               n: int, ss: int, ds: int, zero: Any) -> None:
    """dst[kept_dst[k]] = the sum of the src rows (kept_src[k] + summed_src[r], stride
    ss) over r, for every outer index k (``ds`` is 0: the inner axis is summed)."""
    for k in numba.prange(kept_src.shape[0]):
        s0 = kept_src[k]
        total = zero
        for r in range(summed_src.shape[0]):
            s = s0 + summed_src[r]
            for j in range(n):
                total += src[s + j * ss]
        dst[kept_dst[k]] = total
