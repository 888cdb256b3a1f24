"""The BLAS NumPy runs (library, kernel, threads) and the environment variables steering it.

threadpoolctl names each loaded BLAS, the kernel it chose (OpenBLAS's core name, BLIS's
architecture; MKL reports none) and its thread count. Environment variables can
override both. A variable that picks the kernel (``OPENBLAS_CORETYPE``, ``MKL_CBWR``,
...) is checked for real: a fresh ``python -c`` without it imports NumPy and reports
the kernel the library picks by itself, and a difference becomes a warning. Without
threadpoolctl the report says so instead of guessing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from gpu_tc.host import blas_variables

# The ones among them that choose the kernel (instruction set, core type), not threads.
KERNEL_VARIABLES = ("OPENBLAS_CORETYPE", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
                    "MKL_DEBUG_CPU_TYPE", "BLIS_ARCH_TYPE")
LIBRARIES = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "flexiblas": "FlexiBLAS"}
NO_THREADPOOLCTL = ("threadpoolctl is not installed: kernel and threads not known "
                    "(pip install threadpoolctl)")
PROBE_TIMEOUT = 120

# Run in a fresh interpreter: the BLAS pools threadpoolctl sees once NumPy alone is loaded.
_PROBE = (
    "import json, numpy\n"
    "from threadpoolctl import threadpool_info\n"
    "print(json.dumps([p for p in threadpool_info() if p.get('user_api') == 'blas']))\n"
)


@dataclass(frozen=True)
class BlasEnvironment:
    """What BLAS runs here and what in the environment steers it.

    Attributes:
        blas: NumPy's BLAS: library, version, architecture (the kernel), threads,
            threading_layer, filepath, source ("threadpoolctl" or "numpy build info"),
            text (one line for tables and plots).
        pools: Every BLAS threadpoolctl sees in this process (torch's MKL too, once
            imported), with the same keys.
        variables: The set variables that can override BLAS or threading, by name.
        warnings: One line per override that changes the kernel or lowers the threads.
    """

    blas: dict[str, Any]
    pools: list[dict[str, Any]] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Probe:
    """The BLAS pools of a fresh process (``pools``), or why it could not tell (``error``)."""

    pools: tuple[dict[str, Any], ...] = ()
    error: str = ""


def is_thread_variable(name: str) -> bool:
    """Whether a variable can set or cap a thread count (OMP_NUM_THREADS, BLIS_JC_NT, ...)."""
    return "THREAD" in name or name.endswith("_NT") or name in ("OMP_DYNAMIC", "MKL_DYNAMIC")


def threadpool_info() -> list[dict[str, Any]] | None:
    """threadpoolctl's BLAS pools in this process; None when threadpoolctl is missing."""
    if importlib.util.find_spec("threadpoolctl") is None:
        return None
    from threadpoolctl import threadpool_info as info

    return [p for p in info() if p.get("user_api") == "blas"]


def describe(pool: dict[str, Any]) -> dict[str, Any]:
    """One threadpoolctl pool as a report entry (see :attr:`BlasEnvironment.blas`)."""
    api = pool.get("internal_api") or "unknown"
    entry = {
        "library": LIBRARIES.get(api, api),
        "version": pool.get("version"),
        "architecture": pool.get("architecture"),
        "threads": pool.get("num_threads"),
        "threading_layer": pool.get("threading_layer"),
        "filepath": pool.get("filepath"),
        "source": "threadpoolctl",
    }
    kernel = entry["architecture"] or "not reported"
    threads = entry["threads"]
    layer = f" ({entry['threading_layer']})" if entry["threading_layer"] else ""
    entry["text"] = (f"{entry['library']} {entry['version'] or ''}".strip()
                     + f", kernel {kernel}, {threads} thread{'' if threads == 1 else 's'}{layer}")
    return entry


def build_info(note: str) -> dict[str, Any]:
    """NumPy's BLAS as its build recorded it, when threadpoolctl cannot say (``note``: why)."""
    try:
        config: Any = np.show_config(mode="dicts")
        entry = config["Build Dependencies"]["blas"]
        library, version = entry.get("name", "unknown"), entry.get("version") or None
    except (TypeError, KeyError):  # NumPy < 1.26 prints only
        library, version = "unknown", None
    text = f"{library} {version or ''}".strip() + f" (NumPy's build info; {note})"
    return {"library": library, "version": version, "architecture": None, "threads": None,
            "threading_layer": None, "filepath": None, "source": "numpy build info",
            "note": note, "text": text}


