"""Wall-clock timing with time.perf_counter: warm-up, calibration, then timed runs.

A run calls the function ``number`` times back to back and then synchronises the
device once (a no-op on the CPU; a CUDA stream synchronise on the GPU). ``number`` is
calibrated so one run lasts at least ``min_run_time``: fast calls are timed over
enough calls to rise above the clock's resolution and the loop's noise.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_CALLS_PER_RUN = 1 << 20


@dataclass(frozen=True)
class Timing:
    """Seconds per call.

    Attributes:
        median: The median over the runs of (run time / calls per run).
        best: The fastest run's seconds per call.
        runs: How many runs were timed.
        calls_per_run: How many calls each run made.
    """

    median: float
    best: float
    runs: int
    calls_per_run: int

    @classmethod
    def of(cls, samples: list[float], calls_per_run: int) -> Timing:
        """The Timing of per-call ``samples`` (one per run)."""
        return cls(statistics.median(samples), min(samples), len(samples), calls_per_run)


def no_sync() -> None:
    """The synchronise of a host backend: nothing to wait for."""


def run(call: Callable[[], Any], number: int, sync: Callable[[], None] = no_sync) -> float:
    """Seconds per call of one run of ``number`` calls followed by ``sync()``."""
    start = time.perf_counter()
    for _ in range(number):
        call()
    sync()
    return (time.perf_counter() - start) / number


def calibrate(
    call: Callable[[], Any],
    last: float,
    min_run_time: float,
    sync: Callable[[], None] = no_sync,
) -> int:
    """Calls per run so a run lasts at least ``min_run_time`` seconds.

    Args:
        call: The work.
        last: Seconds one call took last time (e.g. the warm-up).
        min_run_time: The target length of a run.
        sync: Waits for queued device work.
    """
    number = 1
    elapsed = last
    while elapsed < min_run_time and number < MAX_CALLS_PER_RUN:
        # Grow towards the target from the last estimate, at most 100x a step.
        scale = min(min_run_time / elapsed, 100.0) if elapsed > 0 else 100.0
        number = min(MAX_CALLS_PER_RUN, max(number + 1, math.ceil(number * scale)))
        elapsed = run(call, number, sync) * number
    return number


def measure(
    call: Callable[[], Any],
    *,
    repeat: int,
    min_run_time: float = 0.0,
    sync: Callable[[], None] = no_sync,
) -> Timing:
    """Time ``call`` on its own: one warm-up call, calibration, ``repeat`` runs.

    Example:
        >>> measure(lambda: sum(range(10)), repeat=3).runs
        3
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    number = calibrate(call, run(call, 1, sync), min_run_time, sync)
    return Timing.of([run(call, number, sync) for _ in range(repeat)], number)
