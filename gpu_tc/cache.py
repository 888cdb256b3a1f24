"""PlanCache: a bounded, thread-safe LRU of plans keyed by value."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from .errors import OptionsError

DEFAULT_CAPACITY = 512


@dataclass(frozen=True)
class CacheStats:
    """Counters of a PlanCache since it was made or last cleared."""

    hits: int
    misses: int
    evictions: int
    size: int
    capacity: int


class PlanCache:
    """A bounded LRU of plans.

    Keys are tuples of plain values (labels, extents, strides, dtypes, alignment,
    backend, device, options): never pointers, ``id()`` or ``hash()`` values. An
    evicted plan is only dropped: a caller still holding it can keep using it.

    Each entry carries the tick of its last use, so a hit hashes its key once and
    updates one list slot; the least recently used entry is found when evicting.

    Example:
        >>> cache = PlanCache(capacity=2)
        >>> cache.get_or_build(("k",), lambda: "plan")
        'plan'
        >>> cache.stats().misses
        1
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, list[Any]] = {}  # key -> [plan, last-use tick]
        self._ticks = itertools.count()
        self._capacity = _check_capacity(capacity)
        self._hits = self._misses = self._evictions = 0

    @property
    def capacity(self) -> int:
        """The most plans kept; setting it evicts the least recently used extras."""
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        with self._lock:
            self._capacity = _check_capacity(value)
            self._evict()

    def peek(self, key: Hashable) -> Any:
        """The plan under ``key`` (counted as a hit and marked as just used), or None.

        Lock-free: a dict lookup and a list store are atomic under the GIL, so a hit
        costs no lock (a warm call's whole budget is a few microseconds); the hit
        counter may miss an increment when threads race on it, never a plan.
        """
        entry = self._entries.get(key)
        if entry is None:
            return None
        entry[1] = next(self._ticks)
        self._hits += 1
        return entry[0]

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The plan stored under ``key``, built by ``build()`` on a miss.

        The build runs outside the lock, so a slow build never blocks other keys;
        when two threads build the same key at once, the first stored plan wins.
        """
        plan = self.peek(key)
        if plan is not None:
            return plan
        with self._lock:
            self._misses += 1
        built = build()
        with self._lock:
            entry = self._entries.setdefault(key, [built, 0])
            entry[1] = next(self._ticks)
            self._evict()
        return entry[0]

    def stats(self) -> CacheStats:
        """Hits, misses, evictions, current size and capacity."""
        with self._lock:
            return CacheStats(
                self._hits, self._misses, self._evictions, len(self._entries), self._capacity
            )

    def clear(self) -> None:
        """Drop every plan and reset the counters."""
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = self._evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"PlanCache(size={s.size}, capacity={s.capacity}, hits={s.hits}, "
            f"misses={s.misses}, evictions={s.evictions})"
        )

    def _evict(self) -> None:
        entries = self._entries
        while len(entries) > self._capacity:
            oldest = min(entries, key=lambda k: entries[k][1])
            del entries[oldest]
            self._evictions += 1


def _check_capacity(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OptionsError(f"plan cache capacity must be a non-negative int, got {value!r}")
    return value


PLAN_CACHE = PlanCache()


def plan_cache() -> PlanCache:
    """The process-wide plan cache."""
    return PLAN_CACHE
