"""CpuBackend: NumPy arrays, plans that run views through numpy.matmul (BLAS)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gpu_tc.backend import PrimitivePlan
from gpu_tc.gemm import policies
from gpu_tc.memory import nbytes
from gpu_tc.options import Options
from gpu_tc.problem import (
    ContractionProblem,
    ElementwiseProblem,
    OperandLayout,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
    array_layout,
)

from . import cblas, mkl
from .contraction import CpuContractionPlan
from .einsum_loops import einsum_loops_plan, product_loops_plan
from .elementwise import CpuElementwisePlan
from .gathered import gathered_plans
from .measure import MIN_FLOPS
from .measured_plan import MeasuredPlan
from .orientation import OrientationTrial
from .pairwise_sum import one_thread_plan, pairwise_sum_plans
from .permute import CpuPermutationPlan, may_stream
from .pool import HOST_POOL
from .reduction import CpuReductionPlan
from .sliced_views import c_ordered, slicing
from .strided_sum import strided_sum_plans
from .tiling import default_budget, uncopied

# A broadcast product (nothing summed) is bound by writing D: one NumPy ufunc on one
# thread, or the small-K kernel (K = 1) on all; timed where D has at least this many bytes.
PRODUCT_MIN_BYTES = 256 << 10


class CpuBackend:
    """The NumPy/BLAS backend: every plan executes on host memory."""

    name = "cpu"
    array_type = np.ndarray

    layout = staticmethod(array_layout)

    def adopt(self, operand: Any) -> np.ndarray:
        """``operand`` as a NumPy array; one whose byte strides are not whole elements
        becomes a C-ordered copy, one in non-native byte order a native copy (BLAS and
        the copy kernels read native numbers)."""
        x = operand if type(operand) is np.ndarray else np.asarray(operand)
        if not x.dtype.isnative:
            return x.astype(x.dtype.newbyteorder("="))
        if x.itemsize and any(s % x.itemsize for s in x.strides):
            return x.copy()
        return x

    @staticmethod
    def layout_key(array: np.ndarray) -> Hashable:
        """Shape, byte strides and dtype, read as they are."""
        return (array.shape, array.strides, array.dtype)

    @staticmethod
    def dtype(array: np.ndarray) -> np.dtype[Any]:
        """The array's dtype."""
        return array.dtype

    @staticmethod
    def writable(array: np.ndarray) -> bool:
        """NumPy's writeable flag."""
        return bool(array.flags.writeable)

    @staticmethod
    def whole_strides(array: np.ndarray) -> bool:
        """Whether every byte stride is a whole number of elements."""
        return not any(s % array.itemsize for s in array.strides) if array.itemsize else True

    def key_extra(self, arrays: Sequence[Any], context: str) -> tuple[Any, ...]:
        """Nothing besides the layouts: NumPy copes with any alignment."""
        return ()

    @staticmethod
    def warm_key(args: Sequence[Any]) -> Hashable | None:
        """(subscripts, then each array's shape, strides and dtype) when every operand
        is a NumPy array: flat and uncanonicalised, a few hundred nanoseconds."""
        if len(args) == 3:
            subscripts, a, b = args
            if type(a) is np.ndarray and type(b) is np.ndarray:
                return (subscripts, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype)
            return None
        if len(args) == 2:
            subscripts, a = args
            return (subscripts, a.shape, a.strides, a.dtype) if type(a) is np.ndarray else None
        if len(args) == 4:  # a chain of three
            subscripts, a, b, c = args
            if type(a) is np.ndarray and type(b) is np.ndarray and type(c) is np.ndarray:
                return (subscripts, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype,
                        c.shape, c.strides, c.dtype)
            return None
        key: list[Any] = [args[0]]
        for x in args[1:]:
            if type(x) is not np.ndarray:
                return None
            key += (x.shape, x.strides, x.dtype)
        return tuple(key)

    def empty(self, extents: tuple[int, ...], dtype: str) -> np.ndarray:
        """A new C-ordered array; a large one from the host pool (cpu_fallback.pool)."""
        return HOST_POOL.empty(extents, dtype)

    def cast(self, array: np.ndarray, dtype: str) -> np.ndarray:
        """A C-ordered copy of ``array`` in ``dtype``."""
        return np.array(array, dtype=dtype, order="C", copy=True)

    def view(
        self, array: np.ndarray, spec: TensorSpec, writable: bool = False,
        start: tuple[int, ...] = (),
    ) -> np.ndarray:
        """A view with the extents and strides (in elements) of ``spec``, from the
        element of index ``start``; read-only unless ``writable``."""
        if start:
            array = array[tuple(slice(i, None) for i in start)]
        flags = array.flags
        itemsize = array.itemsize
        strides = tuple([s * itemsize for s in spec.strides])
        if ((flags.c_contiguous or flags.f_contiguous) and (flags.writeable or not writable)
                and min(strides, default=0) >= 0):
            # Three times cheaper than as_strided (a warm trace is a few microseconds),
            # and the view's base is the array's, as numpy.einsum's views have. (NumPy
            # refuses a buffer view that reaches back before the buffer's start.)
            view = np.ndarray(spec.extents, array.dtype, buffer=array, strides=strides)
            if not writable:
                view.setflags(write=False)
            return view
        return as_strided(array, spec.extents, strides, writeable=writable)

    def viewer(
        self, source: OperandLayout, spec: TensorSpec, writable: bool = False,
        start: tuple[int, ...] = (),
    ) -> Callable[[np.ndarray], np.ndarray]:
        """:meth:`view` of arrays laid out as ``source``. A diagonal (a trace) or a
        batch of them of a C-ordered array is a reshape and slices (sliced_views),
        decided here: writable as the array, and a few times cheaper a call than a view
        built from strides (a warm ``bii->bi`` is about a microsecond)."""
        sliced = None
        if not start and c_ordered(source.shape, source.strides):
            sliced = slicing(source.shape, spec.extents, spec.strides)
        if sliced is None:
            view = self.view
            return lambda x: view(x, spec, writable, start)
        shape, index, axes = sliced
        if axes is None and writable:
            return lambda x: x.reshape(shape)[index]

        def take(x: np.ndarray) -> np.ndarray:
            taken = x.reshape(shape)[index]
            if axes is not None:
                taken = taken.transpose(axes)
            if not writable:
                taken.setflags(write=False)
            return taken

        return take

    def overlaps(self, a: Any, b: Any) -> bool:
        """Whether the memory of ``a`` and ``b`` may overlap (a bounds check)."""
        return bool(np.may_share_memory(a, b))

    def copy_into(self, source: np.ndarray, destination: np.ndarray) -> None:
        """Copy ``source`` into ``destination``, cast to its dtype (a value past a float
        dtype's range becomes inf silently, as in numpy.einsum's own float16 loops)."""
        with np.errstate(over="ignore"):
            np.copyto(destination, source, casting="unsafe")

    def finish(self, result: Any) -> Any:
        """A NumPy scalar for a 0-d result, as numpy.einsum returns (a scalar that a
        fast path already returned passes as it is)."""
        return result[()] if isinstance(result, np.ndarray) and result.ndim == 0 else result

    def contraction_plan(self, problem: ContractionProblem, options: Options) -> PrimitivePlan:
        """A GEMM lowering of ``problem`` (see gpu_tc.gemm) whose copies stay within
        ``options.memory_limit`` or the default budget (in tiles where they would not);
        where lowerings compete (pack an operand or loop over it; the GEMM by NumPy's
        BLAS, by MKL's where installed (cpu_fallback.mkl) or by the small-K kernel, each
        build of it this CPU runs that is worth timing (small_k.narrower_builds); and
        where one copies or loops, the small-K kernel on the operands where they lie:
        cpu_fallback.gathered, which also computes a broadcast product as a K = 1
        product) and the problem has measure.MIN_FLOPS (a product: PRODUCT_MIN_BYTES of
        D), a plan that times them on its first calls (cpu_fallback.measure). Where the
        batch labels lie innermost and the free extents are few (batched dots,
        cpu_fallback.einsum_loops), numpy.einsum's loops are timed too, or, below
        MIN_FLOPS, run untimed; a large broadcast product times them beside NumPy's
        multiply."""
        budget = default_budget(problem) if options.memory_limit is None else options.memory_limit
        choices = policies(problem)
        loops = einsum_loops_plan(problem, options.memory_limit)
        if problem.flops < MIN_FLOPS and not _large_product(problem):
            return loops or CpuContractionPlan(problem, choices[0], budget)
        lowered = [CpuContractionPlan(problem, policy, budget) for policy in choices]
        lowered += [CpuContractionPlan(problem, plan.policy, budget, small_k=build)
                    for plan in lowered for build in plan.small_k_builds()]
        engine = mkl.engine()
        if engine is not None and engine.serves(problem.d.dtype):
            lowered += [CpuContractionPlan(problem, plan.policy, budget, engine=engine)
                        for plan in lowered[:len(choices)] if plan.gemms]
        plans: list[PrimitivePlan] = list(lowered)
        if any(plan.rearranges or plan.multiplies for plan in lowered):
            plans += gathered_plans(problem, lowered[0], budget)
        plans += _loop_plans(problem, choices, budget, engine)
        if loops is None and _large_product(problem):
            loops = product_loops_plan(problem, options.memory_limit)
        plans += [loops] if loops is not None else []
        if len(plans) == 1:
            return plans[0]
        # The rule's lowering on NumPy's BLAS comes first only as a guess: the first
        # measurement keeps the fastest (TCCG's case 24 at half extents in float32 kept
        # OpenBLAS at 49 ms against MKL's 45, inside the margin).
        return MeasuredPlan(plans, key=f"contraction {problem!r}", d=problem.d,
                            incumbent=False)

    def permutation_plan(self, problem: PermutationProblem, options: Options) -> PrimitivePlan:
        """A strided copy into B's layout; where the copy is large (cpu_fallback.blocked's
        NONTEMPORAL_MIN_BYTES) and its rows contiguous in B, that with plain stores and
        with non-temporal ones, timed (plain stores first, the non-temporal ones kept
        only where they win by the margin, measure.MARGIN)."""
        plan = CpuPermutationPlan(problem)
        if not may_stream(*plan.copy_layouts, problem.b.dtype):
            return plan
        return MeasuredPlan([plan, CpuPermutationPlan(problem, stream=True)],
                            key=f"permutation {problem!r}", prefixes=("cached", "streamed"))

    def reduction_plan(self, problem: ReductionProblem, options: Options) -> PrimitivePlan:
        """A ufunc reduction on a view, split over threads when large; for a large sum
        of a strided view, that, numpy.einsum's loops and the compiled loops on one thread
        or several (cpu_fallback.strided_sum), timed; for a large float sum of contiguous
        stretches, that and the same pairwise sums on OpenMP's threads
        (cpu_fallback.pairwise_sum), timed, the latter first where the ufunc's
        reduction would be split over threads; for a middling float sum of several
        contiguous rows, those pairwise sums on the calling thread, untimed."""
        one_thread = one_thread_plan(problem)
        if one_thread is not None:
            return one_thread
        plan = CpuReductionPlan(problem, options.memory_limit)
        strided = strided_sum_plans(problem, options.memory_limit)
        pairwise = pairwise_sum_plans(problem)
        if not strided and not pairwise:
            return plan
        # Where the ufunc reduction is split over the Python pool, the same sums on
        # OpenMP's threads start as the choice: they keep NumPy's bits and wake faster
        # after a pause; the pool's split must beat them by the margin to be kept.
        if plan.threaded:
            return MeasuredPlan([*pairwise, plan, *strided], key=f"reduction {problem!r}",
                                d=problem.d)
        return MeasuredPlan([plan, *strided, *pairwise], key=f"reduction {problem!r}",
                            d=problem.d)

    def elementwise_plan(self, problem: ElementwiseProblem, options: Options) -> CpuElementwisePlan:
        """NumPy ufuncs on broadcast views."""
        return CpuElementwisePlan(problem)

    def orientation_trial(
        self,
        problems: tuple[ContractionProblem, ContractionProblem],
        plan_for: Callable[[ContractionProblem], PrimitivePlan],
    ) -> OrientationTrial | None:
        """Time both layouts of a large final GEMM's new result (calls are synchronous,
        so host timings are real); None below MIN_FLOPS."""
        if problems[1].flops < MIN_FLOPS:
            return None
        plans = (plan_for(problems[0]), plan_for(problems[1]))
        return OrientationTrial(plans, problems, array_layout,
                                key=f"orientation {problems!r}")


