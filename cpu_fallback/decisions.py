"""Measured route decisions kept across processes (the persistent cache's CPU part).

A :class:`cpu_fallback.measure.Choice` that has timed its variants saves which one it
kept, with each variant's time, under ``<cache dir>/cpu-routes/<host>/``; a later process
planning the same problem on the same host starts from that choice instead of timing
again (its re-checks still run, later). ``<host>`` is a digest of what makes timings
differ between machines and set-ups: CPU model and the cores this process may use,
NumPy and the BLAS it was built with, the environment variables that override BLAS
kernels and threads (dask's workers set them to one thread). ``host.json``
beside the records spells it out. A thread limit set at run time
(``threadpoolctl.threadpool_limits``) is not part of it: probing it would cost each
process several milliseconds, and a decision it makes wrong is undone at the re-check.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpu_tc import disk_cache
from gpu_tc.host import blas_variables, cpu_name


def recall(key: str, names: Sequence[str]) -> dict[str, Any] | None:
    """The decision saved for ``key`` among ``names``: {"best": index, "seconds":
    per variant}, or None (none saved, the cache off, other variants, or a record kept
    under an earlier rule: "medians" before a variant's time was its fastest call,
    "seconds" while it was, "median_seconds" since it is its median again)."""
    store = _store()
    record = None if store is None else store.load(_full_key(key, names))
    if record is None or record.get("best") not in names or "median_seconds" not in record:
        return None  # the key holds the names
    return {"best": list(names).index(record["best"]), "seconds": record["median_seconds"]}


def remember(key: str, names: Sequence[str], best: int, seconds: Sequence[float]) -> None:
    """Save that variant ``best`` of ``names`` was kept, with each variant's time."""
    store = _store()
    if store is not None:
        store.save(_full_key(key, names), {"names": list(names), "best": names[best],
                                           "median_seconds": [float(t) for t in seconds]})


def _full_key(key: str, names: Sequence[str]) -> str:
    return f"{key} among {list(names)}"


def _store() -> disk_cache.RecordStore | None:
    """The record store of this host in the current cache directory (None when off)."""
    directory = disk_cache.cache_dir()
    if directory is None:
        return None
    return _store_in(directory, json.dumps(host(), sort_keys=True, indent=1))


@functools.cache
def _store_in(directory: Path, described: str) -> disk_cache.RecordStore:
    store = disk_cache.RecordStore(directory / "cpu-routes" / disk_cache.digest(described))
    description = store.directory / "host.json"
    if not description.exists():
        try:
            disk_cache.write_atomic(description, lambda temporary: temporary.write_text(described))
        except OSError:
            pass  # the records' own saves warn about a directory that cannot be written
    return store


@functools.cache
def host() -> dict[str, Any]:
    """What the decisions of this process depend on besides the problem."""
    return {
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "numpy": np.__version__,
        "blas": _blas(),
        "overrides": blas_variables(),
    }


def _blas() -> str:
    """The BLAS NumPy was built with (its kernel follows from the CPU and the overrides)."""
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return f"{blas.get('name', '?')} {blas.get('version', '?')}"
