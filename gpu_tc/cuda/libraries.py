"""Whether cuTENSOR and cuBLAS load here, why not, and how to fix it.

Each library serves its own routes: a missing cuBLAS costs the cuBLAS route, a
missing cuTENSOR every other one. Nothing is imported until a probe runs, so
``gpu-tc info`` can call this without a GPU.

nvmath-python finds libcutensor and libcublasLt only in site-packages (and on
LD_LIBRARY_PATH): wheels installed with ``pip install --target DIR`` and put on
PYTHONPATH are not found, so :func:`fix_for` looks for the library on sys.path and,
where it lies there, names the directory to add to LD_LIBRARY_PATH.
"""

from __future__ import annotations

import glob
import os
import re
import site
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

# Where the CUDA 13 wheels put each shared library, under a site-packages directory.
WHEEL_DIRS = {
    "libcutensor": ("cutensor/lib",),
    "libcublasLt": ("nvidia/cu13/lib", "nvidia/cublas/lib"),
    "libcublas": ("nvidia/cu13/lib", "nvidia/cublas/lib"),
}
INSTALL = {
    "libcutensor": "pip install 'cutensor-cu13>=2.5,<3'",
    "libcublasLt": "pip install 'cuda-toolkit[cublas]==13.*'",
    "libcublas": "pip install 'cuda-toolkit[cublas]==13.*'",
}
_SONAME = re.compile(r"\b(lib[A-Za-z]+)\.so(?:\.\d+)*")


@dataclass(frozen=True)
class Library:
    """The outcome of loading one library.

    Attributes:
        name: "cuTENSOR" or "cuBLAS".
        version: Its version when loaded, else None.
        error: What failed, when not loaded.
        fix: What to do about it, when not loaded.
    """

    name: str
    version: str | None
    error: str = ""
    fix: str = ""

    @property
    def loaded(self) -> bool:
        return self.version is not None

    def describe(self) -> str:
        """One line: the version, or the failure and its fix."""
        if self.loaded:
            return str(self.version)
        return f"not loadable: {self.error}; fix: {self.fix}"


def _search_roots(search_path: Sequence[str] | None) -> list[str]:
    if search_path is not None:
        return list(search_path)
    roots = [p for p in sys.path if p]
    try:
        roots += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site module
        pass
    return list(dict.fromkeys(roots))


def fix_for(error: str, search_path: Sequence[str] | None = None) -> str:
    """How to fix the load failure ``error`` (which names the shared library).

    Args:
        error: The loader's message, e.g. 'Failure finding "libcublasLt.so.13 ..."'.
        search_path: Directories to look in (default: sys.path and site-packages).
    """
    found = _SONAME.search(error)
    if found is None:
        return "pip install 'gpu-tc[gpu]' (CuPy, cuTENSOR, nvmath-python, CUDA 13 libraries)"
    stem, soname = found.group(1), found.group(0)
    for root in _search_roots(search_path):
        for relative in WHEEL_DIRS.get(stem, ("nvidia/*/lib",)):
            for path in sorted(glob.glob(os.path.join(root, relative, f"{stem}.so*"))):
                directory = os.path.dirname(path)
                if directory in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
                    return (f"{path} is on LD_LIBRARY_PATH but does not load: check its "
                            f"dependencies with `ldd {path}`")
                return (f"{soname} is installed in {directory}, where the loader does not look "
                        f"(a pip --target or PYTHONPATH install): export LD_LIBRARY_PATH="
                        f"{directory}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
    install = INSTALL.get(stem, "pip install 'gpu-tc[gpu]'")
    return f"{soname} is not installed: {install} (or pip install 'gpu-tc[gpu]')"


@lru_cache(maxsize=1)
def cutensor() -> Library:
    """Load cuTENSOR through nvmath-python (its first call loads libcutensor)."""
    try:
        from nvmath.bindings import cutensor as ct
    except ImportError as err:
        return Library("cuTENSOR", None, f"nvmath.bindings.cutensor cannot be imported ({err})",
                       "pip install 'nvmath-python>=0.7' (or pip install 'gpu-tc[gpu]')")
    try:
        number = int(ct.get_version())
    except Exception as err:  # noqa: BLE001 - the loader's errors are reported, not raised
        return Library("cuTENSOR", None, f"{type(err).__name__}: {err}", fix_for(str(err)))
    return Library("cuTENSOR", f"{number // 10000}.{number % 10000 // 100}.{number % 100}")


@lru_cache(maxsize=1)
def cublas() -> Library:
    """Load CuPy's cuBLAS bindings (their import loads libcublas and libcublasLt)."""
    try:
        from cupy_backends.cuda.libs import cublas as bindings
    except ImportError as err:
        return Library("cuBLAS", None, f"{type(err).__name__}: {err}", fix_for(str(err)))
    try:
        import cupy

        number = int(bindings.getVersion(cupy.cuda.device.get_cublas_handle()))
    except Exception:  # noqa: BLE001 - no device to ask: loaded, version unknown
        return Library("cuBLAS", "loaded")
    return Library("cuBLAS", f"{number // 10000}.{number % 10000 // 100}.{number % 100}")
