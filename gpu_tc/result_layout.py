"""The layout of a new result: the one its last contraction writes by itself, as
numpy.einsum(optimize=True) and opt_einsum leave it, so that no new result is written to
a temporary and permuted again (a product that sums nothing: an operand's own order)."""

from __future__ import annotations

from .problem import TensorSpec, contiguous_spec, label_roles
from .strides import order_by_stride


def natural_output(a: TensorSpec, b: TensorSpec, output: TensorSpec) -> TensorSpec:
    """A new result laid out as the GEMM writes it, listed in the output's label order.

    Like numpy.einsum(optimize=True) and opt_einsum, a new result is the contraction's
    own layout seen through a permuted view: (batch, M, N) with each group in its
    operand's stride order, or (batch, N, M) when the output's last label is in M. So
    no new result is ever written to a temporary and permuted again.
    """
    return natural_outputs(a, b, output)[0]


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
    return tuple(
        contiguous_spec(batch + o, [output.extent(x) for x in batch + o], output.dtype).permuted(
            output.labels
        )
        for o in orders
    )
