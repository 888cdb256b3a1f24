"""Shadow ``cupy.cuda.memory`` of the gpu_double emulation (a test double, not a GPU)."""

from gpu_double.array import MemoryPointer, alloc  # noqa: F401
from gpu_double.runtime import MemoryPool, OutOfMemoryError  # noqa: F401
