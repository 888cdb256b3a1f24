"""numba's thread pool, shared by the parallel kernels (cpu_fallback.tiles,
cpu_fallback.sum_kernel): started with idle threads that wait passively, and launched
by one caller at a time. Imports numba: imported only by those kernel modules.
"""

from __future__ import annotations

import os
import threading

import numba

# One parallel launch at a time: numba's workqueue threading layer (the one left where
# neither TBB nor OpenMP is installed) aborts on concurrent launches from two threads.
LOCK = threading.Lock()
_STARTED: list[bool] = []  # [True] once numba's threads were started (see threads())


def threads() -> int:
    """How many threads a parallel copy uses (numba's count, which the user may set).

    The first call starts numba's OpenMP threads told to wait passively when idle,
    unless the user set OMP_WAIT_POLICY: by default they spin after each parallel copy
    and take the cores the next BLAS call needs (a 1296^3 dgemm right after a parallel
    copy ran 1.3x slower on 2 cores). The variable is set only while the threads start,
    so libraries loaded later see the user's environment.
    """
    if not _STARTED:
        with LOCK:
            if not _STARTED:
                _start_passive_threads()
                _STARTED.append(True)
    return int(numba.get_num_threads())


def _start_passive_threads() -> None:
    chosen = "OMP_WAIT_POLICY" in os.environ
    if not chosen:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        numba.get_num_threads()  # loads the threading layer and its OpenMP library
    finally:
        if not chosen:
            del os.environ["OMP_WAIT_POLICY"]
