"""Shadow ``cupy.lib`` of the gpu_double emulation (a test double, not a GPU)."""

from . import stride_tricks  # noqa: F401
