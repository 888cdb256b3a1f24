"""Shadow ``cupy.lib.stride_tricks`` of the gpu_double emulation (a test double)."""

from gpu_double.functions import as_strided  # noqa: F401
