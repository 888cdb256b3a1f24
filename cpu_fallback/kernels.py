"""Loading the modules of the compiled kernels: the copy (cpu_fallback.tiles, over
cpu_fallback._tile_copy), the sums (sum_kernel over cpu_fallback._sums,
pairwise_kernel over cpu_fallback._pairwise) and the small-K GEMM (small_k, over
cpu_fallback._small_k).

Each is imported on its first use; where its extension was not built (no C compiler
when gpu_tc was installed) or does not import, the caller's NumPy route runs instead,
after one warning per module that says what falls back.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import warnings
from types import ModuleType

# The extension each kernel module wraps.
EXTENSIONS = {"tiles": "_tile_copy", "sum_kernel": "_sums", "pairwise_kernel": "_pairwise",
              "small_k": "_small_k"}


@functools.cache
def built(extension: str) -> bool:
    """Whether the compiled extension cpu_fallback.``extension`` was built here."""
    return importlib.util.find_spec(f"{__package__}.{extension}") is not None


@functools.cache
def load(name: str, instead: str) -> ModuleType | None:
    """cpu_fallback.``name``, a module over a compiled extension; None (with a warning,
    once) where the extension fails to import: ``instead`` says what runs then."""
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as err:
        extension = EXTENSIONS[name]
        warnings.warn(
            f"the compiled kernel cpu_fallback.{extension} (built when gpu_tc is installed "
            f"where a C compiler is) does not import ({err}): {instead}",
            RuntimeWarning, stacklevel=4,
        )
        return None
