"""NumPy's own einsum, as it was when gpu_tc was imported (gpu_tc/__init__.py imports
this module first thing): the CPU backend's routes that run numpy.einsum's loops call
this one, so that a program that puts gpu_tc.einsum in numpy.einsum's place (a drop-in,
as tests/dropin.py does) does not send those calls back into gpu_tc."""

from __future__ import annotations

import numpy as np

NUMPY_EINSUM = np.einsum
