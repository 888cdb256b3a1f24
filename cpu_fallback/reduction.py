"""Reductions on the CPU: NumPy ufunc reductions on strided views, split over threads.

NumPy reduces on one core; a large reduction is memory-bound, and one core does not
saturate memory. So a reduction moving THREAD_MIN_BYTES or more runs as one ufunc
reduction per thread, each over a slab of A cut along A's outermost axis (the one of
largest stride, so that each slab is one stretch of memory): when that axis is kept,
each thread writes its own slab of D; when it is reduced, each thread folds its slab into
a partial result and the partials are combined with the same ufunc, as a tree. NumPy releases
the GIL inside the reductions, so the threads run in parallel. A float sum whose summed
axes are one contiguous stretch per output element is one pairwise sum in NumPy: its
slabs are cut only where NumPy's recursion halves the stretch (cpu_fallback.sum_layout),
so the tree of partials gives NumPy's bits; where no such cut falls between two indices
of the split axis, it runs on one thread.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.memory import nbytes
from gpu_tc.numpy_einsum import NUMPY_EINSUM
from gpu_tc.operators import REDUCE, UNARY
from gpu_tc.options import ReduceOp, UnaryOp
from gpu_tc.problem import ReductionProblem, TensorSpec, contiguous_spec

from . import workers
from .sum_layout import BLOCK, cuts, row_layout

# Below this many bytes of memory traffic, one thread: the hand-off costs more than it
# saves. A view with no unit-stride axis (a strided diagonal) costs a cache line per element.
THREAD_MIN_BYTES = 8 << 20
CACHE_LINE = 64


def traffic(a: TensorSpec) -> int:
    """Bytes of memory a pass over ``a`` moves: its size, or a cache line per element
    when no axis has unit stride."""
    itemsize = np.dtype(a.dtype).itemsize
    unit = any(abs(s) == 1 for s, n in zip(a.strides, a.extents) if n > 1)
    per_element = itemsize if unit or not a.extents else max(itemsize, CACHE_LINE)
    return int(np.prod(a.extents, dtype=np.int64)) * per_element


def split_axis(shape: tuple[int, ...], strides: tuple[int, ...], threads: int) -> int | None:
    """The axis to cut A along for ``threads`` threads: the one of largest stride among
    those with at least ``threads`` entries; None when no axis has that many."""
    candidates = [i for i, n in enumerate(shape) if n >= threads]
    if threads < 2 or not candidates:
        return None
    return max(candidates, key=lambda i: abs(strides[i]))


def pairwise_split(problem: ReductionProblem, threads: int) -> tuple[int, np.ndarray] | None:
    """Where to cut a float sum of one contiguous stretch per output element, NumPy's one
    pairwise sum each, so that the slabs' sums added as a tree have NumPy's bits: the
    stretch's outermost axis and the bounds along it of the most pieces (a power of two,
    at most ``threads``, each longer than NumPy's block) that NumPy's recursion cuts
    between its indices (none where there are not two); None for any other reduction."""
    a, d = problem.a, problem.d
    if (problem.op_reduce is not ReduceOp.SUM or problem.op_a is not UnaryOp.IDENTITY
            or a.dtype not in "fd" or d.dtype != a.dtype):
        return None
    layout = row_layout(problem, d)
    if layout is None or layout.step != 1:
        return None
    axis = max((i for i, e in enumerate(a.extents) if e > 1 and a.labels[i] not in d.labels),
               key=lambda i: a.strides[i])
    step, pieces = a.strides[axis], 1 << (threads.bit_length() - 1)
    while pieces > 1:
        lengths = cuts(layout.length, pieces)
        if lengths.min() > BLOCK and not (lengths % step).any():
            return axis, np.concatenate(([0], np.cumsum(lengths) // step))
        pieces //= 2
    return axis, np.empty(0, int)


class CpuReductionPlan(PlanDefaults):
    """D = alpha * reduce(op(A)) + beta * C, folding the labels of A missing from D by
    the ufunc's reduction, or (``by_einsum``, for a SUM with no operator, A and D of
    one dtype) by numpy.einsum's sum-of-products loops, which add whole rows at a
    time where the ufunc's reduction walks a strided view element by element."""

    def __init__(self, problem: ReductionProblem, budget: int | None = None,
                 by_einsum: bool = False) -> None:
        plain_sum = (problem.op_reduce is ReduceOp.SUM and problem.op_a is UnaryOp.IDENTITY
                     and problem.a.dtype == problem.d.dtype)
        if by_einsum and not plain_sum:
            raise ValueError(f"numpy.einsum sums without an operator, into A's dtype: {problem!r}")
        self.problem = problem
        self.route = "reduce:einsum" if by_einsum else "reduce"
        a, d = problem.a, problem.d
        d_bytes = nbytes(d)
        self._axes = tuple(i for i, x in enumerate(a.labels) if x not in d.labels)
        # The ufunc's axis argument: one axis as an int (a tuple of one cost a 4 x 4
        # float64 'ij->i' 1.49 us a call against 1.00 as an int, NumPy 2.4).
        self._axis = self._axes[0] if len(self._axes) == 1 else self._axes
        kept = [x for x in a.labels if x in d.labels]
        # D's axes in the order the reduction leaves them (A's order).
        self._d_as_a = tuple(d.labels.index(x) for x in kept)
        self._ufunc = REDUCE[problem.op_reduce]
        threads = workers.threads() if traffic(a) >= THREAD_MIN_BYTES and self._axes else 1
        self._split = split_axis(a.extents, a.strides, threads)
        bounds = np.empty(0, int)
        if self._split is not None:
            pairwise = (None if by_einsum or self._split not in self._axes
                        else pairwise_split(problem, threads))
            if pairwise is None:
                bounds = np.linspace(0, a.extents[self._split], threads + 1).astype(int)
            else:
                self._split, bounds = pairwise
                if bounds.size == 0:
                    self._split = None
        # A split along a reduced label gives each slab but the first its own partial
        # result (a scaled call, only from gpu_tc.reduce, also reduces into a new array).
        partials = (bounds.size - 2) * d_bytes if self._split in self._axes else 0
        if budget is not None and partials > budget:
            self._split, partials = None, 0
        self.temporary_bytes = partials
        self.threaded = self._split is not None
        how = "one thread"
        if self._split is not None:
            self._slabs = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
            # Where the split axis sits in the target (kept axes in A's order), if kept.
            self._kept_axis = self._split - sum(1 for i in self._axes if i < self._split)
            how = f"split over {len(self._slabs)} threads along label {a.labels[self._split]!r}"
        kept_axes = [i for i in range(len(a.labels)) if i not in self._axes]
        self._reduce = (functools.partial(_einsum, list(range(len(a.labels))), kept_axes)
                        if by_einsum else functools.partial(self._ufunc.reduce, axis=self._axis))
        by = " by numpy.einsum" if by_einsum else ""
        self.reason = (
            f"{problem.op_reduce.name}{by} over {len(self._axes)} label(s) on a strided view, "
            f"no copy of A, {how}"
        )
        self.fresh = None if by_einsum else self._fresh_call()
        # A ufunc's reduction over every axis returns a NumPy scalar.
        self.fresh_scalar = self.fresh is not None and not d.extents

    def _fresh_call(self) -> Any:
        """``f(a)`` returning D as a new array, one ufunc reduction: when one thread runs
        it, no operator applies, and the reduction leaves D's labels in D's order
        (contiguous, as a new D is laid out); else None."""
        d = self.problem.d
        if (self._split is not None or self.problem.op_a is not UnaryOp.IDENTITY
                or self._d_as_a != tuple(range(len(d.labels)))
                or d.strides != contiguous_spec(d.labels, d.extents, d.dtype).strides):
            return None
        # Only the keywords that change the ufunc's own choice (each costs the call time):
        # axis 0 is its default, and a float's reduction keeps the float's dtype.
        keywords: dict[str, Any] = {} if self._axes == (0,) else {"axis": self._axis}
        dtype = np.dtype(d.dtype)
        if dtype != np.dtype(self.problem.a.dtype) or dtype.kind not in "fc":
            keywords["dtype"] = dtype
        reduce, axis = self._ufunc.reduce, self._axis
        if not keywords:
            return reduce
        if "dtype" not in keywords:  # the axis given in place: a partial's keyword costs more
            return lambda a: reduce(a, axis)
        return functools.partial(reduce, **keywords)

    def __repr__(self) -> str:
        return f"CpuReductionPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        """Write the reduction into ``d``; ``c`` (D's shape) is read when beta != 0."""
        a = inputs[0]
        alpha, beta = scalars.alpha, scalars.beta
        op = self.problem.op_a
        x = a if op is UnaryOp.IDENTITY else UNARY[op](a)
        if beta == 0:
            self._reduce_into(x, d.transpose(self._d_as_a))
            if alpha != 1:
                np.multiply(d, alpha, out=d)
            return
        folded = np.empty([d.shape[i] for i in self._d_as_a], d.dtype)
        self._reduce_into(x, folded)
        if c is not d:
            np.multiply(c, beta, out=d)
        elif beta != 1:
            np.multiply(d, beta, out=d)
        target = d.transpose(self._d_as_a)
        target += folded if alpha == 1 else np.multiply(folded, alpha)

    def _reduce_into(self, x: Any, target: Any) -> None:
        """target = reduce(x) over the plan's axes; ``target`` has the kept axes in A's order."""
        ufunc, axes, reduce = self._ufunc, self._axes, self._reduce
        if self._split is None or x.size == 0:
            reduce(x, out=target)
            return
        axis = self._split
        slabs = [_cut(x, axis, part) for part in self._slabs]
        if axis in axes:
            outs = [target] + [np.empty_like(target) for _ in slabs[1:]]
        else:
            outs = [_cut(target, self._kept_axis, part) for part in self._slabs]
        jobs = [workers.pool().submit(reduce, slab, out=out)
                for slab, out in zip(slabs[1:], outs[1:])]
        reduce(slabs[0], out=outs[0])
        for job in jobs:
            job.result()
        if axis in axes:  # as a tree: for 2^k slabs cut where NumPy's recursion cuts, its order
            step = 1
            while step < len(outs):
                for i in range(0, len(outs) - step, 2 * step):
                    ufunc(outs[i], outs[i + step], out=outs[i])
                step *= 2


def _einsum(axes: list[int], kept: list[int], x: Any, out: Any) -> None:
    """out = the sum of ``x`` over the axes not in ``kept`` (numpy.einsum's sublists)."""
    NUMPY_EINSUM(x, axes, kept, out=out)


def _cut(x: Any, axis: int, part: slice) -> Any:
    index = [slice(None)] * x.ndim
    index[axis] = part
    return x[tuple(index)]
