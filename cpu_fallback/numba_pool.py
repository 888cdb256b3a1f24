"""numba's thread pool, shared by its parallel kernels (cpu_fallback.sum_kernel,
pairwise_kernel): started with idle threads that spin briefly, then sleep, and launched
one at a time (cpu_fallback.openmp); and how those kernels are compiled. Imports numba:
imported only by those kernel modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba

from . import openmp

_STARTED: list[bool] = []  # [True] once numba's threads were started (see threads())


def threads() -> int:
    """How many threads numba's parallel kernels use (numba's count, which the user may
    set).

    The first call starts numba's threads inside :func:`openmp.spin_environment`: where
    numba's threading layer is OpenMP, its libgomp (the compiled copy's too) spins
    briefly when idle.
    """
    if not _STARTED:
        with openmp.LOCK:
            if not _STARTED:
                _start_threads()
                _STARTED.append(True)
    return int(numba.get_num_threads())


def _start_threads() -> None:
    with openmp.spin_environment():
        numba.get_num_threads()  # loads the threading layer and its OpenMP library


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
    with openmp.LOCK:
        kernel(*arguments)
