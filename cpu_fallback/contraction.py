"""Run a GEMM lowering (gpu_tc.gemm) with numpy.matmul on views and packed buffers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.gemm import (
    BroadcastOperand,
    GemmLowering,
    Lowering,
    MatrixOperand,
    MultiplyLowering,
    lower,
)
from gpu_tc.problem import ContractionProblem, contiguous_spec

from .permute import copy_permuted, write_scaled
from .pool import HOST_POOL, MIN_BYTES


class CpuContractionPlan(PlanDefaults):
    """D = alpha * A * B + beta * C on the CPU; ``route`` and ``reason`` say how."""

    def __init__(self, problem: ContractionProblem, lowering: Lowering | None = None) -> None:
        self.problem = problem
        self.lowering = lower(problem) if lowering is None else lowering
        self.route = "blas:" + self.lowering.route
        self.reason = self.lowering.reason
        self.fresh = _fresh_call(self.lowering, problem)
        low = self.lowering
        # D's axes from the (batch, rows, cols) order of an unpacked temporary.
        self._d_order = tuple(np.argsort(low.d.perm)) if isinstance(low, GemmLowering) else ()

    def __repr__(self) -> str:
        return f"CpuContractionPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        """Write the result into ``d``; ``c`` (D's shape) is read when beta != 0."""
        a, b = inputs
        alpha, beta = scalars.alpha, scalars.beta
        low = self.lowering
        if isinstance(low, GemmLowering):
            self._gemm(low, a, b, d, alpha, beta, c)
        elif isinstance(low, MultiplyLowering):
            product = np.multiply(
                _broadcast(a, low.a), _broadcast(b, low.b), out=None if beta else d
            )
            write_scaled(product, d, alpha, beta, c)
        elif not low.d_empty:
            write_scaled(None, d, alpha, beta, c)

    def _gemm(
        self, low: GemmLowering, a: Any, b: Any, d: Any, alpha: complex, beta: complex, c: Any
    ) -> None:
        a_mat = _matrix(a, low.a)
        b_mat = _matrix(b, low.b)
        if not low.d.pack and beta == 0:
            d_mat = d.transpose(low.d.perm).reshape(low.d.shape)
            np.matmul(a_mat, b_mat, out=d_mat)
            if alpha != 1:
                np.multiply(d_mat, alpha, out=d_mat)
            return
        temp, unmerged = _buffer(low.d, d.dtype)
        np.matmul(a_mat, b_mat, out=temp)
        write_scaled(unmerged.transpose(self._d_order), d, alpha, beta, c)


def _buffer(spec: MatrixOperand, dtype: Any) -> tuple[Any, Any]:
    """A new matrix stack of ``spec.shape`` laid out as ``spec`` asks.

    Returns:
        The stack (batch..., rows, cols), and the same memory with every label of
        ``spec.perm`` as its own axis, in ``perm`` order (for packing or unpacking).
    """
    axes = spec.memory_axes()
    memory = HOST_POOL.empty(tuple(spec.grouped[i] for i in axes), dtype)
    unmerged = memory.transpose(np.argsort(axes))
    batch = spec.shape[:-2]
    if spec.transposed:
        return memory.reshape(batch + (spec.shape[-1], spec.shape[-2])).swapaxes(-1, -2), unmerged
    return memory.reshape(spec.shape), unmerged


def _matrix(x: Any, spec: MatrixOperand) -> Any:
    """``x`` as a matrix stack: a view, or a packed copy when the lowering says so."""
    grouped = x.transpose(spec.perm)
    if not spec.pack:
        return grouped.reshape(spec.shape)
    stack, unmerged = _buffer(spec, x.dtype)
    copy_permuted(grouped, unmerged)
    return stack


def _shaper(perm: tuple[int, ...], grouped: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """A function viewing an operand as ``shape``, or None when it already is that."""
    identity = perm == tuple(range(len(perm)))
    if identity and grouped == shape:
        return None
    if identity:
        return lambda x: x.reshape(shape)
    return lambda x: x.transpose(perm).reshape(shape)


def _fresh_call(low: Any, problem: ContractionProblem) -> Any:
    """``f(a, b)`` returning D as a new C-ordered array, when the GEMM (or the broadcast
    product) naturally produces D's labels in D's order; else None.

    This lets a warm small call be one numpy.matmul: no output allocation of ours. A
    result large enough for the host pool is left to execute(), which writes it into
    pooled memory without the page faults of numpy's fresh allocation.
    """
    d = problem.d
    if math.prod(d.extents) * np.dtype(d.dtype).itemsize >= MIN_BYTES:
        return None
    kernel: Any
    if isinstance(low, MultiplyLowering):
        if d.strides != contiguous_spec(d.labels, d.extents, d.dtype).strides:
            return None
        kernel, d_shape, to_d = np.multiply, d.extents, None
        fa = _shaper(low.a.perm, (), low.a.shape)
        fb = _shaper(low.b.perm, (), low.b.shape)
    elif isinstance(low, GemmLowering) and not (low.a.pack or low.b.pack or low.d.pack):
        # matmul returns (batch, M, N) C-ordered: D's memory order must be exactly that.
        grouped = d.permuted("".join(d.labels[i] for i in low.d.perm))
        if grouped.strides != contiguous_spec(grouped.labels, grouped.extents, d.dtype).strides:
            return None
        kernel, d_shape = np.matmul, low.d.grouped
        identity = low.d.perm == tuple(range(len(low.d.perm)))
        to_d = None if identity else tuple(int(i) for i in np.argsort(low.d.perm))
        fa = _shaper(low.a.perm, low.a.grouped, low.a.shape)
        fb = _shaper(low.b.perm, low.b.grouped, low.b.shape)
        if fa is None and fb is None and d_shape == low.d.shape and to_d is None:
            return np.matmul
    else:
        return None

    def fresh(a: Any, b: Any) -> Any:
        result = kernel(a if fa is None else fa(a), b if fb is None else fb(b))
        result = result.reshape(d_shape)
        return result if to_d is None else result.transpose(to_d)

    return fresh


def _broadcast(x: Any, spec: BroadcastOperand) -> Any:
    return x.transpose(spec.perm).reshape(spec.shape)
