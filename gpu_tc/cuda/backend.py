"""GpuBackend: CuPy arrays, planned onto cuTENSOR 2.x and cuBLAS.

Imported only when CuPy arrays reach the core (so CuPy is already imported). Route
choice per contraction: an empty result or sum; bool and integer data on CuPy's own
kernels (:mod:`gpu_tc.cuda.cupy_kernels`), as are complex operations with a unary
operator cuTENSOR refuses (:mod:`gpu_tc.cuda.unary_rules`); then cuBLAS when the
problem maps onto one GEMM without a copy (and ``Options.allow_cublas``, and
libcublas loads), else cuTENSOR; every plan records its route and the reason. A
library that does not load costs its routes only (:mod:`gpu_tc.cuda.libraries`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import cupy
import numpy as np
from cupy.lib.stride_tricks import as_strided

from gpu_tc.errors import BackendError, MemoryLimitError, OperandError
from gpu_tc.options import Options, UnaryOp
from gpu_tc.problem import (
    ContractionProblem,
    ElementwiseProblem,
    OperandLayout,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
    array_layout,
)

from . import layout_trial, libraries, strided_sum
from .cupy_kernels import (
    INTEGRAL,
    CupyContractionPlan,
    CupyElementwisePlan,
    CupyPermutationPlan,
    CupyReductionPlan,
    integral,
)
from .descriptors import extra_key, pointer_alignment
from .empty import EmptyPlan, EmptySumContractionPlan, EmptySumReductionPlan
from .event_timing import MIN_FLOPS, VARIANT_FAILURES
from .gemm_route import cublas_gemm, staged_gemm
from .timed_plan import TimedPlan
from .unary_rules import refused_unary

# Reductions of fewer elements of A (a 4x4 trace) run on cuTENSOR untimed: at a few
# microseconds a call, the routes differ by less than the timing's noise.
MIN_REDUCED = 4096


def _cutensor_plans() -> Any:
    """The cuTENSOR plan modules (plans, elementwise), once libcutensor loads.

    Raises:
        BackendError: cuTENSOR cannot be loaded; the message names the failure and its fix.
    """
    library = libraries.cutensor()
    if not library.loaded:
        raise BackendError(
            f"cuTENSOR could not be loaded ({library.error}): {library.fix}",
            status="CUTENSOR_STATUS_NOT_INITIALIZED",
        )
    from . import elementwise, plans

    return plans, elementwise


def _cupy_reason(unary: dict[str, UnaryOp], dtype: str) -> str | None:
    """Why an operation with these unary operators on ``dtype`` data runs on CuPy's
    kernels (integers and bools; operators cuTENSOR refuses), or None for cuTENSOR."""
    return INTEGRAL if integral(dtype) else refused_unary(unary, dtype)


def _within(plan: Any, options: Options, what: str) -> Any:
    """``plan`` (on CuPy's kernels), if its temporaries fit ``Options.memory_limit``.

    Raises:
        MemoryLimitError: they do not; the message names the need and the route.
    """
    limit, need = options.memory_limit, plan.temporary_bytes
    if limit is not None and need > limit:
        raise MemoryLimitError(
            f"the {what} needs {need} bytes of temporaries on CuPy's kernels ({plan.reason}) "
            f"but Options.memory_limit={limit}", need)
    return plan


class GpuBackend:
    """The CuPy backend: plans run on the operands' device and CuPy's current stream."""

    name = "gpu"
    array_type = cupy.ndarray

    layout = staticmethod(array_layout)

    def adopt(self, operand: Any) -> cupy.ndarray:
        """``operand`` as a CuPy array (a host value is copied to the current device); one
        whose byte strides are not whole elements becomes a C-ordered copy."""
        x = operand if isinstance(operand, cupy.ndarray) else cupy.asarray(np.asarray(operand))
        if x.itemsize and any(s % x.itemsize for s in x.strides):
            return x.copy()
        return x

    @staticmethod
    def layout_key(array: cupy.ndarray) -> Hashable:
        """Shape, byte strides and dtype (the device and alignment join by key_extra)."""
        return (array.shape, array.strides, array.dtype)

    @staticmethod
    def dtype(array: cupy.ndarray) -> np.dtype[Any]:
        """The array's dtype."""
        return array.dtype

    @staticmethod
    def writable(array: cupy.ndarray) -> bool:
        """Every CuPy array may be written."""
        return True

    @staticmethod
    def whole_strides(array: cupy.ndarray) -> bool:
        """Whether every byte stride is a whole number of elements."""
        return not any(s % array.itemsize for s in array.strides) if array.itemsize else True

    @staticmethod
    def warm_key(args: Sequence[Any]) -> Hashable | None:
        """(subscripts, the current device, then each array's shape, strides, dtype and
        pointer alignment) when every operand is a CuPy array on the current device with
        whole-element strides; None otherwise (the full path then checks, and names what
        is wrong)."""
        device = cupy.cuda.runtime.getDevice()
        key: list[Any] = [args[0], device]
        for x in args[1:]:
            if type(x) is not cupy.ndarray:
                return None
            memory = x.data
            if memory.device_id != device or not GpuBackend.whole_strides(x):
                return None
            key += (x.shape, x.strides, x.dtype, pointer_alignment(memory.ptr))
        return tuple(key)

    def key_extra(self, arrays: Sequence[Any], context: str) -> tuple[Any, ...]:
        """The device and each operand's pointer alignment (plain ints, never pointers).

        Raises:
            OperandError: operands on different devices, or not on the current device.
        """
        current = cupy.cuda.runtime.getDevice()
        devices = [x.data.device_id for x in arrays]
        for index, device in enumerate(devices):
            if device != devices[0]:
                raise OperandError(
                    f"operand {index} is on GPU {device} but operand 0 is on GPU {devices[0]} "
                    f"in {context}: move every operand to one device"
                )
        if devices and devices[0] != current:
            raise OperandError(
                f"the operands are on GPU {devices[0]} but the current CuPy device is GPU "
                f"{current} in {context}: call under `with cupy.cuda.Device({devices[0]}):`"
            )
        return extra_key(current, [x.data.ptr for x in arrays])

    def empty(self, extents: tuple[int, ...], dtype: str) -> cupy.ndarray:
        """A new C-ordered array on the current device."""
        return cupy.empty(extents, dtype)

    def cast(self, array: cupy.ndarray, dtype: str) -> cupy.ndarray:
        """A C-ordered copy of ``array`` in ``dtype``."""
        return array.astype(dtype, order="C", copy=True)

    def view(
        self, array: cupy.ndarray, spec: TensorSpec, writable: bool = False,
        start: tuple[int, ...] = (),
    ) -> cupy.ndarray:
        """A view with the extents and strides (in elements) of ``spec``, from the
        element of index ``start`` (CuPy views are always writable)."""
        if start:
            array = array[tuple(slice(i, None) for i in start)]
        itemsize = array.itemsize
        return as_strided(array, spec.extents, tuple(s * itemsize for s in spec.strides))

    def viewer(
        self, source: OperandLayout, spec: TensorSpec, writable: bool = False,
        start: tuple[int, ...] = (),
    ) -> Callable[[cupy.ndarray], cupy.ndarray]:
        """:meth:`view`, the same for every layout."""
        view = self.view
        return lambda x: view(x, spec, writable, start)

    def overlaps(self, a: Any, b: Any) -> bool:
        """Whether the memory of ``a`` and ``b`` may overlap (a bounds check)."""
        return bool(cupy.may_share_memory(a, b))

    def copy_into(self, source: cupy.ndarray, destination: cupy.ndarray) -> None:
        """Copy ``source`` into ``destination``, cast to its dtype, on the current stream."""
        cupy.copyto(destination, source, casting="unsafe")

    def finish(self, result: cupy.ndarray) -> cupy.ndarray:
        """The result itself: a 0-d result stays a 0-d CuPy array, as in cupy.einsum."""
        return result

    def contraction_plan(self, problem: ContractionProblem, options: Options) -> Any:
        """An empty-sum, CuPy (integers), cuBLAS or cuTENSOR plan, with its route and reason."""
        extents = problem.a.extents + problem.b.extents + problem.d.extents
        if 0 in problem.d.extents:
            return EmptyPlan("the result is empty")
        if 0 in extents:
            return EmptySumContractionPlan()
        if integral(problem.d.dtype):
            return _within(CupyContractionPlan(problem), options, "contraction")
        device = cupy.cuda.runtime.getDevice()
        if not options.allow_cublas:
            why = "Options.allow_cublas is False"
        else:
            route = cublas_gemm(problem)
            why = route.reason
            if route.gemm is not None:
                blas = libraries.cublas()
                if blas.loaded:
                    from .cublas import CublasContractionPlan

                    gemm = CublasContractionPlan(problem, route.gemm, route.reason, device)
                    if problem.flops < MIN_FLOPS or not libraries.cutensor().loaded:
                        return gemm
                    plans, _ = _cutensor_plans()
                    try:
                        rival = plans.CutensorContractionPlan(
                            problem, options, device, "timed against cuBLAS")
                    except VARIANT_FAILURES:  # e.g. no workspace within memory_limit
                        return gemm
                    return TimedPlan((gemm, rival), problem.d)
                why = f"cuBLAS could not be loaded ({blas.error}): {blas.fix}"
        plans, _ = _cutensor_plans()
        tensor = plans.CutensorContractionPlan(problem, options, device, why)
        staged = None
        if options.allow_cublas and problem.flops >= MIN_FLOPS and libraries.cublas().loaded:
            staged = self._staged_gemm(problem, options, device)
        return tensor if staged is None else TimedPlan((tensor, staged), problem.d)

    def _staged_gemm(self, problem: ContractionProblem, options: Options, device: int) -> Any:
        """cuBLAS on copies of A and/or B (:func:`.gemm_route.staged_gemm`), or None where
        that does not map or its copies do not fit ``Options.memory_limit``."""
        staged = staged_gemm(problem)
        if staged is None:
            return None
        from .cublas import StagedCublasPlan

        copies = [
            self.permutation_plan(PermutationProblem(x, y), options) if copied else None
            for x, y, copied in zip((problem.a, problem.b), (staged.problem.a, staged.problem.b),
                                    staged.staged)
        ]
        plan = StagedCublasPlan(staged, (copies[0], copies[1]), device)
        limit = options.memory_limit
        return None if limit is not None and plan.temporary_bytes > limit else plan

    def permutation_plan(self, problem: PermutationProblem, options: Options) -> Any:
        """A cuTENSOR permutation (CuPy's copy for integers and for what cuTENSOR
        refuses; nothing when B is empty)."""
        if 0 in problem.b.extents:
            return EmptyPlan("the result is empty")
        cupy_reason = _cupy_reason({"op_a": problem.op_a}, problem.b.dtype)
        if cupy_reason:
            return _within(CupyPermutationPlan(problem, cupy_reason), options, "permutation")
        plans, _ = _cutensor_plans()
        return plans.CutensorPermutationPlan(problem, cupy.cuda.runtime.getDevice())

    def reduction_plan(self, problem: ReductionProblem, options: Options) -> Any:
        """A cuTENSOR reduction on A's (possibly diagonal) view, timed on the first calls
        against CuPy's reduction kernel and, for a float sum, gpu_tc's strided-sum
        kernel (CuPy's alone for integers and for what cuTENSOR refuses)."""
        if 0 in problem.d.extents:
            return EmptyPlan("the result is empty")
        if 0 in problem.a.extents:
            return EmptySumReductionPlan(problem)
        cupy_reason = _cupy_reason({"op_a": problem.op_a}, problem.d.dtype)
        if cupy_reason:
            return _within(CupyReductionPlan(problem, cupy_reason), options, "reduction")
        plans, _ = _cutensor_plans()
        reduction = plans.CutensorReductionPlan(problem, options, cupy.cuda.runtime.getDevice())
        if problem.a.size < MIN_REDUCED:
            return reduction
        rivals: list[Any] = []
        kernel = CupyReductionPlan(problem, "CuPy's reduction kernel, timed against cuTENSOR")
        limit = options.memory_limit
        if limit is None or kernel.temporary_bytes <= limit:
            rivals.append(kernel)
        if strided_sum.applies(problem):  # no temporaries
            with contextlib.suppress(BackendError):  # not built here: not a route
                rivals.append(strided_sum.StridedSumPlan(problem, cupy.cuda.runtime.getDevice()))
        return TimedPlan((reduction, *rivals), problem.d) if rivals else reduction

    def elementwise_plan(self, problem: ElementwiseProblem, options: Options) -> Any:
        """A cuTENSOR element-wise binary or trinary operation (CuPy's ufuncs for
        integers and for what cuTENSOR refuses)."""
        if 0 in problem.d.extents:
            return EmptyPlan("the result is empty")
        unary = {"op_a": problem.op_a, "op_c": problem.op_c}
        if problem.b is not None:
            unary["op_b"] = problem.op_b
        cupy_reason = _cupy_reason(unary, problem.d.dtype)
        if cupy_reason:
            return _within(CupyElementwisePlan(problem, cupy_reason), options,
                           "element-wise operation")
        _, elementwise = _cutensor_plans()
        return elementwise.CutensorElementwisePlan(problem, cupy.cuda.runtime.getDevice())

    def orientation_trial(
        self,
        problems: tuple[ContractionProblem, ContractionProblem],
        plan_for: Callable[[ContractionProblem], Any],
    ) -> Any:
        """Time the layouts of a large final contraction's new result (both GEMM
        orientations and the layout asked for) on its first calls, with CUDA events
        (:mod:`gpu_tc.cuda.layout_trial`); None below its MIN_FLOPS."""
        if problems[0].flops < MIN_FLOPS:
            return None
        return layout_trial.LayoutTrial(layout_trial.layouts(problems), plan_for)