def _loop_plans(problem: ContractionProblem, choices: Sequence[str], budget: int,
                engine: mkl.MklEngine | None) -> list[PrimitivePlan]:
    """Where a lowering copies an operand, the loop of GEMMs on views that replaces the
    copy (tiling.uncopied), on NumPy's BLAS and on MKL's: one per distinct loop."""
    plans: list[PrimitivePlan] = []
    seen = set()
    dtype = problem.d.dtype
    engines = [None] + ([engine] if engine is not None and engine.serves(dtype) else [])
    for policy in choices:
        loops = {adds: uncopied(problem, policy, adds) for adds in {cblas.available(dtype), True}}
        for by in engines:
            loop = loops[cblas.available(dtype) if by is None else True]
            if loop is not None and (loop.outer, loop.inner, by) not in seen:
                seen.add((loop.outer, loop.inner, by))
                plans.append(CpuContractionPlan(problem, policy, budget, engine=by, loop=loop))
    return plans


def _large_product(problem: ContractionProblem) -> bool:
    """Whether ``problem`` sums nothing (every contracted extent is 1) and writes at
    least PRODUCT_MIN_BYTES of D."""
    d = problem.d
    return (all(problem.a.extent(x) == 1 for x in problem.roles.contracted)
            and nbytes(d) >= PRODUCT_MIN_BYTES)
