"""A pool of large host buffers, so that a new result or temporary skips the page faults.

Touching fresh memory costs the kernel a page fault per page: on the reference host,
writing a new 128 MiB array takes three times as long as writing an existing one. The
pool keeps the large buffers it hands out; a buffer is idle again once nothing but the
pool refers to it (every NumPy view of it holds a reference to it), and the next request
of its size class gets it back. Idle memory is bounded by ``limit`` bytes; the limit
comes from the environment variable ``GPU_TC_HOST_POOL_BYTES`` (0 turns the pool off)
and defaults to an eighth of physical memory, at most 2 GiB. The pool never holds more
than the most bytes its arrays have used at once: when a new buffer is made, idle ones
of other sizes go first, so keeping them never raises the process's peak memory.

Arrays from the pool are views: ``result.base`` is the pooled buffer, and
``result.flags.owndata`` is False. Each starts on a 64-byte boundary (a cache line and
an AVX-512 vector), where NumPy's large arrays start 16 bytes past a page: a buffer
holds its size class and ALIGN bytes more, so that its first boundary can start it.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_tc.errors import OptionsError

# Smaller requests go to malloc, whose heap reuses them. glibc maps larger ones (from
# 128 KiB at first) afresh, page faults and all, until its threshold has grown past
# their size: a 4 MB result took 1.0-1.4 ms a call in a process's first four calls
# against 0.15 ms after, long enough to mislead the timings of a measured plan's first
# calls. Pooled buffers fault once.
MIN_BYTES = 256 << 10
# Size classes: a request rounds up to a power of two below GRANULE, else to a multiple
# of GRANULE (a huge page). The rounded-up tail of a buffer is never touched, so it
# costs address space, not memory.
GRANULE = 2 << 20
# Where a pooled array starts: a whole number of these bytes from address 0. Starting
# 16 bytes past a page, as NumPy's large arrays do, each vector store of a kernel writing
# D along its rows spans two cache lines: the small-K kernel's 1200 x 1200 x 12 float32
# product took 0.188-0.194 ms into such a D against 0.175-0.181 ms into an aligned one
# (medians of rounds of 400 calls, 2-core AVX-512 host). The extra bytes share the page
# that malloc's header already spills into.
ALIGN = 64
# The most buffers the pool tracks (idle and in use); beyond it, plain numpy.empty.
MAX_BUFFERS = 64
ENV_LIMIT = "GPU_TC_HOST_POOL_BYTES"


@dataclass(frozen=True)
class PoolStats:
    """What the pool holds: buffers in use by live arrays, and idle ones."""

    in_use_bytes: int
    idle_bytes: int
    buffers: int
    hits: int
    misses: int
    limit: int


def _refs(buffers: list[np.ndarray], index: int) -> int:
    """The reference count of ``buffers[index]`` (only this idiom reads it)."""
    return sys.getrefcount(buffers[index])


# What _refs() reads for a buffer that only its list refers to: measured, not assumed,
# since it depends on how the interpreter passes arguments.
_IDLE_REFS = _refs([np.empty(0, np.uint8)], 0)


def _size(buffer: np.ndarray) -> int:
    """The size class a pooled buffer serves (its bytes less the room to align)."""
    return buffer.nbytes - ALIGN


def _idle(buffers: list[np.ndarray]) -> list[int]:
    """The indexes of the buffers no array refers to."""
    return [i for i in range(len(buffers)) if _refs(buffers, i) <= _IDLE_REFS]


def default_limit() -> int:
    """The idle-bytes limit: ``GPU_TC_HOST_POOL_BYTES`` or min(RAM / 8, 2 GiB)."""
    text = os.environ.get(ENV_LIMIT)
    if text is not None:
        try:
            value = int(text)
        except ValueError:
            raise OptionsError(f"{ENV_LIMIT}={text!r} is not a whole number of bytes") from None
        if value < 0:
            raise OptionsError(f"{ENV_LIMIT}={text!r} is negative")
        return value
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    return min(memory // 8, 2 << 30)


class HostPool:
    """Large NumPy buffers reused once idle; thread-safe.

    Example:
        >>> pool = HostPool(limit=64 << 20)
        >>> x = pool.empty((1024, 1024), "float64")
        >>> x.shape, pool.stats().in_use_bytes
        ((1024, 1024), 8388608)
        >>> del x
        >>> pool.stats().idle_bytes
        8388608
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = default_limit() if limit is None else _check_limit(limit)
        self._buffers: list[np.ndarray] = []  # oldest first
        self._starts: dict[int, int] = {}  # id(buffer): the offset of its first boundary
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._peak_in_use = 0

    @property
    def limit(self) -> int:
        """The most idle bytes kept; 0: the pool is off."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = _check_limit(value)
        with self._lock:
            self._trim()

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A new C-ordered array, from an idle pooled buffer when one fits."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < MIN_BYTES or nbytes > self._limit:
            return np.empty(shape, dtype)
        size = (-(-nbytes // GRANULE) * GRANULE if nbytes > GRANULE
                else 1 << (nbytes - 1).bit_length())
        with self._lock:
            buffer = self._take(size)
            if buffer is None:
                self._make_room(size)
                buffer = np.empty(size + ALIGN, np.uint8)
                start = -buffer.ctypes.data % ALIGN
                if len(self._buffers) < MAX_BUFFERS:
                    self._buffers.append(buffer)
                    self._starts[id(buffer)] = start
                self._misses += 1
            else:
                start = self._starts[id(buffer)]
                self._hits += 1
            # The view refers to the buffer before the lock is released: not idle.
            return np.ndarray(shape, dtype, buffer=buffer, offset=start)

    def stats(self) -> PoolStats:
        """A snapshot of the pool."""
        with self._lock:
            idle = sum(_size(self._buffers[i]) for i in _idle(self._buffers))
            total = sum(_size(b) for b in self._buffers)
            return PoolStats(
                total - idle, idle, len(self._buffers), self._hits, self._misses, self._limit
            )

    def clear(self) -> None:
        """Give every idle buffer back to the allocator (arrays in use stay valid)."""
        with self._lock:
            self._drop(set(_idle(self._buffers)))
            self._peak_in_use = sum(_size(b) for b in self._buffers)

    def _take(self, size: int) -> np.ndarray | None:
        """The idle buffer of ``size`` bytes taken last, moved to the newest end; or None.

        The one taken last was written last: the caches hold most of it. Taking the
        oldest, two idle buffers of one size (two results once alive at once) took
        turns from call to call, and a loop's results spanned twice the cache. The
        newest is looked at first, alone: a loop's results take it call after call.
        """
        newest = len(self._buffers) - 1
        if (newest >= 0 and _size(self._buffers[newest]) == size
                and _refs(self._buffers, newest) <= _IDLE_REFS):
            return self._buffers[newest]
        for index in reversed(_idle(self._buffers)):
            if _size(self._buffers[index]) == size:
                self._buffers.append(self._buffers.pop(index))
                return self._buffers[-1]
        return None

    def _make_room(self, size: int) -> None:
        """Before a new buffer of ``size`` bytes: drop the oldest idle buffers until the
        pool, the new buffer included, holds no more than the most bytes ever in use at
        once (and can track one more buffer)."""
        idle = _idle(self._buffers)
        idle_bytes = sum(_size(self._buffers[i]) for i in idle)
        in_use = sum(_size(b) for b in self._buffers) - idle_bytes + size
        self._peak_in_use = max(self._peak_in_use, in_use)
        allowed = min(self._limit, self._peak_in_use - in_use)
        self._trim(allowed, need_slot=len(self._buffers) >= MAX_BUFFERS)

    def _trim(self, allowed: int | None = None, need_slot: bool = False) -> None:
        """Drop the oldest idle buffers until the idle bytes fit ``allowed`` (default:
        the limit) and, with ``need_slot``, until the pool can track one more buffer."""
        idle = _idle(self._buffers)
        allowed = self._limit if allowed is None else allowed
        excess = sum(_size(self._buffers[i]) for i in idle) - allowed
        slots = len(self._buffers) - MAX_BUFFERS + 1 if need_slot else 0
        drop = set()
        for index in idle:
            if excess <= 0 and slots <= 0:
                break
            drop.add(index)
            excess -= _size(self._buffers[index])
            slots -= 1
        if drop:
            self._drop(drop)

    def _drop(self, indexes: set[int]) -> None:
        """Stop tracking the buffers at these indexes (live arrays keep theirs)."""
        for index in indexes:
            del self._starts[id(self._buffers[index])]
        self._buffers = [b for i, b in enumerate(self._buffers) if i not in indexes]


def _check_limit(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OptionsError(
            f"the host pool limit must be a whole number of bytes >= 0, not {value!r}"
        )
    return value


HOST_POOL = HostPool()


def allocator(nbytes: int) -> Callable[[tuple[int, ...], Any], np.ndarray]:
    """How a plan allocates its new results of ``nbytes``, chosen once per plan:
    numpy.empty below MIN_BYTES (a small warm call skips the pool's lookup), else
    HOST_POOL.empty."""
    return np.empty if nbytes < MIN_BYTES else HOST_POOL.empty
