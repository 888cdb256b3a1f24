"""Loading the modules of numba kernels (cpu_fallback.tiles, sum_kernel, pairwise_kernel).

Each is imported on its first use, since importing numba costs time and memory; where
numba is missing or does not import (e.g. built for another NumPy), the caller's NumPy
route runs instead, after one warning per module that says what falls back.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import warnings
from types import ModuleType


@functools.cache
def numba_available() -> bool:
    """Whether numba is installed (checked without importing it)."""
    return importlib.util.find_spec("numba") is not None


@functools.cache
def load(name: str, instead: str) -> ModuleType | None:
    """cpu_fallback.``name``, a module that imports numba; None without numba, or (with
    a warning, once) where numba fails to import: ``instead`` says what runs then."""
    if not numba_available():
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as err:
        warnings.warn(f"numba is installed but does not import ({err}): {instead}",
                      RuntimeWarning, stacklevel=4)
        return None
