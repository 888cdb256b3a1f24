"""What this host offers: versions, BLAS, CPU, and whether a GPU backend can run.

The BLAS, its kernel, threads and the environment variables steering them come from
:mod:`gpu_tc.bench.blas_env`.

GPU packages (CuPy, nvmath-python) are imported only by :func:`gpu_status`, which
the ``info``, ``selftest``, ``demo`` and ``bench --backend gpu`` commands call; every
failure there becomes a reason string, never an exception.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from gpu_tc.host import cpu_name

from . import blas_env


@dataclass(frozen=True)
class GpuStatus:
    """Whether gpu_tc's GPU backend can run here, and what was found on the way.

    Attributes:
        available: CuPy imports, sees a device, and cuTENSOR or cuBLAS loads.
        reason: Why not, when not available.
        devices: "index: name (compute capability, memory)" per visible device.
        versions: CuPy, CUDA runtime and driver, cuTENSOR, cuBLAS, nvmath-python (found
            ones); a library that does not load shows the failure and its fix.
    """

    available: bool
    reason: str = ""
    devices: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict, hash=False)


def package_version(name: str) -> str | None:
    """The installed distribution's version, without importing it (None if absent)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed(module: str) -> bool:
    """Whether a top-level module can be imported (found, not imported)."""
    return importlib.util.find_spec(module) is not None


def blas() -> dict[str, Any]:
    """NumPy's BLAS: library, version, kernel ("architecture"), threads, a one-line "text".

    threadpoolctl's view when installed, else NumPy's build info, saying so.
    """
    return blas_env.loaded()[0]


def host(blas_found: blas_env.BlasEnvironment | None = None) -> dict[str, Any]:
    """Versions and hardware of the host side, for reports.

    Args:
        blas_found: What :func:`gpu_tc.bench.blas_env.inspect` found (inspected here
            when not given): NumPy's BLAS, every BLAS pool, and the variables steering
            them ("blas", "blas_pools", "blas_variables"; its warnings stay with it).
    """
    from .. import __version__

    blas_found = blas_env.inspect() if blas_found is None else blas_found
    return {
        "gpu_tc": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "numpy": np.__version__,
        "blas": blas_found.blas,
        "blas_pools": blas_found.pools,
        "blas_variables": blas_found.variables,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "opt_einsum": package_version("opt_einsum"),
        "torch": package_version("torch"),
        "torch_blas": torch_blas(),
        "gpu_tc_mkl": mkl_engine(),
        "pytblis": package_version("pytblis"),
    }


def mkl_engine() -> str | None:
    """MKL as gpu_tc's second GEMM engine (cpu_fallback.mkl: loaded here if not yet),
    in one line; None where there is none."""
    from cpu_fallback import mkl

    engine = mkl.engine()
    return None if engine is None else engine.describe()


def torch_blas() -> str | None:
    """The BLAS torch was built with (its build settings' BLAS_INFO, e.g. "mkl"), where a
    peer already imported torch (None otherwise: torch is not imported for this). torch
    links its own BLAS, which threadpoolctl may not list, so its GEMMs are not NumPy's."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        settings = str(torch.__config__.show())
    except Exception:  # noqa: BLE001 - a report field, never a failure
        return None
    found = re.search(r"BLAS_INFO=([^,\s]+)", settings)
    return found.group(1) if found else None


@lru_cache(maxsize=1)
def gpu_status() -> GpuStatus:
    """Probe CuPy, the devices, cuTENSOR and cuBLAS (imports CuPy).

    The GPU backend is available when CuPy sees a device and at least one of the two
    libraries loads; each one's version, or its failure and the fix, is in ``versions``.
    """
    if not installed("cupy"):
        return GpuStatus(False, "CuPy is not installed (pip install 'gpu-tc[gpu]')")
    versions: dict[str, str] = {}
    try:
        import cupy

        versions["cupy"] = cupy.__version__
        runtime = cupy.cuda.runtime
        versions["cuda_runtime"] = _cuda_version(runtime.runtimeGetVersion())
        versions["cuda_driver"] = _cuda_version(runtime.driverGetVersion())
        count = runtime.getDeviceCount()
        devices = tuple(_describe_device(runtime, i) for i in range(count))
    except Exception as err:  # noqa: BLE001 - any CUDA failure means no usable GPU
        return GpuStatus(False, f"CUDA is not usable: {type(err).__name__}: {err}", (), versions)
    from ..cuda import libraries

    tensor, blas = libraries.cutensor(), libraries.cublas()
    versions["cutensor"], versions["cublas"] = tensor.describe(), blas.describe()
    nvmath = sys.modules.get("nvmath")  # imported by the cuTENSOR probe when installed
    versions["nvmath-python"] = getattr(nvmath, "__version__", None) or "not installed"
    if not devices:
        return GpuStatus(False, "CuPy sees no CUDA device", devices, versions)
    if not tensor.loaded and not blas.loaded:
        reason = "neither cuTENSOR nor cuBLAS loads (see their lines above)"
        return GpuStatus(False, reason, devices, versions)
    return GpuStatus(True, "", devices, versions)


def _cuda_version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def _describe_device(runtime: Any, index: int) -> str:
    props = runtime.getDeviceProperties(index)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    memory = props["totalGlobalMem"] / 2**30
    return f"{index}: {name} (sm_{props['major']}{props['minor']}, {memory:.0f} GiB)"
