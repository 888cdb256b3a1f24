"""gpu_tc's Python worker threads, one per CPU: the split ufunc reductions
(cpu_fallback.reduction) and the loops of GEMMs split over MKL on one thread each
(cpu_fallback.contraction) hand their parts to them; the calling thread runs a part too."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

PREFIX = "gpu_tc-worker"
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def threads() -> int:
    """The threads a split may use: one per CPU."""
    return os.cpu_count() or 1


def pool() -> ThreadPoolExecutor:
    """The worker threads, started on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(threads(), thread_name_prefix=PREFIX)
        return _POOL


def on_worker() -> bool:
    """Whether the calling thread is one of the workers (a part that splits again would
    wait on the others' queue)."""
    return threading.current_thread().name.startswith(PREFIX)


def _forget_in_child() -> None:
    """A forked child has none of the parent's threads: it starts its own pool."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
