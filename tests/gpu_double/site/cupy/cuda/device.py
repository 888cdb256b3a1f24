"""Shadow ``cupy.cuda.device`` of the gpu_double emulation (a test double, not a GPU)."""

from gpu_double import runtime as _runtime
from gpu_double.runtime import Device  # noqa: F401

_cublas_handles: dict[int, int] = {}


def get_device_id() -> int:
    return _runtime.current_device()


def get_cublas_handle() -> int:
    """The current device's cuBLAS handle (made on first use, as CuPy does)."""
    device = _runtime.current_device()
    if device not in _cublas_handles:
        from gpu_double import cublas

        _cublas_handles[device] = cublas.create()
    return _cublas_handles[device]
