"""Shadow ``nvmath.bindings.cutensor``: gpu_double's emulated cuTENSOR (a test double)."""

from gpu_double.cutensor import *  # noqa: F401,F403
