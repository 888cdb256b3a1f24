"""Plan caches: a bounded, thread-safe LRU keyed by value, and the process-wide cache of
two named levels (composed programs, backends' primitive plans).

Plans live as long as the process; what outlives it (measured route decisions,
cuTENSOR's plan cache) is kept by :mod:`gpu_tc.disk_cache`.
"""

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

    Keys are plain values (labels, extents, strides, dtypes, alignment, backend,
    device, options): never pointers, ``id()`` or ``hash()`` values. An evicted plan is
    only dropped: a caller still holding it can keep using it.

    Each entry carries the tick of its last use, so a hit hashes its key once and
    updates one list slot; the least recently used entry is found when evicting.

    Args:
        capacity: The most plans kept.

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


class ProcessCache:
    """The process-wide cache: ``programs`` (composed plans of calls, keyed by
    :class:`gpu_tc.keys.ProgramKey` or a backend's warm key) over ``primitives`` (the
    backends' plans, keyed by :class:`gpu_tc.keys.PrimitiveKey`), which the programs
    of equivalent calls share.

    The levels share one capacity, one lock and one clock: the least recently used
    plan of either goes first. ``stats()`` adds the two levels up.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._lock = threading.Lock()
        self._ticks = itertools.count()
        self._capacity = _check_capacity(capacity)
        self.programs = _Level(self)
        self.primitives = _Level(self)

    @property
    def levels(self) -> tuple[PlanCache, PlanCache]:
        """The two levels: programs, then primitive plans."""
        return self.programs, self.primitives

    @property
    def capacity(self) -> int:
        """The most plans both levels keep together; setting it evicts the least
        recently used extras."""
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        with self._lock:
            self._capacity = _check_capacity(value)
            self._evict_locked()

    def _evict_locked(self) -> None:
        """Drop least recently used plans of either level until both fit (lock held)."""
        levels = self.levels
        while sum(len(level._entries) for level in levels) > self._capacity:
            level = min(
                (lv for lv in levels if lv._entries),
                key=lambda lv: min(entry[1] for entry in lv._entries.values()),
            )
            entries = level._entries
            del entries[min(entries, key=lambda k: entries[k][1])]
            level._evictions += 1

    def stats(self) -> CacheStats:
        """Hits, misses, evictions and size of both levels together; the capacity."""
        both = [level.stats() for level in self.levels]
        return CacheStats(
            sum(s.hits for s in both),
            sum(s.misses for s in both),
            sum(s.evictions for s in both),
            sum(s.size for s in both),
            self._capacity,
        )

    def clear(self) -> None:
        """Drop every plan of both levels and reset the counters."""
        for level in self.levels:
            level.clear()

    def __len__(self) -> int:
        return len(self.programs) + len(self.primitives)

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"ProcessCache(programs={len(self.programs)}, primitives={len(self.primitives)}, "
            f"size={s.size}, capacity={s.capacity}, hits={s.hits}, misses={s.misses}, "
            f"evictions={s.evictions})"
        )


class _Level(PlanCache):
    """One level of a ProcessCache: its own plans and counters, the owner's capacity,
    lock and clock."""

    def __init__(self, owner: ProcessCache) -> None:
        self._owner = owner
        self._lock = owner._lock
        self._ticks = owner._ticks
        self._entries = {}
        self._hits = self._misses = self._evictions = 0

    @property
    def _capacity(self) -> int:  # type: ignore[override]
        return self._owner.capacity

    @property
    def capacity(self) -> int:
        """The owner's capacity (both levels together)."""
        return self._owner.capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self._owner.capacity = value

    def _evict(self) -> None:
        self._owner._evict_locked()


PLAN_CACHE = ProcessCache()


def plan_cache() -> ProcessCache:
    """The process-wide plan cache (both levels)."""
    return PLAN_CACHE
