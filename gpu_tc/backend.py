"""The seam between the core and its backends: the typed Backend and PrimitivePlan
protocols, the Scalars every plan takes, and the backend registry.

A backend owns an array type. Everything the core needs from an array (its layout and
dtype, a new one, a cast, a strided view, an overlap test, a copy) goes through the
backend, so the core never reads an array's attributes itself. Backends are registered
by the root module of their array type and made on first use; a backend is imported
only when an array of its type arrives, so its array module is already imported.

Adding a backend is one folder with a class satisfying :class:`Backend` (and plans
satisfying :class:`PrimitivePlan`), plus one :func:`register_backend` call.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Scalars:
    """The scalars of one execution.

    A contraction or a reduction writes alpha * (its result) + beta * addend; a
    permutation alpha * op(A); an element-wise operation scales A, B and C by alpha,
    beta and gamma.
    """

    alpha: complex = 1
    beta: complex = 0
    gamma: complex = 1


UNSCALED = Scalars()


class PrimitivePlan(Protocol):
    """A backend's executable plan for one primitive problem.

    Attributes:
        route: How it runs, e.g. "blas:direct", "cutensor".
        reason: Why (read live: a plan may record a later decision).
        fresh: A fast path for a warm call, ``fresh(*inputs) -> new result`` laid out
            as the problem's D (a 0-d D may come back as a scalar of its dtype), or None.
        fresh_scalar: Whether ``fresh`` always returns a 0-d D as the scalar callers
            get (a NumPy scalar), so that backend.finish need not follow it.
        temporary_bytes: The most memory one execution allocates besides ``out``
            (packed operands, a staged result, workspace); a contraction's covers any
            scalars, a reduction's or element-wise operation's an unscaled call (a
            scaled one, from gpu_tc.reduce or elementwise_*, may stage one more D).
    """

    @property
    def route(self) -> str: ...

    fresh: Callable[..., Any] | None
    fresh_scalar: bool

    @property
    def temporary_bytes(self) -> int: ...

    @property
    def reason(self) -> str: ...

    def execute(
        self, inputs: Sequence[Any], out: Any, scalars: Scalars, addend: Any | None
    ) -> None:
        """Write the result into ``out``; ``addend`` (out's shape) is read when the
        operation adds beta * addend and beta != 0."""

    def autotune(self, iterations: int) -> bool:
        """Let the next executions try other kernels; False where there is no choice."""


class PlanDefaults:
    """What most primitive plans share: no warm fast path, no kernel choice to tune,
    no temporaries."""

    fresh: Callable[..., Any] | None = None
    fresh_scalar: bool = False
    temporary_bytes: int = 0

    def autotune(self, iterations: int) -> bool:
        """Nothing to tune."""
        return False


class OrientationTrial(Protocol):
    """A final contraction into a new result whose layout the backend chooses by
    measuring both GEMM orientations, and on the GPU the layout asked for too (see
    cpu_fallback.orientation and gpu_tc.cuda.layout_trial).

    Attributes:
        fresh: A fast path for a warm call, ``fresh(a, b) -> new result`` in the layout
            the trial picks for it, or None.
    """

    fresh: Callable[..., Any] | None

    @property
    def plan(self) -> PrimitivePlan:
        """The plan chosen (so far)."""

    @property
    def problem(self) -> ContractionProblem:
        """The final contraction into the layout chosen (so far)."""

    @property
    def output(self) -> TensorSpec:
        """The layout the next new result should have."""

    @property
    def reason(self) -> str: ...

    def execute(
        self, inputs: Sequence[Any], out: Any, scalars: Scalars, addend: Any | None
    ) -> None: ...

    def autotune(self, iterations: int) -> bool:
        """Let the plans tune their kernels (and time them again); False: none can."""


class Backend(Protocol):
    """What the core asks of a backend; arrays are the backend's own array type."""

    name: str
    array_type: type[Any]

    def adopt(self, operand: Any) -> Any:
        """``operand`` as this backend's array: host values converted, an array whose
        byte strides are not whole elements copied. Raises on what cannot be an array."""

    def layout(self, array: Any) -> OperandLayout:
        """Shape, strides in elements and dtype character of ``array``."""

    def layout_key(self, array: Any) -> Hashable:
        """``array``'s layout as plain values for a cache key, read cheaply (a call's
        key is built on every call)."""

    def dtype(self, array: Any) -> np.dtype[Any]:
        """The NumPy dtype of ``array``."""

    def writable(self, array: Any) -> bool:
        """Whether ``array`` may be written."""

    def whole_strides(self, array: Any) -> bool:
        """Whether every byte stride of ``array`` is a whole number of elements."""

    def key_extra(self, arrays: Sequence[Any], context: str) -> Hashable:
        """Plain values besides the layouts that a plan depends on (device, alignment).

        Raises:
            OperandError: the arrays cannot be used together (e.g. two devices); the
                message names ``context``.
        """

    def warm_key(self, args: Sequence[Any]) -> Hashable | None:
        """The flat key of ``einsum(subscripts, *operands)`` with a new result and
        default options, when every operand is this backend's array and the backend
        serves such calls from it (None otherwise)."""

    def empty(self, extents: tuple[int, ...], dtype: str) -> Any:
        """A new C-ordered array."""

    def cast(self, array: Any, dtype: str) -> Any:
        """A C-ordered copy of ``array`` in ``dtype``."""

    def view(
        self, array: Any, spec: TensorSpec, writable: bool = False, start: tuple[int, ...] = ()
    ) -> Any:
        """A view of ``array`` with the extents and strides (elements) of ``spec``,
        starting at its element of index ``start`` (() for its first element;
        read-only unless ``writable``)."""

    def viewer(
        self, source: OperandLayout, spec: TensorSpec, writable: bool = False,
        start: tuple[int, ...] = (),
    ) -> Callable[[Any], Any]:
        """``f(array)``: :meth:`view` of arrays laid out as ``source``, with what the
        view's making depends on decided here, once (a plan binds it)."""

    def overlaps(self, a: Any, b: Any) -> bool:
        """Whether the memory of ``a`` and ``b`` may overlap."""

    def copy_into(self, source: Any, destination: Any) -> None:
        """Copy ``source`` into ``destination`` (same shape), casting to its dtype
        (the caller has checked the cast)."""

    def finish(self, result: Any) -> Any:
        """The value handed to the caller for a new result (NumPy: scalars for 0-d)."""

    def contraction_plan(self, problem: ContractionProblem, options: Options) -> PrimitivePlan:
        """D = alpha * A B + beta * C."""

    def permutation_plan(self, problem: PermutationProblem, options: Options) -> PrimitivePlan:
        """B = alpha * op(A)."""

    def reduction_plan(self, problem: ReductionProblem, options: Options) -> PrimitivePlan:
        """D = alpha * reduce(op(A)) + beta * C."""

    def elementwise_plan(self, problem: ElementwiseProblem, options: Options) -> PrimitivePlan:
        """D = op_abc(op_ab(alpha op_a(A), beta op_b(B)), gamma op_c(C))."""

    def orientation_trial(
        self,
        problems: tuple[ContractionProblem, ContractionProblem],
        plan_for: Callable[[ContractionProblem], PrimitivePlan],
    ) -> OrientationTrial | None:
        """A trial between two layouts of a final contraction's new result (preferred
        first), or None where the backend does not choose by measurement."""


@dataclass(frozen=True)
class BackendEntry:
    """A registered backend: its name, the root module of its array type, the
    ``module:Class`` that makes it, and how messages call its arrays."""

    name: str
    array_module: str
    factory: str
    array_name: str


_ENTRIES: dict[str, BackendEntry] = {}  # by array module
_NAMED: dict[str, BackendEntry] = {}
_BACKENDS: dict[str, Backend] = {}
_BY_TYPE: dict[type, Backend] = {}  # array type -> backend made so far (the warm path)
_LOCK = threading.Lock()
HOST = "numpy"  # the array module of everything that is not another backend's array


def register_backend(name: str, array_module: str, factory: str, array_name: str) -> None:
    """Register a backend for arrays whose type lives in ``array_module``.

    Args:
        name: The backend's name ("cpu", "gpu").
        array_module: The root module of its array type ("numpy", "cupy").
        factory: "module:Class", imported when an array of that type first arrives.
        array_name: How messages call its arrays ("NumPy", "CuPy").
    """
    entry = BackendEntry(name, array_module, factory, array_name)
    with _LOCK:
        _ENTRIES[array_module] = entry
        _NAMED[name] = entry


register_backend("cpu", "numpy", "cpu_fallback.backend:CpuBackend", "NumPy")
register_backend("gpu", "cupy", "gpu_tc.cuda.backend:GpuBackend", "CuPy")


def backend_named(name: str) -> Backend:
    """The backend called ``name``, made on first use."""
    backend = _BACKENDS.get(name)
    if backend is None:
        with _LOCK:
            backend = _BACKENDS.get(name)
            if backend is None:
                module, _, cls = _NAMED[name].factory.partition(":")
                backend = getattr(importlib.import_module(module), cls)()
                _BACKENDS[name] = backend
                _BY_TYPE[backend.array_type] = backend
    return backend


def backend_of_type(cls: type) -> Backend | None:
    """The backend already made for arrays of type ``cls`` (None if none yet)."""
    return _BY_TYPE.get(cls)


def _is_scalar(x: Any) -> bool:
    """A Python or NumPy number: an operand any backend takes (numpy.einsum's rule)."""
    return isinstance(x, (int, float, complex, np.generic))


def _device_entry(x: Any) -> BackendEntry | None:
    """The entry of a non-host backend whose array ``x`` is."""
    entry = _ENTRIES.get(type(x).__module__.split(".")[0])
    return None if entry is None or entry.array_module == HOST else entry


def select_backend(operands: Sequence[Any], context: str) -> Backend:
    """The backend for these operands: another backend's arrays go to it; NumPy arrays
    and array-likes to the CPU; Python and NumPy scalars go with either.

    Raises:
        OperandError: arrays of two backends are mixed (host values count as NumPy's).
    """
    entries = [_device_entry(x) for x in operands]
    device = next((e for e in entries if e is not None), None)
    if device is None:
        return backend_named(_ENTRIES[HOST].name)
    first = entries.index(device)
    for index, (x, entry) in enumerate(zip(operands, entries)):
        if entry != device and not (entry is None and _is_scalar(x)):
            raise OperandError(
                f"operand {index} is a {type(x).__name__} but operand {first} is a "
                f"{device.array_name} array in {context}: move every operand to one device"
            )
    return backend_named(device.name)


def host_pool() -> Any:
    """The CPU backend's pool of large buffers (cpu_fallback.pool.HostPool): ``stats()``,
    ``clear()`` and a settable ``limit`` in idle bytes (0 turns it off)."""
    from cpu_fallback.pool import HOST_POOL

    return HOST_POOL
