"""The engines whose worker threads keep spinning after a call returns (OpenBLAS's,
GNU OpenMP's), and until when: a timed call of another engine waits for them
(cpu_fallback.measure), and every measured call marks its own (left_spinning)."""

from __future__ import annotations

import time
from collections.abc import Collection

# Seconds the worker threads of an engine keep spinning after its call returns, taking
# CPUs from the next call's threads: OpenBLAS's about 0.12 s (a core kept busy, on the
# 2-core test host; a gathered small-K call timed in that window took 1.7x its time),
# GOMP's a few milliseconds; NumPy's own loops (a broadcast multiply) leave none. A
# variant's timed calls wait until the other engines' threads have gone to sleep.
SPIN_SECONDS = {"openmp": 0.01, "blas": 0.15, "numpy": 0.0}
# Until when (time.perf_counter) each engine's threads spin, from its last call.
until: dict[str, float] = {}


def left_spinning(engine: str, end: float | None = None) -> None:
    """Note that a call on ``engine`` returned at ``end`` (default: now), its threads
    spinning for SPIN_SECONDS more."""
    until[engine] = (time.perf_counter() if end is None else end) + SPIN_SECONDS[engine]


def others_until(engine: str, engines: Collection[str]) -> float:
    """Until when the threads of the ``engines`` other than ``engine`` spin (0: none)."""
    return max((end for name, end in until.items() if name != engine and name in engines),
               default=0.0)
