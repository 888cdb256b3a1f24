"""The Backend and Plan protocols, and the choice of backend by array type.

The core never imports a backend at import time: the CPU backend (``cpu_fallback``) is
imported on the first NumPy call, the GPU backend (``gpu_tc.cuda``) only when CuPy
arrays arrive, which means CuPy is already imported by the caller.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .errors import OperandError
from .options import Options
from .problem import (
    ContractionProblem,
    ElementwiseProblem,
    OperandLayout,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
)


class PrimitivePlan(Protocol):
    """A backend's executable plan for one primitive problem."""

    route: str
    reason: str


class Backend(Protocol):
    """What the core asks of a backend; arrays are the backend's own array type."""

    name: str
    array_type: type[Any]  # the array class this backend computes on
    # Whether host timings of a plan's execute() are real (synchronous calls), so that a
    # new result's GEMM orientation may be chosen by measurement (gpu_tc.orientation).
    measures_orientation: bool

    def layout(self, array: Any) -> OperandLayout:
        """Shape, strides in elements and dtype character of ``array``."""

    def key_extra(self, arrays: Sequence[Any], context: str) -> tuple[Any, ...]:
        """Plain values besides the layouts that a plan depends on (device, alignment).

        Raises:
            OperandError: the arrays cannot be used together (e.g. two devices); the
                message names ``context``.
        """

    def empty(self, extents: tuple[int, ...], dtype: str) -> Any:
        """A new C-ordered array."""

    def from_host(self, array: Any) -> Any:
        """A NumPy array (a Python scalar an operand was given as) on this backend."""

    def cast(self, array: Any, dtype: str) -> Any:
        """A C-ordered copy of ``array`` in ``dtype``."""

    def view(self, array: Any, spec: TensorSpec, writable: bool = False) -> Any:
        """A view of ``array`` with the extents and strides (elements) of ``spec``,
        starting at its first element (read-only unless ``writable``)."""

    def overlaps(self, a: Any, b: Any) -> bool:
        """Whether the memory of ``a`` and ``b`` may overlap."""

    def copy_into(self, source: Any, destination: Any) -> None:
        """Copy ``source`` into ``destination`` (same shape)."""

    def finish(self, result: Any) -> Any:
        """The value handed to the caller for a new result (numpy: scalars for 0-d)."""

    def contraction_plan(self, problem: ContractionProblem, options: Options) -> Any:
        """A plan with ``execute(a, b, d, alpha, beta, c)``."""

    def permutation_plan(self, problem: PermutationProblem, options: Options) -> Any:
        """A plan with ``execute(a, b, alpha)``."""

    def reduction_plan(self, problem: ReductionProblem, options: Options) -> Any:
        """A plan with ``execute(a, d, alpha, beta, c)``."""

    def elementwise_plan(self, problem: ElementwiseProblem, options: Options) -> Any:
        """A plan with ``execute(a, b, c, d, alpha, beta, gamma)`` (b None if binary)."""


_BACKENDS: dict[str, Backend] = {}
_LOCK = threading.Lock()


def _is_cupy_array(x: Any) -> bool:
    cls = type(x)
    return cls.__name__ == "ndarray" and cls.__module__.split(".")[0] == "cupy"


def backend_named(name: str) -> Backend:
    """The backend called ``name`` ("cpu" or "gpu"), made on first use."""
    backend = _BACKENDS.get(name)
    if backend is None:
        with _LOCK:
            backend = _BACKENDS.get(name)
            if backend is None:
                if name == "cpu":
                    from cpu_fallback.backend import CpuBackend

                    backend = CpuBackend()
                else:
                    from .cuda.backend import GpuBackend

                    backend = GpuBackend()
                _BACKENDS[name] = backend
    return backend


def host_pool() -> Any:
    """The CPU backend's pool of large buffers (cpu_fallback.pool.HostPool): ``stats()``,
    ``clear()`` and a settable ``limit`` in idle bytes (0 turns it off)."""
    from cpu_fallback.pool import HOST_POOL

    return HOST_POOL


def _is_scalar(x: Any) -> bool:
    """A Python or NumPy number: an operand any backend takes (numpy.einsum's rule)."""
    return isinstance(x, (int, float, complex, np.generic))


def select_backend(operands: Sequence[Any], context: str) -> Backend:
    """The backend for these operands: NumPy (or array-likes) -> CPU, CuPy -> GPU;
    Python and NumPy scalars go with either.

    Raises:
        OperandError: NumPy and CuPy operands are mixed.
    """
    on_gpu = [_is_cupy_array(x) for x in operands]
    if any(on_gpu):
        host = [i for i, x in enumerate(operands) if not on_gpu[i] and not _is_scalar(x)]
        if host:
            raise OperandError(
                f"operand {host[0]} is a {type(operands[host[0]]).__name__} but operand "
                f"{on_gpu.index(True)} is a CuPy array in {context}: move every operand "
                "to one device"
            )
        return backend_named("gpu")
    return backend_named("cpu")
