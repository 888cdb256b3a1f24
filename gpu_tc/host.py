"""Facts about this host that timings depend on, light to import: the CPU model and the
environment variables that can override BLAS or threading. The benchmark reports name
them (gpu_tc.bench), and the CPU backend's saved route decisions are keyed by them
(cpu_fallback.decisions)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from functools import lru_cache

# Every variable named so, or listed in NAMES, can override BLAS or threading (NVPL_:
# NVIDIA's BLAS on Grace hosts, listed wherever it is set, as the others are).
PREFIXES = ("OPENBLAS_", "GOTO_", "MKL_", "OMP_", "BLIS_", "KMP_", "NVPL_")
NAMES = ("VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
# Not an override: it lets two OpenMP runtimes load, and threadpoolctl sets it on import.
IGNORED = ("KMP_DUPLICATE_LIB_OK",)


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where there is one, else platform's guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default: ``os.environ``) that can override BLAS.

    Example:
        >>> blas_variables({"OMP_NUM_THREADS": "1", "HOME": "/root", "MKL_CBWR": "AVX2"})
        {'MKL_CBWR': 'AVX2', 'OMP_NUM_THREADS': '1'}
    """
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in sorted(environ)
            if (k.startswith(PREFIXES) or k in NAMES) and k not in IGNORED}
