"""Shadow package of the gpu_double emulation (a test double, not a GPU)."""
