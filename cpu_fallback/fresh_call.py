"""A warm call of a contraction into a new result as one numpy.matmul (or numpy.multiply,
numpy.dot) on views of the operands, where that call writes D's layout by itself: no
output allocation of gpu_tc's, no copies."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpu_tc.gemm import BroadcastOperand, GemmLowering, MatrixOperand, MultiplyLowering
from gpu_tc.memory import nbytes
from gpu_tc.problem import ContractionProblem, TensorSpec, contiguous_spec
from gpu_tc.strides import same_layout

# A new result this large comes from the host pool (see fresh_call); below it, a warm
# call's own matmul allocates it, as malloc's heap reuses it once warm.
FRESH_MAX_BYTES = 4 << 20


def _shaper(perm: tuple[int, ...], grouped: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """A function viewing an operand as ``shape``, or None when it already is that."""
    identity = perm == tuple(range(len(perm)))
    if identity and grouped == shape:
        return None
    if identity:
        return lambda x: x.reshape(shape)
    return lambda x: x.transpose(perm).reshape(shape)


def outer_extents(problem: ContractionProblem) -> tuple[int, int] | None:
    """(A's size, B's size) where D is their outer product, each read whole in its own
    order (D's labels A's then B's, D C-ordered), of a dtype BLAS multiplies: A as a
    column times B as a row by numpy.dot (BLAS, K = 1; a 64 x 64 float64 'i,j->ij' in
    1.7 us, where NumPy's multiply of a column by a row took 4.4, numpy.einsum 3.9;
    256 x 256: 50 us against 59, einsum 32); else None."""
    a, b, d = problem.a, problem.b, problem.d
    if (d.labels != a.labels + b.labels or not a.labels or not b.labels
            or np.dtype(d.dtype).kind not in "fc"
            or d.strides != contiguous_spec(d.labels, d.extents, d.dtype).strides):
        return None
    return a.size, b.size


def _outer_call(m: int, n: int, extents: tuple[int, ...]) -> Any:
    """``f(a, b)``: the outer product of ``outer_extents`` as a new array of D's extents."""
    dot = np.dot
    if len(extents) == 2:
        return lambda a, b: dot(a.reshape(m, 1), b.reshape(1, n))
    return lambda a, b: dot(a.reshape(m, 1), b.reshape(1, n)).reshape(extents)


def _broadcast(spec: BroadcastOperand, labels: str, d_labels: str) -> Any:
    """A function viewing an operand (of ``labels``) in D's label order with axes of
    one for the labels it lacks, or None where NumPy's broadcasting does that by itself:
    its labels are D's last ones, in its order (an outer product's second vector)."""
    if d_labels[len(d_labels) - len(labels):] == labels:
        return None
    return _shaper(spec.perm, (), spec.shape)


def _matmul_operand(spec: MatrixOperand, swapped: bool) -> Any:
    """A function viewing an operand as the matrix stack matmul takes (``swapped``: its
    last two axes exchanged, for B^T @ A^T), or None when the operand already is one.

    Where no label group merges, the exchange is folded into the one transpose (a
    chain step D = B @ A, which the lowering sees as D^T = A^T B^T, becomes a plain
    matmul of the two arrays)."""
    if not swapped:
        return _shaper(spec.perm, spec.grouped, spec.shape)
    if spec.grouped == spec.shape:
        perm = spec.perm[:-2] + (spec.perm[-1], spec.perm[-2])
        return None if perm == tuple(range(len(perm))) else lambda x: x.transpose(perm)
    shaper = _shaper(spec.perm, spec.grouped, spec.shape)
    return lambda x: (x if shaper is None else shaper(x)).swapaxes(-1, -2)


def fresh_call(low: Any, problem: ContractionProblem) -> Any:
    """``f(a, b)`` returning D as a new result laid out as ``problem.d`` (a NumPy
    scalar for a 0-d D, as numpy.dot returns), when the GEMM (or the broadcast
    product) writes D's layout by itself; else None.

    This lets a warm small call be one numpy.matmul (numpy.dot for one product): no
    output allocation of ours. A
    result of FRESH_MAX_BYTES or more is left to execute(), which writes it into
    pooled memory without the page faults of numpy's fresh allocation.
    """
    d = problem.d
    if nbytes(d) >= FRESH_MAX_BYTES:
        return None
    kernel: Any
    if isinstance(low, MultiplyLowering):
        if d.strides != contiguous_spec(d.labels, d.extents, d.dtype).strides:
            return None
        outer = outer_extents(problem)
        if outer is not None:
            return _outer_call(*outer, d.extents)
        # The product of the operands in D's label order is D's shape, unless a summed
        # label of extent one is dropped.
        summed = set(problem.a.labels + problem.b.labels) - set(d.labels)
        kernel, d_shape, to_d = np.multiply, d.extents if summed else None, None
        fa = _broadcast(low.a, problem.a.labels, d.labels)
        fb = _broadcast(low.b, problem.b.labels, d.labels)
    elif isinstance(low, GemmLowering) and not (low.a.pack or low.b.pack or low.d.pack):
        # matmul returns (batch, M, N) C-ordered, or (batch, N, M) from the operands
        # swapped and transposed (views): D's memory order must be exactly one of them.
        order = _matmul_order(low.d, d)
        if order is None:
            return None
        swapped = order != low.d.perm
        d_shape = tuple(d.extents[i] for i in order)
        identity = order == tuple(range(len(order)))
        to_d = None if identity else tuple(int(i) for i in np.argsort(order))
        fa, fb = _matmul_operand(low.a, swapped), _matmul_operand(low.b, swapped)
        kernel = _reversed_matmul if swapped else np.matmul
        written = low.d.shape[:-2] + (low.d.shape[-1:] + low.d.shape[-2:-1] if swapped
                                      else low.d.shape[-2:])
        dense = _dense(problem.a) and _dense(problem.b)
        if _by_dot(low, problem):
            # numpy.dot, the same BLAS call as numpy.matmul's on matrices for ~0.2 us
            # less a call (a 4x4 product: 0.47 us against 0.68); a vector kept
            # one-dimensional (BLAS gemv, or dot for two vectors: a scalar), so D needs
            # no reshape from a row or a column of one.
            kernel = _reversed_dot if swapped else np.dot
            if not swapped:
                rows, cols = written
                a_vector = not low.a.n_rows  # A has no row label
                b_vector = len(low.b.perm) == low.b.n_rows  # B has no column label
                fa = _vector(low.a) if a_vector else fa
                fb = _vector(low.b) if b_vector else fb
                written = (() if a_vector else (rows,)) + (() if b_vector else (cols,))
                if (a_vector and b_vector and dense and np.dtype(d.dtype).kind != "c"
                        and _in_order(low.a) and _in_order(low.b)):
                    # Both whole arrays, read in their own order: numpy.vdot flattens
                    # them itself (0.41 us for two 4x4 arrays, 0.97 by reshapes and dot).
                    return np.vdot
        if written == d_shape:
            d_shape = None  # matmul already returns D's extents
        if fa is None and fb is None and d_shape is None and to_d is None:
            return kernel
    else:
        return None

    def fresh(a: Any, b: Any) -> Any:
        result = kernel(a if fa is None else fa(a), b if fb is None else fb(b))
        if d_shape is not None:
            result = result.reshape(d_shape)
        return result if to_d is None else result.transpose(to_d)

    return fresh


def gives_scalar(low: Any, problem: ContractionProblem) -> bool:
    """Whether :func:`fresh_call`'s call returns a 0-d D as a NumPy scalar: by numpy.dot
    or numpy.vdot of two vectors; matmul's (1, 1) reshaped, or a broadcast product's, is
    a 0-d array."""
    return not problem.d.extents and isinstance(low, GemmLowering) and _by_dot(low, problem)


def _by_dot(low: GemmLowering, problem: ContractionProblem) -> bool:
    """Whether the call is numpy.dot's: one product, not a stack, of operands that fill
    their memory (numpy.dot copies a strided matrix that matmul hands BLAS as it is), or
    of two vectors into a scalar (read at any stride)."""
    one_product = len(low.a.shape) == 2 == len(low.b.shape) == len(low.d.shape)
    two_vectors = not problem.d.extents and len(low.a.grouped) == 1 == len(low.b.grouped)
    return one_product and (_dense(problem.a) and _dense(problem.b) or two_vectors)


def _matmul_order(spec: MatrixOperand, d: TensorSpec) -> tuple[int, ...] | None:
    """D's axes in the order matmul writes them into a new C-ordered array: (batch,
    M, N), else (batch, N, M) (see :func:`_reversed_matmul`); None when D's layout is
    neither."""
    rows = spec.perm[spec.n_batch:spec.n_batch + spec.n_rows]
    swapped = spec.perm[:spec.n_batch] + spec.perm[spec.n_batch + spec.n_rows:] + rows
    for order in (spec.perm, swapped):
        grouped = d.permuted("".join(d.labels[i] for i in order))
        if grouped.strides == contiguous_spec(grouped.labels, grouped.extents, d.dtype).strides:
            return order
    return None


def _reversed_matmul(a: Any, b: Any) -> Any:
    """b @ a: given A^T and B^T (views), (A @ B) transposed as a new C-ordered
    (batch, N, M) array."""
    return np.matmul(b, a)


def _reversed_dot(a: Any, b: Any) -> Any:
    """:func:`_reversed_matmul` of one product (matrices): numpy.dot(b, a)."""
    return np.dot(b, a)


def _dense(spec: TensorSpec) -> bool:
    """Whether an operand fills its memory in C or Fortran order."""
    c_order = contiguous_spec(spec.labels, spec.extents, spec.dtype).strides
    f_order = contiguous_spec(spec.labels[::-1], spec.extents[::-1], spec.dtype).strides
    return same_layout(spec, c_order) or same_layout(spec, f_order[::-1])


def _in_order(spec: MatrixOperand) -> bool:
    """Whether the operand's axes are already in the order the GEMM groups them."""
    return spec.perm == tuple(range(len(spec.perm)))


def _vector(spec: MatrixOperand) -> Any:
    """A function viewing an operand that is a row or a column of one (A with no row
    label, B with no column label) as a vector of its K elements, or None when it
    already is one."""
    return _shaper(spec.perm, spec.grouped, (math.prod(spec.grouped),))
