"""Shadow nvmath of the gpu_double emulation (a test double, not nvmath-python)."""

__version__ = "1.0.0 (gpu_double emulation, not nvmath-python)"
