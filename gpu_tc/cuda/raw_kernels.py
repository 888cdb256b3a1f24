"""gpu_tc's own CUDA kernels (the timings' hold kernel, the strided sums), built through
cupy.RawKernel once per kernel and device: NVRTC, CuPy's kernel cache, the module load."""

from __future__ import annotations

from typing import Any

import cupy

from gpu_tc.errors import BackendError

_BUILT: dict[tuple[str, int], Any] = {}  # (kernel name, device) -> compiled RawKernel


def built(source: str, name: str) -> Any:
    """The kernel ``name`` of ``source``, compiled for the current device on first use.

    Raises:
        BackendError: it could not be built (no NVRTC, a kernel cache that cannot be
            written, a refused compile); its cause is the error that stopped it.
    """
    device = cupy.cuda.runtime.getDevice()
    kernel = _BUILT.get((name, device))
    if kernel is None:
        try:
            kernel = cupy.RawKernel(source, name)
            kernel.compile()
        except Exception as err:  # noqa: BLE001 - any failure to build
            raise BackendError(f"gpu_tc's {name} could not be built: "
                               f"{type(err).__name__}: {err}") from err
        _BUILT[name, device] = kernel
    return kernel
