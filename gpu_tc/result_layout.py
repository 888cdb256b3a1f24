"""The layout of a new result: the one its last contraction writes by itself, as
numpy.einsum(optimize=True) and opt_einsum leave it, so that no new result is written to
a temporary and permuted again (a product that sums nothing: an operand's own order)."""

from __future__ import annotations

import math

from .problem import TensorSpec, contiguous_spec, label_roles
from .strides import batch_innermost, order_by_stride


def natural_output(a: TensorSpec, b: TensorSpec, output: TensorSpec) -> TensorSpec:
    """A new result laid out as the GEMM writes it, listed in the output's label order.

    Like numpy.einsum(optimize=True) and opt_einsum, a new result is the contraction's
    own layout seen through a permuted view: (batch, M, N) with each group in its
    operand's stride order, or (batch, N, M) when the output's last label is in M. So
    no new result is ever written to a temporary and permuted again. A batch read along
    it (:func:`along_batch`) stays innermost, (M, N, batch); a product that sums nothing
    takes the order of an operand that has every label of D.
    """
    return natural_outputs(a, b, output)[0]


# A batch of products whose D has at most this many elements a batch index, or whose
# A or B has no free label, is read along the batch where the batch lies innermost.
MOST_FREE = 16


def along_batch(a: TensorSpec, b: TensorSpec, output: TensorSpec) -> bool:
    """Whether the contraction is a batch of dot or matrix-vector products (one side
    without a free label, or at most MOST_FREE elements of D a batch index) whose batch
    labels lie innermost in A and in B (gpu_tc.strides.batch_innermost)."""
    roles = label_roles(a.labels, b.labels, output.labels)
    m, n = (math.prod(output.extent(x) for x in free) for free in (roles.free_a, roles.free_b))
    return (bool(roles.batch) and (min(m, n) == 1 or m * n <= MOST_FREE)
            and batch_innermost(a, roles.batch) and batch_innermost(b, roles.batch))


def natural_outputs(a: TensorSpec, b: TensorSpec, output: TensorSpec) -> tuple[TensorSpec, ...]:
    """The preferred natural layout (see natural_output), then the other orientation
    when M and N are both non-empty."""
    roles = label_roles(a.labels, b.labels, output.labels)
    if not roles.contracted:
        # A product that sums nothing (numpy's broadcasting): no GEMM layout to keep, so
        # D in the memory order of an operand that has every label of D, read in order
        # as D is written ('ij,j->ij' of a 400 x 400 array had its shared j outermost,
        # as a batch label is: a Fortran-ordered result in 307 us against numpy's 100).
        for spec in (a, b):
            if set(output.labels) <= set(spec.labels):
                order = order_by_stride(spec, output.labels)
                extents = [output.extent(x) for x in order]
                return (contiguous_spec(order, extents, output.dtype).permuted(output.labels),)
    batch = order_by_stride(a, roles.batch)
    m = order_by_stride(a, roles.free_a)
    n = order_by_stride(b, roles.free_b)
    orders = [m + n, n + m] if m and n else [m + n]
    if output.labels[-1:] in m and m:
        orders.reverse()
    # A batch of dots or matrix-vector products read across the batch keeps the batch
    # innermost in D too: loops along the batch (cpu_fallback.einsum_loops) write D in
    # order ('ijk,jk->ik' of 64^3 float64: 200 us into a D with k outermost, 107 by
    # numpy.einsum into its own), where GEMMs would read the operands packed anyway.
    inner = along_batch(a, b, output)
    layouts = [o + batch if inner else batch + o for o in orders]
    return tuple(
        contiguous_spec(x, [output.extent(y) for y in x], output.dtype).permuted(output.labels)
        for x in layouts
    )
