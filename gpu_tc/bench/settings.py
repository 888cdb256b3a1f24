"""How a benchmark run measures, and where its operands live."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .timing import no_sync


@dataclass(frozen=True)
class Settings:
    """How a run measures.

    Attributes:
        backend: "cpu" (NumPy operands) or "gpu" (CuPy operands).
        quick: Shrunk extents (see :mod:`gpu_tc.bench.suites`).
        scale: Every extent of the tccg cases times this (rounded, at least 1).
        repeat: Timed runs per implementation; the median is reported.
        warmup: Untimed calls first (the first one's result is checked).
        min_run_time: Seconds each timed run lasts at least (small cases loop).
        settle: Seconds of pause before each implementation's warm-up and each timed
            run, so the thread pools of the library run before (OpenBLAS, OpenMP)
            stop spinning first; every timed run follows one untimed call, paused or
            not (see :mod:`gpu_tc.bench.rounds`).
        memory: Also measure each implementation's peak extra memory, after the
            timings of each group of cases, in a fresh process per implementation (see
            :mod:`gpu_tc.bench.memory`; not on the gpu backend, nor off Linux).
        command: The command line that made the run, stored in the report.
    """

    backend: str = "cpu"
    quick: bool = False
    scale: float = 1.0
    repeat: int = 3
    warmup: int = 1
    min_run_time: float = 0.02
    settle: float = 0.15
    memory: bool = False
    command: str = ""


@dataclass(frozen=True)
class Device:
    """Where operands live: the array module, host-to-device, and its synchronise."""

    xp: Any
    put: Callable[[np.ndarray], Any]
    sync: Callable[[], None]


def device(backend: str) -> Device:
    """NumPy for "cpu"; CuPy on the current device and stream for "gpu"."""
    if backend == "cpu":
        return Device(np, lambda x: x, no_sync)
    import cupy

    return Device(cupy, cupy.asarray, lambda: cupy.cuda.get_current_stream().synchronize())