def loaded() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """NumPy's BLAS and every BLAS pool of this process.

    NumPy's is the pool whose library a fresh process that imports NumPy alone loads
    (:func:`numpy_blas_paths`): peers bring BLAS libraries of their own (TBLIS and torch
    each load another OpenBLAS or MKL), which threadpoolctl may list first.
    """
    pools = threadpool_info()
    if pools is None:
        return build_info(NO_THREADPOOLCTL), []
    if not pools:
        return build_info("threadpoolctl finds no BLAS loaded"), []
    described = [describe(p) for p in pools]
    paths = numpy_blas_paths()
    numpys = next((d for d in described if d["filepath"] in paths), described[0])
    return numpys, described


def numpy_blas_paths() -> frozenset[str]:
    """The files of the BLAS libraries NumPy alone loads, as a fresh process reports
    them under this environment (empty when the probe fails)."""
    result = probe(tuple(sorted(os.environ.items())))
    return frozenset(p["filepath"] for p in result.pools if p.get("filepath"))


@lru_cache(maxsize=8)
def probe(environ: tuple[tuple[str, str], ...]) -> Probe:
    """The BLAS pools of a fresh ``python -c`` that imports NumPy under ``environ`` alone."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=dict(environ),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                              check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return Probe(error=f"{type(err).__name__}: {err}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Probe(error=f"the probe exited with status {done.returncode}: {tail}")
    try:
        return Probe(pools=tuple(json.loads(lines[-1])))
    except ValueError:
        return Probe(error=f"the probe printed {lines[-1][:200]!r}, not JSON")


def inspect(environ: Mapping[str, str] | None = None,
            cpu_count: int | None = None) -> BlasEnvironment:
    """The BLAS of this process, the variables steering it, and warnings about them.

    Args:
        environ: The environment this process started with (default: ``os.environ``).
        cpu_count: The host's CPUs (default: ``os.cpu_count()``).
    """
    environ = os.environ if environ is None else environ
    found = blas_variables(environ)
    blas, pools = loaded()
    kernel = {k: v for k, v in found.items() if k in KERNEL_VARIABLES}
    warnings = []
    if kernel:
        warnings += _kernel_warnings(kernel, blas, environ)
    threads = {k: v for k, v in found.items() if is_thread_variable(k)}
    cpus = os.cpu_count() if cpu_count is None else cpu_count
    if threads and blas["threads"] and cpus and blas["threads"] < cpus:
        count = blas["threads"]
        warnings.append(f"{_setting(threads)} {'is' if len(threads) == 1 else 'are'} set and "
                        f"{blas['library']} uses {count} thread{'' if count == 1 else 's'} "
                        f"on a host of {cpus} CPUs")
    return BlasEnvironment(blas, pools, found, warnings)


def _setting(chosen: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in chosen.items())


def _kernel_warnings(kernel: dict[str, str], blas: dict[str, Any],
                     environ: Mapping[str, str]) -> list[str]:
    """Whether the kernel variables make the BLAS choose another kernel than it would."""
    setting, them = _setting(kernel), "it" if len(kernel) == 1 else "them"
    library = blas["library"]
    if blas["source"] != "threadpoolctl":
        return [f"{setting} set: whether it forces a kernel is not checked ({blas['note']})"]
    clean = tuple(sorted((k, v) for k, v in environ.items() if k not in kernel))
    result = probe(clean)
    if result.error:
        return [f"{setting} set: a process without {them} could not be asked which kernel "
                f"{library} picks ({result.error})"]
    same = [p for p in result.pools if p.get("filepath") == blas["filepath"]]
    other = (same or list(result.pools) or [{}])[0]
    here, there = blas["architecture"], other.get("architecture")
    if here is None or there is None:
        return [f"{setting} set: threadpoolctl reports no kernel for {library}, so whether "
                f"{them} force{'s' if them == 'it' else ''} one is not checked"]
    if here != there:
        verb = "forces" if them == "it" else "force"
        return [f"{setting} {verb} kernel {here}; without {them} {library} picks {there}"]
    return []
