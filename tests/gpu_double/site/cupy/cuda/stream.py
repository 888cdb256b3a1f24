"""Shadow ``cupy.cuda.stream`` of the gpu_double emulation (a test double, not a GPU)."""

from gpu_double.runtime import Stream, get_current_stream  # noqa: F401
