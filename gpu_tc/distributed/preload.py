"""Preloaded into every ``gpu-tc worker`` (and scheduler): gpu_tc imported before the
first task, its state logged at start and reported in each heartbeat.

A worker's ``metrics["gpu_tc"]`` (``client.scheduler_info()["workers"][address]
["metrics"]["gpu_tc"]``) holds gpu_tc's version, the GPU it sees (or None), its plan
cache (plans held, hits and misses) and its persistent cache (``cache``: the directory,
or None when off, and the entries restored from it, saved to it and ignored).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from typing import Any

import gpu_tc
from gpu_tc import disk_cache

logger = logging.getLogger("gpu_tc.worker")


def state(worker: Any = None) -> dict[str, Any]:
    """gpu_tc's state in this process, as the heartbeat reports it."""
    stats = gpu_tc.plan_cache().stats()
    return {"version": gpu_tc.__version__, "gpu": _gpu(), "plans": stats.size,
            "hits": stats.hits, "misses": stats.misses, "cache": disk_cache.stats(),
            "pid": os.getpid()}


def dask_setup(server: Any) -> None:
    """dask's preload hook: log gpu_tc's state; on a worker, add it to the heartbeat."""
    found = state()
    cache = found["cache"]
    logger.info("gpu_tc %s on %s: GPU %s; plan cache %d plans (%d hits, %d misses); "
                "persistent cache %s (%d restored, %d saved)",
                found["version"], getattr(server, "address", "?"), found["gpu"] or "none",
                found["plans"], found["hits"], found["misses"],
                cache["directory"] or "off (GPU_TC_CACHE_DIR is empty)", cache["restored"],
                cache["saved"])
    metrics = getattr(server, "metrics", None)
    if isinstance(metrics, dict):  # a Worker (a Scheduler has no such hook)
        metrics["gpu_tc"] = state


@functools.cache
def _gpu() -> str | None:
    """The first visible GPU's description, probed once (None without CuPy or a GPU)."""
    if importlib.util.find_spec("cupy") is None:
        return None
    from ..bench.environment import gpu_status

    status = gpu_status()
    return status.devices[0] if status.available else None
