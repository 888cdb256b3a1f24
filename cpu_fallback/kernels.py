"""Loading the modules of compiled kernels: the C copy (cpu_fallback.tiles) and numba's
(sum_kernel, pairwise_kernel).

Each is imported on its first use, since importing numba costs time and memory; where
numba is missing or does not import (e.g. built for another NumPy), or the C extension
was not built, the caller's NumPy route runs instead, after one warning per module that
says what falls back.
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
def compiled_available() -> bool:
    """Whether the compiled copy kernel (cpu_fallback._tile_copy) was built here."""
    return importlib.util.find_spec(f"{__package__}._tile_copy") is not None


@functools.cache
def load(name: str, instead: str, *, compiled: bool = False) -> ModuleType | None:
    """cpu_fallback.``name``, a module that imports numba (or, where ``compiled``, the
    compiled copy); None without numba, or (with a warning, once) where numba or the
    compiled module fails to import: ``instead`` says what runs then."""
    if not compiled and not numba_available():
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as err:
        what = (
            "the compiled copy kernel (cpu_fallback._tile_copy: built when gpu_tc is "
            "installed where a C compiler is) does not import"
            if compiled
            else "numba is installed but does not import"
        )
        warnings.warn(f"{what} ({err}): {instead}", RuntimeWarning, stacklevel=4)
        return None
