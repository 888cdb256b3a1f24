"""Shadow ``cupy.cuda`` of the gpu_double emulation (a test double, not a GPU)."""

from gpu_double.array import MemoryPointer, alloc  # noqa: F401
from gpu_double.runtime import (  # noqa: F401
    Device,
    Event,
    Stream,
    get_current_stream,
    get_elapsed_time,
)

from . import device, memory, runtime, stream  # noqa: F401
