"""The memory under a strided NumPy array as one flat array, for the compiled kernels
(cpu_fallback.tiles, sum_kernel, small_k): they take a buffer and offsets into it, and
check every offset against the buffer's length. (pairwise_kernel's takes the arrays
themselves and finds the span of each view in C.)"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


class _Memory:
    """A NumPy array interface for ``span`` elements of type ``typestr`` from
    ``address``, holding the array they lie under."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: np.ndarray, address: int, span: int, typestr: str,
                 writeable: bool) -> None:
        self.owner = owner
        self.__array_interface__ = {
            "data": (address, not writeable),
            "shape": (span,),
            "typestr": typestr,
            "version": 3,
        }


def flat(array: np.ndarray, typestr: str, base: int, span: int, *, writeable: bool) -> np.ndarray:
    """The memory under ``array`` as a 1-D array of ``span`` elements of ``typestr``
    from its lowest address, ``base`` such elements before its element 0."""
    size = span * np.dtype(typestr).itemsize
    # Writeable flags are read only for a writeable request (a broadcast_arrays result
    # warns when its flag is read).
    if base == 0 and size == array.nbytes and (not writeable or array.flags.writeable):
        words = _in_memory_order(array, typestr, writeable)  # it fills its memory
        if words is not None:
            return words
    owner = array.base
    if (type(owner) is np.ndarray and owner.nbytes == size
            and (owner.flags.c_contiguous or owner.flags.f_contiguous)
            and (not writeable or (array.flags.writeable and owner.flags.writeable))):
        # A view spanning the whole dense array it views (a 4096^2 array's diagonal: a
        # trace) lies from that array's start; the interface object costs ~3 us more (a
        # warm trace is ~25 us). An owner frozen after the view was made stays frozen.
        words = _in_memory_order(owner, typestr, writeable)
        if words is not None:
            return words
    address = array.__array_interface__["data"][0] - base * np.dtype(typestr).itemsize
    return np.asarray(_Memory(array, address, span, typestr, writeable))


def _in_memory_order(dense: np.ndarray, typestr: str, writeable: bool) -> np.ndarray | None:
    """A dense array's memory as a 1-D view of ``typestr`` in memory order, in ~1 us
    (the interface object takes ~5); None where ravel would copy."""
    flat_view = dense.ravel(order="K")
    if flat_view.base is None:
        return None
    words = flat_view.view(typestr)
    words.flags.writeable = writeable
    return words


@lru_cache(maxsize=256)
def memory_extent(extents: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """(elements from the lowest address to element 0, elements spanned); cached, since
    a plan's kernels ask it of the same layouts on every call."""
    low = sum((e - 1) * s for e, s in zip(extents, strides) if s < 0)
    high = sum((e - 1) * s for e, s in zip(extents, strides) if s > 0)
    return -low, high - low + 1
