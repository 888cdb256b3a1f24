"""Shadow ``cupy_backends.cuda.libs.cublas``: gpu_double's emulated cuBLAS (a test double)."""

from gpu_double.cublas import *  # noqa: F401,F403
