"""OpenMP's threads, shared by the compiled copy (cpu_fallback.tiles), the compiled
sums (cpu_fallback.sum_kernel, pairwise_kernel), the small-K GEMM (cpu_fallback.small_k)
and MKL's GEMMs (cpu_fallback.mkl): all load the same libgomp, whose idle threads spin
SPIN_COUNT times before they sleep, and all launch one at a time. A worker of gpu_tc's
kernels that starts a region on the launching thread's CPU moves to the main thread's
other CPUs (kernel_common.h; not where OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY
bind the threads). A process forked from one that loaded this module copies on its
calling thread only, and runs no MKL (:func:`forked`). Imports nothing compiled.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

_FORKED: list[bool] = []  # [True] in a child forked after this module was imported

# One parallel launch at a time: two OpenMP teams at once would share the cores with
# each other.
LOCK = threading.Lock()

# OpenMP's (libgomp's) busy-wait after a parallel region, in spins, before the threads
# sleep: long enough that the next launch of a run of back-to-back kernels finds them
# awake, short enough that a BLAS call soon after gets the cores back. On a 2-core
# Zen 3 VM a worker spun ~0.4 ms after each launch at 10,000 spins and ~3.2 ms at
# 100,000; a packed GEMM route (a parallel copy, then a 2.5 ms dgemm whose threads
# shared a core with the spinning worker) took 7.1-8.4 ms at 100,000 and 5.4-5.8 ms
# at 10,000, while back-to-back 4096^2 sums ran alike (4.0-4.4 ms either way).
# libgomp's own default spins 30x longer and took the cores the next BLAS call needs
# (a 1296^3 dgemm right after a parallel copy ran 1.3x slower on 2 cores); threads
# that sleep at once (OMP_WAIT_POLICY=PASSIVE) wake late on a virtual machine, whose
# idle vCPU halts: a 2-thread sum of a 4096^2 float64 array ran 4.1-4.5 ms with the
# short spin, 4.9-6.6 ms (median, some calls twice as slow) with passive threads.
SPIN_COUNT = 10_000


@contextlib.contextmanager
def spin_environment() -> Iterator[None]:
    """GOMP_SPINCOUNT=SPIN_COUNT while the body runs (the body loads libgomp, which
    reads it once, when it loads), unless the user set OMP_WAIT_POLICY or
    GOMP_SPINCOUNT; the environment is left as found, so that libraries loaded later
    see the user's."""
    chosen = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
    if not chosen:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    try:
        yield
    finally:
        if not chosen:
            del os.environ["GOMP_SPINCOUNT"]


def forked() -> bool:
    """Whether this process was forked from one that had loaded OpenMP's threads: libgomp
    is not fork-safe, and a parallel region in the child waits forever on the parent's
    threads, which the child lacks (a forked child's parallel copy hung here)."""
    return bool(_FORKED)


os.register_at_fork(after_in_child=lambda: _FORKED.append(True))
