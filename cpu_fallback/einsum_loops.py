"""D = alpha * A * B + beta * C by numpy.einsum's own sum-of-products loops on the
operands where they lie, for a batch of dot or matrix-vector products whose batch labels
lie innermost ('ij,ij->j', 'ijk,ik->jk', 'ijk,ijk->k'). BLAS runs those as a stack of
tiny GEMMs on vectors whose elements lie a batch apart, each element a cache line of its
own, or after copying both operands; numpy.einsum's loops run along the batch axis,
contiguous in A, B and D (2-core Xeon, float64, 'ij,ij->j' of 1000 x 1000: 8.0 ms by the
batched GEMM, 0.56 by these loops; 300 x 300: 65 us against 31; 'ijk,ik->jk' of
64 x 32 x 64: 225 us packed against 44)."""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.memory import nbytes
from gpu_tc.numpy_einsum import NUMPY_EINSUM
from gpu_tc.problem import ContractionProblem, label_roles
from gpu_tc.result_layout import along_batch
from gpu_tc.run import dense_allocation
from gpu_tc.strides import same_layout

from . import pool
from .fresh_call import FRESH_MAX_BYTES
from .permute import write_scaled

# The loops are offered for a batch of dots and matrix-vector products read along the
# batch (gpu_tc.result_layout.along_batch: past a few elements of D a batch index, a
# batch of GEMMs has work to share and the loops have no blocking) of at least
# MIN_BATCH indices: the loops' inner runs are that long.
MIN_BATCH = 16


def einsum_loops_plan(problem: ContractionProblem,
                      budget: int | None = None) -> EinsumLoopsPlan | None:
    """The plan where ``problem`` is read along its batch (see above) of MIN_BATCH
    indices or more; None otherwise, past numpy.einsum's 52 letters, or where a scaled
    call's D would not fit ``budget``."""
    a, b, d = problem.a, problem.b, problem.d
    roles = label_roles(a.labels, b.labels, d.labels)
    batch = math.prod(d.extent(x) for x in roles.batch)
    summed = math.prod(a.extent(x) for x in roles.contracted)
    if not along_batch(a, b, d) or batch < MIN_BATCH or summed < 2:
        return None  # (a product summing nothing is NumPy's multiply, or timed below)
    return _fitting(problem, budget)


def product_loops_plan(problem: ContractionProblem,
                       budget: int | None = None) -> EinsumLoopsPlan | None:
    """The plan of any product of two operands (the backend times it beside a large
    broadcast product's multiply: NumPy's multiply ran 'ij,i->ij' of 300 x 300 float64 in
    66 us, numpy.einsum's loops in 57, where one operand lacks labels of D; both whole,
    multiply is the faster, 37 us against 49 at 256 x 256); None where neither operand
    lacks a label of D, past numpy.einsum's 52 letters, or where a scaled call's D would
    not fit ``budget``."""
    a, b, d = problem.a, problem.b, problem.d
    if set(d.labels) <= set(a.labels) and set(d.labels) <= set(b.labels):
        return None
    return _fitting(problem, budget)


def _fitting(problem: ContractionProblem, budget: int | None) -> EinsumLoopsPlan | None:
    """The plan, unless its labels are past numpy.einsum's 52 letters or a scaled
    call's D would not fit ``budget``."""
    a, b, d = problem.a, problem.b, problem.d
    labels = dict.fromkeys(a.labels + b.labels + d.labels)
    if len(labels) > len(string.ascii_letters) or (budget is not None and nbytes(d) > budget):
        return None
    return EinsumLoopsPlan(problem)


class EinsumLoopsPlan(PlanDefaults):
    """D = alpha * A * B + beta * C by numpy.einsum on the operands as they are: into D
    itself when unscaled, else into a new array of D's shape, then scaled into D."""

    route = "einsum"

    def __init__(self, problem: ContractionProblem) -> None:
        self.problem = problem
        a, b, d = problem.a, problem.b, problem.d
        letters = dict(zip(dict.fromkeys(a.labels + b.labels + d.labels), string.ascii_letters))
        self._subscripts = "{},{}->{}".format(
            *("".join(letters[x] for x in spec.labels) for spec in (a, b, d)))
        self.temporary_bytes = nbytes(d)  # a scaled call's product
        batch = label_roles(a.labels, b.labels, d.labels).batch
        how = (f"along the batch label(s) {batch!r}, innermost in both" if along_batch(a, b, d)
               else "as they broadcast")
        self.reason = (f"numpy.einsum's sum-of-products loops read A and B where they lie, "
                       f"{how}: no BLAS, no copies")
        dense = dense_allocation(d)
        self.fresh = None if dense is None else self._fresh_call(*dense)

    def __repr__(self) -> str:
        return f"EinsumLoopsPlan(reason={self.reason!r})"

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        """Write the product into ``d``; ``c`` (D's shape) is read when beta != 0."""
        a, b = inputs
        alpha, beta = scalars.alpha, scalars.beta
        if alpha == 1 and beta == 0:
            NUMPY_EINSUM(self._subscripts, a, b, out=d)
            return
        write_scaled(NUMPY_EINSUM(self._subscripts, a, b), d, alpha, beta, c)

    def _fresh_call(self, extents: tuple[int, ...], axes: tuple[int, ...] | None) -> Any:
        """``f(a, b)``: the product as a new array laid out as D. Where D has axes and
        fewer than FRESH_MAX_BYTES, numpy.einsum allocates it, as it does for its own
        callers and as a warm GEMM's matmul does (passing ``out`` and the pool's lookup
        cost 4-5 us of a 300 x 300 'ij,j->ij''s 39 us), while numpy lays the result out
        as D: once it does not, this plan's calls allocate D's layout themselves."""
        d = self.problem.d
        dtype, subscripts, einsum = np.dtype(d.dtype), self._subscripts, NUMPY_EINSUM
        allocate = pool.allocator(nbytes(d))
        d_strides = tuple(s * dtype.itemsize for s in d.strides)
        numpy_allocates = [bool(d.extents) and nbytes(d) < FRESH_MAX_BYTES]

        def into_new(a: Any, b: Any) -> Any:
            out = allocate(extents, dtype)
            if axes is not None:
                out = out.transpose(axes)
            einsum(subscripts, a, b, out=out)
            return out

        def fresh(a: Any, b: Any) -> Any:
            if not numpy_allocates[0]:
                return into_new(a, b)
            result = einsum(subscripts, a, b)
            if result.strides == d_strides or same_layout(
                    d, tuple(s // dtype.itemsize for s in result.strides)):
                return result
            numpy_allocates[0] = False
            return into_new(a, b)

        return fresh
