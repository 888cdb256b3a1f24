"""gpu_tc's Python worker threads, one per CPU: the split ufunc reductions
(cpu_fallback.reduction) and the loops of GEMMs split over MKL on one thread each
(cpu_fallback.contraction) hand their parts to them; the calling thread runs a part too."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")

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


def share(items: Iterable[Item], count: int,
          run: Callable[[int, Iterator[Item]], None]) -> list[bool]:
    """``run(k, taken)`` on the calling thread (k = 0) and ``count - 1`` workers, where
    ``taken`` yields the next of ``items`` until none is left (a thread slowed by the
    host takes fewer) or a thread has failed. Returns, per thread, whether it took any.

    Raises:
        The first thread's exception, once every thread has ended (none still runs
        when this returns or raises).
    """
    left, lock = iter(items), threading.Lock()
    took, failed = [False] * count, threading.Event()

    def taken(k: int) -> Iterator[Item]:
        while not failed.is_set():
            with lock:
                try:
                    item = next(left)
                except StopIteration:
                    return
            took[k] = True
            yield item

    def work(k: int) -> None:
        try:
            run(k, taken(k))
        except BaseException:
            failed.set()
            raise

    jobs = [pool().submit(work, k) for k in range(1, count)]
    try:
        work(0)
    finally:
        futures.wait(jobs)
    for job in jobs:
        job.result()
    return took


def _forget_in_child() -> None:
    """A forked child has none of the parent's threads: it starts its own pool."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
