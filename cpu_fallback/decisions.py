"""Measured route decisions kept across processes (the persistent cache's CPU part).

A :class:`cpu_fallback.measure.Choice` that has timed its variants saves which one it
kept, with the medians, under ``<cache dir>/cpu-routes/<host>/``; a later process
planning the same problem on the same host starts from that choice instead of timing
again (its re-checks still run, later). ``<host>`` is a digest of what makes timings
differ between machines and set-ups: CPU model and the cores this process may use,
NumPy, its BLAS (library, kernel, threads, as threadpoolctl reports where installed)
and the environment variables that override them, numba. ``host.json`` beside the
records spells it out.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from gpu_tc import disk_cache
from gpu_tc.bench.environment import cpu_name

OVERRIDE_PREFIXES = ("OPENBLAS_", "GOTO", "MKL_", "OMP_", "BLIS_", "NUMBA_")


def recall(key: str, names: Sequence[str]) -> dict[str, Any] | None:
    """The decision saved for ``key`` among ``names``: {"best": index, "medians":
    seconds per variant}, or None (none saved, the cache off, or other variants)."""
    store = _store()
    record = None if store is None else store.load(_full_key(key, names))
    if record is None or record.get("names") != list(names):
        return None
    return {"best": list(names).index(record["best"]), "medians": record["medians"]}


def remember(key: str, names: Sequence[str], best: int, medians: Sequence[float]) -> None:
    """Save that variant ``best`` of ``names`` was kept, with each variant's median."""
    store = _store()
    if store is not None:
        store.save(_full_key(key, names), {"names": list(names), "best": names[best],
                                           "medians": [float(m) for m in medians]})


def host() -> dict[str, Any]:
    """What the decisions of this process depend on besides the problem (the BLAS
    threads as they are now: a thread limit set later gets its own records)."""
    return {**_static_host(), "blas": _blas()}


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
            disk_cache.write_atomic(description, described.encode())
        except OSError:
            pass  # the records' own saves warn about a directory that cannot be written
    return store


@functools.cache
def _static_host() -> dict[str, Any]:
    found: dict[str, Any] = {
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "numpy": np.__version__,
        "overrides": {k: v for k, v in sorted(os.environ.items())
                      if k.startswith(OVERRIDE_PREFIXES)},
    }
    try:
        found["numba"] = metadata.version("numba")  # importing numba would take 0.2 s
    except metadata.PackageNotFoundError:
        found["numba"] = None
    return found


def _blas() -> list[dict[str, Any]] | str:
    """The BLAS libraries loaded (threadpoolctl), else the one NumPy was built with."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '?')}"
    return [{k: info.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for info in threadpool_info() if info.get("user_api") == "blas"]
