"""Emulated device memory: 256-byte aligned host buffers found again by address.

A device pointer here is a real address inside an :class:`Allocation`. The libraries
turn (pointer, extents, strides) back into a NumPy view only after checking what a GPU
would fault on or silently corrupt: a pointer outside every live allocation, an
allocation of another device, elements past its end, and overlapping tensors.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import runtime

ALIGNMENT = 256  # cudaMalloc's and CuPy's pool's guarantee
EXACT_OVERLAP_BYTES = 1 << 22  # above this, overlap is judged by address spans


class IllegalAddress(RuntimeError):
    """What a GPU would report as cudaErrorIllegalAddress (or not at all: corrupt data)."""


class Allocation:
    """One device allocation: ``nbytes`` at ``start``, on ``device``."""

    __slots__ = ("device", "start", "nbytes", "buffer", "__weakref__")

    def __init__(self, nbytes: int, device: int) -> None:
        runtime.MEMORY_POOL.reserve(nbytes, device)
        raw = np.empty(nbytes + ALIGNMENT, np.uint8)
        offset = -raw.ctypes.data % ALIGNMENT
        self.buffer = raw[offset : offset + nbytes]
        self.buffer.fill(0xFF)  # fresh memory reads as NaN: reading it unwritten shows
        self.device = device
        self.nbytes = nbytes
        self.start = int(self.buffer.ctypes.data) if nbytes else 0
        if nbytes:
            _register(self)
        weakref.finalize(self, _release, self.start, nbytes, device)

    def __repr__(self) -> str:
        return f"<Allocation {self.nbytes} bytes at {self.start:#x} on device {self.device}>"


# Re-entrant: the garbage collector may run a finalizer that takes it (a freed
# allocation, a destroyed object) while this thread holds it.
_lock = threading.RLock()
_starts: list[int] = []
_live: dict[int, weakref.ref[Allocation]] = {}


def _register(allocation: Allocation) -> None:
    with _lock:
        bisect.insort(_starts, allocation.start)
        _live[allocation.start] = weakref.ref(allocation)


def _release(start: int, nbytes: int, device: int) -> None:
    if nbytes:
        with _lock:
            index = bisect.bisect_left(_starts, start)
            if index < len(_starts) and _starts[index] == start:
                del _starts[index]
            _live.pop(start, None)
    runtime.MEMORY_POOL.release(nbytes, device)


def allocate(nbytes: int, device: int | None = None) -> Allocation:
    """A new allocation on ``device`` (default: the current one), counted by the pool."""
    return Allocation(int(nbytes), runtime.current_device() if device is None else device)


def find(pointer: int) -> Allocation | None:
    """The live allocation holding the byte at ``pointer``, if any."""
    with _lock:
        index = bisect.bisect_right(_starts, pointer) - 1
        if index < 0:
            return None
        ref = _live.get(_starts[index])
    allocation = ref() if ref is not None else None
    if allocation is None or pointer >= allocation.start + allocation.nbytes:
        return None
    return allocation


@dataclass(frozen=True)
class Region:
    """The elements of one tensor: base pointer, element size, extents, strides (elements)."""

    pointer: int
    itemsize: int
    extents: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def empty(self) -> bool:
        return 0 in self.extents

    def span(self) -> tuple[int, int]:
        """[first, last) byte addresses any element touches."""
        low = sum(min(0, (e - 1) * s) for e, s in zip(self.extents, self.strides))
        high = sum(max(0, (e - 1) * s) for e, s in zip(self.extents, self.strides))
        return self.pointer + low * self.itemsize, self.pointer + (high + 1) * self.itemsize

    def addresses(self) -> np.ndarray:
        """The start address of every element (int64, in index order)."""
        offsets = np.zeros((), np.int64)
        for extent, stride in zip(self.extents, self.strides):
            offsets = offsets[..., None] + np.arange(extent, dtype=np.int64) * stride
        return (self.pointer + offsets * self.itemsize).ravel()


def is_device_pointer(pointer: int) -> bool:
    """Whether ``pointer`` lies in emulated device memory."""
    return find(pointer) is not None


def view(region: Region, dtype: np.dtype, device: int, what: str) -> np.ndarray:
    """A NumPy view of ``region`` after the checks a GPU would fail (IllegalAddress).

    Raises:
        IllegalAddress: the elements leave every live allocation of ``device``.
    """
    if region.empty:
        return np.empty(region.extents, dtype)
    first, last = region.span()
    allocation = find(first)
    if allocation is None:
        raise IllegalAddress(
            f"{what}: address {first:#x} is in no live device allocation (a host pointer, "
            "a freed buffer, or an offset before the array)"
        )
    if allocation.device != device:
        raise IllegalAddress(
            f"{what}: memory of device {allocation.device} used on device {device}"
        )
    if last > allocation.start + allocation.nbytes:
        raise IllegalAddress(
            f"{what}: elements reach {last - allocation.start} bytes into an allocation of "
            f"{allocation.nbytes} bytes"
        )
    return np.ndarray(
        region.extents,
        dtype,
        buffer=allocation.buffer,
        offset=region.pointer - allocation.start,
        strides=tuple(s * region.itemsize for s in region.strides),
    )


def overlap(a: Region, b: Region) -> bool:
    """Whether any byte of an element of ``a`` is a byte of an element of ``b``."""
    if a.empty or b.empty:
        return False
    (a0, a1), (b0, b1) = a.span(), b.span()
    if a1 <= b0 or b1 <= a0:
        return False
    if max(a1 - a0, b1 - b0) > EXACT_OVERLAP_BYTES:
        return True  # conservative for large tensors
    a_bytes = (a.addresses()[:, None] + np.arange(a.itemsize)).ravel()
    b_bytes = (b.addresses()[:, None] + np.arange(b.itemsize)).ravel()
    return bool(np.intersect1d(a_bytes, b_bytes).size)


def self_overlap(region: Region) -> bool:
    """Whether two elements of ``region`` share an address (writing it would race)."""
    if region.empty:
        return False
    span = 0  # axes sorted by |stride|, each past the span of the smaller ones: no overlap
    for stride, extent in sorted((abs(s), e) for e, s in zip(region.extents, region.strides)
                                 if e > 1):
        if stride <= span:
            break
        span += stride * (extent - 1)
    else:
        return False
    addresses = region.addresses()
    return bool(np.unique(addresses).size != addresses.size)


def read_host(pointer: int, dtype: np.dtype, count: int = 1) -> np.ndarray:
    """``count`` values of ``dtype`` read from host memory at ``pointer`` (a copy).

    Raises:
        IllegalAddress: the pointer is null or points into device memory.
    """
    if pointer == 0 or is_device_pointer(pointer):
        kind = "null" if pointer == 0 else "a device pointer"
        raise IllegalAddress(f"host pointer {pointer:#x} expected, got {kind}")
    raw = (ctypes.c_char * (dtype.itemsize * count)).from_address(pointer)
    return np.frombuffer(bytes(raw), dtype, count).copy()


def write_host(pointer: int, values: np.ndarray) -> None:
    """Write ``values`` to host memory at ``pointer``."""
    if pointer == 0 or is_device_pointer(pointer):
        raise IllegalAddress(f"host pointer {pointer:#x} expected for an output buffer")
    data = np.ascontiguousarray(values).tobytes()
    ctypes.memmove(pointer, data, len(data))


def host_ints(value: int | Sequence[int], count: int, dtype: str) -> tuple[int, ...]:
    """A binding's array argument: a sequence of ints, or a host address of ``count`` values."""
    if isinstance(value, int):
        return tuple(int(x) for x in read_host(value, np.dtype(dtype), count)) if count else ()
    return tuple(int(x) for x in value)
