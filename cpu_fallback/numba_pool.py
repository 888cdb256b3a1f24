"""numba's thread pool, shared by the parallel kernels (cpu_fallback.tiles, sum_kernel,
pairwise_kernel): started with idle threads that spin briefly, then sleep, and launched
by one caller at a time; and how those kernels are compiled. Imports numba: imported
only by those kernel modules.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numba

# One parallel launch at a time: numba's workqueue threading layer (the one left where
# neither TBB nor OpenMP is installed) aborts on concurrent launches from two threads.
LOCK = threading.Lock()
_STARTED: list[bool] = []  # [True] once numba's threads were started (see threads())


# OpenMP's (libgomp's) busy-wait after a parallel region, in spins, before the threads
# sleep: long enough that the next launch of a run of back-to-back kernels finds them
# awake, short enough that a BLAS call soon after gets the cores back. On a 2-core
# Zen 3 VM a worker spun ~0.4 ms after each launch at 10,000 spins and ~3.2 ms at
# 100,000; a packed GEMM route (a parallel copy, then a 2.5 ms dgemm whose threads
# shared a core with the spinning worker) took 7.1-8.4 ms at 100,000 and 5.4-5.8 ms
# at 10,000, while back-to-back 4096^2 sums ran alike (4.0-4.4 ms either way).
SPIN_COUNT = 10_000


def threads() -> int:
    """How many threads a parallel copy uses (numba's count, which the user may set).

    The first call starts numba's OpenMP threads with a short busy-wait when idle
    (SPIN_COUNT), unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT. libgomp's
    own default spins 30x longer and took the cores the next BLAS call needs (a 1296^3
    dgemm right after a parallel copy ran 1.3x slower on 2 cores); threads that sleep
    at once (OMP_WAIT_POLICY=PASSIVE) wake late on a virtual machine, whose idle vCPU
    halts: a 2-thread sum of a 4096^2 float64 array ran 4.1-4.5 ms with the short
    spin, 4.9-6.6 ms (median, some calls twice as slow) with passive threads. The
    variable is set only while the threads start, so libraries loaded later see the
    user's environment.
    """
    if not _STARTED:
        with LOCK:
            if not _STARTED:
                _start_threads()
                _STARTED.append(True)
    return int(numba.get_num_threads())


def _start_threads() -> None:
    chosen = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
    if not chosen:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    try:
        numba.get_num_threads()  # loads the threading layer and its OpenMP library
    finally:
        if not chosen:
            del os.environ["GOMP_SPINCOUNT"]


def jit(kernel: Callable[..., None], parallel: bool) -> Callable[..., None]:
    """``kernel`` compiled without the GIL, its prange loops on numba's threads where
    ``parallel``, kept in numba's on-disk cache (or compiled in every process where
    numba finds no directory it may cache in).

    A kernel's one-thread and threaded forms must be two functions: the on-disk cache
    keys a function by its source and argument types, not by ``parallel``, so
    whichever was compiled first would be loaded for both (a threaded kernel run at
    one thread's speed)."""
    try:
        return numba.njit(kernel, cache=True, nogil=True, parallel=parallel)
    except RuntimeError as err:
        if "no locator available" not in str(err):
            raise
        return numba.njit(kernel, nogil=True, parallel=parallel)


def launch(kernel: Callable[..., None], *arguments: Any) -> None:
    """Run a threaded kernel: numba's threads started as :func:`threads` starts them,
    one launch at a time."""
    threads()
    with LOCK:
        kernel(*arguments)
