"""Sums over strided views by numpy.einsum's loops and by compiled loops: routes that
compete with NumPy's ufunc reductions where the data are strided (traces, partial
traces, sums across the fastest axis), chosen between by timing (cpu_fallback.measure).
numpy.einsum adds whole rows where the ufunc's reduction walks element by element
('abcd->ad' of a 64^4 array, both split over 2 threads: 3.9 ms against 4.3, timed by the
plan itself on a 2-core host). The compiled loops (cpu_fallback.sum_kernel) run on one
thread or share their outer loop among OpenMP's threads: which is faster depends on the
size, the access pattern and how busy the host is (waking the threads costs ~0.1-0.2 ms
on 2 cores; 'ijkj->ik' of a 64^4 array, 2 MiB read, ran 3.5x faster threaded), so both
variants are timed too."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, PrimitivePlan, Scalars
from gpu_tc.options import ReduceOp, UnaryOp
from gpu_tc.problem import ReductionProblem, TensorSpec, contiguous_spec

from . import kernels, pool
from .permute import write_scaled
from .reduction import CpuReductionPlan
from .sum_layout import SumLayout, sum_layout

# Below this many elements NumPy's reduction costs microseconds: nothing to win.
MIN_ELEMENTS = 1 << 14
# bool sums are logical ors (NumPy's); float16 never reaches a plan (computed in float32).
_DTYPES = "bBhHiIlLqQfdFD"


def strided_sum_plans(problem: ReductionProblem,
                      budget: int | None = None) -> tuple[PrimitivePlan, ...]:
    """The plans that compete with the ufunc reduction for a large SUM of a strided
    view: numpy.einsum's loops (A and D of one dtype), then :func:`kernel_plans`;
    none for a small sum, an operator, another reduction, or a contiguous summed inner
    axis (the ufunc's pairwise sum is more accurate there)."""
    a = problem.a
    if (problem.op_reduce is not ReduceOp.SUM or problem.op_a is not UnaryOp.IDENTITY
            or a.dtype not in _DTYPES or a.size < MIN_ELEMENTS
            or sum_layout(problem, problem.d) is None):
        return ()
    if a.dtype != problem.d.dtype:
        return kernel_plans(problem, budget)
    return (CpuReductionPlan(problem, budget, by_einsum=True), *kernel_plans(problem, budget))


def kernel_plans(problem: ReductionProblem,
                 budget: int | None = None) -> tuple[KernelSumPlan, ...]:
    """The compiled plans of a SUM of a strided view: on one thread, and threaded where
    the outer loop has more than one index or the middle rows can be shared (see
    :func:`split_parts`), each adding rows and, for a kept inner axis of non-unit
    stride, summing columns too (threaded, also four elements a pass); none where they
    do not apply (an operator, another reduction, a pair of dtypes they do not sum, a
    small or contiguous sum, the kernel not built)."""
    a = problem.a
    if (problem.op_reduce is not ReduceOp.SUM or problem.op_a is not UnaryOp.IDENTITY
            or a.dtype not in _DTYPES or a.size < MIN_ELEMENTS):
        return ()
    kernel = _kernels()
    if kernel is None or not kernel.sums(a.dtype, problem.d.dtype):
        return ()
    layout = sum_layout(problem, problem.d)
    if layout is None:
        return ()
    # A kept inner axis at a stride other than 1 may be summed a column at a time (each
    # output in a register over the middle indices) instead of adding rows: 1.1-2.2x
    # faster on 64^4 partial traces ('ijkj->ik', 'kjij->ik'), 1.3-1.4x slower on
    # 'ijkj->ik' of 256 x 16 x 256 x 16 (a Zen 3 host), so both are timed.
    columns = layout.inner_kept and abs(layout.inner[1]) != 1 and layout.summed_src.size > 1
    parts = split_parts(problem, layout, kernel.threads(), budget)
    plans = [KernelSumPlan(problem, layout)]
    if layout.kept_src.size > 1:
        plans.append(KernelSumPlan(problem, layout, threaded=True))
    if parts:
        plans.append(KernelSumPlan(problem, layout, threaded=True, split=parts))
    if columns:
        plans.append(KernelSumPlan(problem, layout, by_column=True))
        if layout.kept_src.size > 1:
            plans.append(KernelSumPlan(problem, layout, threaded=True, by_column=True))
            # Four elements a pass: faster where each is a line from far away (a 64^4
            # 'ijkj->ik' in float64), slower from nearer caches and in float32 (sums.c).
            if layout.summed_src.size >= 4:
                plans.append(KernelSumPlan(problem, layout, threaded=True, by_column=True,
                                           by_fours=True))
    return tuple(plans)


def split_parts(problem: ReductionProblem, layout: SumLayout, threads: int,
                budget: int | None) -> int:
    """In how many parts the threaded kernel shares the middle rows instead of the outer
    indices (fewer outer indices than threads, e.g. 'abcd->d'): each thread sums its
    share of the rows into its own copy of D's span, then the copies are added in order;
    0 where that does not apply, or where the copies would exceed ``budget`` or an
    eighth of A's elements (their extra pass would cost more than the threads win)."""
    parts = min(threads, layout.summed_src.size)
    if threads < 2 or layout.kept_src.size >= threads or parts < 2:
        return 0
    if _copy_elements(problem, layout, parts) * 8 > problem.a.size:
        return 0
    return 0 if budget is not None and copy_bytes(problem, layout, parts) > budget else parts


def copy_bytes(problem: ReductionProblem, layout: SumLayout, parts: int) -> int:
    """The bytes of the ``parts`` copies of D that shared rows are summed into."""
    return _copy_elements(problem, layout, parts) * np.dtype(problem.d.dtype).itemsize


def _copy_elements(problem: ReductionProblem, layout: SumLayout, parts: int) -> int:
    return parts * max(layout.dst_span, problem.d.size)  # D's span, or a new D's


class FoldedSumPlan(PlanDefaults):
    """D = alpha * sum(A) + beta * C by a kernel that writes the sum: straight into D
    when alpha is 1 and beta 0, else into a new array of D's shape, then scaled into D;
    a warm call into a new result (``fresh``) is the kernel into a new array. Subclasses
    give the kernel's layout of a sum into a layout of D (:meth:`_layout`) and the
    kernel's call of a layout, its arguments gathered once (:meth:`_bound`)."""

    route: str
    reason: str

    def __init__(self, problem: ReductionProblem, layout: Any) -> None:
        d = problem.d
        self.problem = problem
        self.layout = layout
        self._folded = contiguous_spec(d.labels, d.extents, d.dtype)
        self._into = self._bound(layout)
        self._into_folded = self._bound(self._layout(problem, self._folded))
        self.fresh = self._fresh_call()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(route={self.route!r}, reason={self.reason!r})"

    def _layout(self, problem: ReductionProblem, d: TensorSpec) -> Any:
        raise NotImplementedError

    def _bound(self, layout: Any) -> Callable[[Any, Any], None]:
        raise NotImplementedError

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        """Write the sum into ``d``; ``c`` (D's shape) is read when beta != 0."""
        alpha, beta = scalars.alpha, scalars.beta
        if alpha == 1 and beta == 0:
            self._into(inputs[0], d)
            return
        folded = np.empty(self._folded.extents, d.dtype)
        self._into_folded(inputs[0], folded)
        write_scaled(folded, d, alpha, beta, c)

    def _fresh_call(self) -> Any:
        """``f(a)`` returning the sum as a new C-ordered array (0-d for a total) where D
        is laid out so; else None."""
        d = self.problem.d
        if d.strides != self._folded.strides:
            return None
        extents, dtype, into = d.extents, np.dtype(d.dtype), self._into
        size = math.prod(extents) * dtype.itemsize
        allocate = pool.allocator(size)

        def fresh(a: Any) -> Any:
            out = allocate(extents, dtype)
            into(a, out)
            return out

        return fresh


class KernelSumPlan(FoldedSumPlan):
    """D = alpha * sum(A) + beta * C by the loop nest of cpu_fallback.sum_layout, on one
    thread or (``threaded``) with the outer loop shared among OpenMP's threads, or, given
    ``split`` (a count of parts, see :func:`split_parts`), the middle rows."""

    def __init__(self, problem: ReductionProblem, layout: SumLayout,
                 threaded: bool = False, by_column: bool = False, split: int = 0,
                 by_fours: bool = False) -> None:
        self._parallel = threaded
        self._by_column = by_column
        self._by_fours = by_fours
        self._split = split
        super().__init__(problem, layout)
        self.temporary_bytes = copy_bytes(problem, layout, split) if split else 0
        kind = ("column-loops-by-fours" if by_fours else "column-loops") if by_column else "loops"
        self.route = f"reduce:threaded-{kind}" if threaded else f"reduce:{kind}"
        n, stride, _ = layout.inner
        inner = "kept" if layout.inner_kept else "summed"
        if by_column:
            inner += ", each element summed over the middle indices"
            inner += " four a pass" if by_fours else ""
        threads = "OpenMP's threads" if threaded else "one thread"
        if split:
            threads += (f" sharing the middle indices, each into its own copy of D "
                        f"({self.temporary_bytes} bytes), the copies then added in order")
        self.reason = (
            f"SUM by compiled loops on a strided view, no copy of A: inner axis {inner} "
            f"({n} x stride {stride}), {layout.kept_src.size} outer x "
            f"{layout.summed_src.size} middle indices, {threads}"
        )

    def _layout(self, problem: ReductionProblem, d: TensorSpec) -> SumLayout | None:
        return sum_layout(problem, d)

    def _bound(self, layout: SumLayout) -> Callable[[Any, Any], None]:
        kernel = _kernels()
        assert kernel is not None  # kernel_plans loaded it
        return kernel.bound(layout, self.problem.a.dtype, self.problem.d.dtype,
                            self._parallel, self._by_column, self._split, self._by_fours)


def _kernels() -> ModuleType | None:
    """cpu_fallback.sum_kernel, or None where its extension was not built."""
    return kernels.load("sum_kernel", "sums of strided views run as NumPy reductions")
