"""Shadow ``cupy.cuda.runtime`` of the gpu_double emulation (a test double, not a GPU)."""

from gpu_double import runtime as _runtime
from gpu_double.runtime import CUDARuntimeError  # noqa: F401


def getDevice() -> int:  # noqa: N802 - CUDA's name
    return _runtime.current_device()


def setDevice(device: int) -> None:  # noqa: N802
    _runtime.set_current_device(device)


def getDeviceCount() -> int:  # noqa: N802
    return _runtime.DEVICE_COUNT


def getDeviceProperties(device: int) -> dict:  # noqa: N802
    return _runtime.device_properties(device)


def runtimeGetVersion() -> int:  # noqa: N802
    return _runtime.CUDA_VERSION


def driverGetVersion() -> int:  # noqa: N802
    return _runtime.CUDA_VERSION


def deviceSynchronize() -> None:  # noqa: N802
    """Nothing is queued: every call ran when it was made."""
