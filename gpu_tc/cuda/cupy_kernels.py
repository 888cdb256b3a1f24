"""Plans on CuPy's own kernels, for what cuTENSOR and cuBLAS cannot run.

cuTENSOR contracts, reduces and permutes floating-point data only (its compute
descriptors are floating-point types) and cuBLAS has no exact integer GEMM, so bool
and integer problems run on CuPy: cupy.einsum for contractions (CuPy's integer
matrix product), ndarray reductions, and ufuncs. Integers wrap around as NumPy's do;
a bool sum of products is a logical or of ands, counted in int64 and compared with 0.
Complex permutations, reductions and element-wise operations with a unary operator
cuTENSOR refuses (:mod:`gpu_tc.cuda.unary_rules`) run here too.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.options import BinaryOp, ReduceOp, UnaryOp
from gpu_tc.problem import (
    ContractionProblem,
    ElementwiseProblem,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
)

from .operands import check_device, new_result_call

INTEGRAL = "cuTENSOR has no integer or bool arithmetic: CuPy's own kernels"


def integral(dtype: str) -> bool:
    """Whether ``dtype`` is bool or an integer (cuTENSOR computes with neither)."""
    return np.dtype(dtype).kind in "biu"


# The operators that reach these plans: those of complex data cuTENSOR refuses (the
# real-only ones are refused for complex data earlier, as for integers: gpu_tc.operators).
_UFUNCS = {
    UnaryOp.SQRT: cupy.sqrt, UnaryOp.RCP: cupy.reciprocal,
    UnaryOp.TANH: cupy.tanh, UnaryOp.EXP: cupy.exp, UnaryOp.LOG: cupy.log,
    UnaryOp.ABS: cupy.absolute, UnaryOp.NEG: cupy.negative, UnaryOp.SIN: cupy.sin,
    UnaryOp.COS: cupy.cos, UnaryOp.TAN: cupy.tan, UnaryOp.SINH: cupy.sinh,
    UnaryOp.COSH: cupy.cosh, UnaryOp.ASIN: cupy.arcsin, UnaryOp.ACOS: cupy.arccos,
    UnaryOp.ATAN: cupy.arctan, UnaryOp.ASINH: cupy.arcsinh, UnaryOp.ACOSH: cupy.arccosh,
    UnaryOp.ATANH: cupy.arctanh, UnaryOp.CEIL: cupy.ceil, UnaryOp.FLOOR: cupy.floor,
}


def _sigmoid(x: Any, out: Any = None) -> Any:
    """1 / (1 + exp(-x)), as gpu_tc.operators computes it."""
    result = cupy.negative(x, out=out)
    cupy.exp(result, out=result)
    cupy.add(result, 1, out=result)
    return cupy.reciprocal(result, out=result)


def _unary(op: UnaryOp, x: Any, out: Any = None) -> Any:
    """op(x) by CuPy's ufuncs (gpu_tc.operators checked that ``op`` suits the dtype)."""
    if op is UnaryOp.RELU:
        return cupy.maximum(x, 0, out=out)
    if op is UnaryOp.CONJ and x.dtype.kind == "c":
        return cupy.conjugate(x, out=out)
    if op is UnaryOp.SIGMOID:
        return _sigmoid(x, out)
    function = _UFUNCS.get(op)
    if function is not None:
        if out is not None and function is cupy.absolute and out.dtype != x.real.dtype:
            cupy.copyto(out, function(x))  # |z| of complex data is real; D stays complex
            return out
        return function(x, out=out)
    if op not in (UnaryOp.IDENTITY, UnaryOp.CONJ):
        raise AssertionError(f"internal error: no CuPy kernel for {op.name}")
    if out is None:
        return x  # IDENTITY, and CONJ of a real value
    cupy.copyto(out, x)
    return out


def _binary(op: BinaryOp, x: Any, y: Any, out: Any = None) -> Any:
    function = {BinaryOp.ADD: cupy.add, BinaryOp.MUL: cupy.multiply,
                BinaryOp.MAX: cupy.maximum, BinaryOp.MIN: cupy.minimum}[op]
    return function(x, y, out=out)


def _combine(value: Any, d: Any, alpha: Any, beta: Any, c: Any) -> None:
    """d = alpha * value + beta * c (``value`` laid out as ``d``; c read when beta != 0)."""
    if alpha != 1:
        value = cupy.multiply(value, alpha)
    if beta == 0 or c is None:
        cupy.copyto(d, value, casting="unsafe")
        return
    if c is not d:
        cupy.multiply(c, beta, out=d)
    elif beta != 1:
        cupy.multiply(d, beta, out=d)
    cupy.add(d, value, out=d)


def _bytes(spec: TensorSpec, dtype: str | None = None) -> int:
    """The bytes of a new array shaped like ``spec`` (in its dtype, or ``dtype``)."""
    return spec.size * np.dtype(dtype or spec.dtype).itemsize


class _CupyPlan(PlanDefaults):
    route = "cupy"
    reason: str

    def __repr__(self) -> str:
        return f"{type(self).__name__}(route={self.route!r}, reason={self.reason!r})"


class CupyContractionPlan(_CupyPlan):
    """D = alpha * A B + beta * C by cupy.einsum."""

    def __init__(self, problem: ContractionProblem) -> None:
        a, b, d = problem.a, problem.b, problem.d
        letters = dict(zip(dict.fromkeys(a.labels + b.labels + d.labels), string.ascii_letters))
        self._subscripts = ",".join(
            "".join(letters[x] for x in spec.labels) for spec in (a, b)
        ) + "->" + "".join(letters[x] for x in d.labels)
        self._counts = d.dtype == "?"
        counted = ", bools counted in int64" if self._counts else ""
        self.reason = f"{INTEGRAL} (cupy.einsum{counted})"
        # cupy.einsum's product (and alpha times it); bools first cast to int64.
        casts = _bytes(a, "q") + _bytes(b, "q") if self._counts else 0
        self.temporary_bytes = casts + 2 * _bytes(d, "q" if self._counts else None)

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write the contraction into ``d``."""
        a, b = inputs
        if self._counts:
            a, b = a.astype(cupy.int64), b.astype(cupy.int64)
        product = cupy.einsum(self._subscripts, a, b)
        if self._counts:
            product = product != 0
        _combine(product, d, scalars.alpha, scalars.beta, c)


class CupyPermutationPlan(_CupyPlan):
    """B = alpha * op(A) with B's axes reordered: a strided CuPy copy."""

    def __init__(self, problem: PermutationProblem, reason: str) -> None:
        self.reason = reason
        self._perm = tuple(problem.a.labels.index(x) for x in problem.b.labels)
        self._op = problem.op_a
        # op writes into B, but |z| of complex data is real: made first, then copied.
        complex_abs = self._op is UnaryOp.ABS and np.dtype(problem.b.dtype).kind == "c"
        self.temporary_bytes = _bytes(problem.b) // 2 if complex_abs else 0

    def execute(self, inputs: Sequence[Any], b: Any, scalars: Scalars, addend: Any) -> None:
        """Write alpha * op(a), permuted, into ``b``."""
        _unary(self._op, inputs[0].transpose(self._perm), out=b)
        if scalars.alpha != 1:
            cupy.multiply(b, scalars.alpha, out=b)


class CupyReductionPlan(_CupyPlan):
    """D = alpha * reduce(op(A)) + beta * C by ndarray reductions (any/all for bool)."""

    def __init__(self, problem: ReductionProblem, reason: str) -> None:
        self.reason = reason
        a, d = problem.a, problem.d
        self.device = cupy.cuda.runtime.getDevice()
        self._context = f"reduction {a.labels}->{d.labels}"
        self._axes = tuple(i for i, x in enumerate(a.labels) if x not in d.labels)
        self._d_as_a = tuple(d.labels.index(x) for x in a.labels if x in d.labels)
        self._op = problem.op_a
        self._method, self._dtype = _REDUCTIONS[problem.op_reduce, d.dtype == "?"], d.dtype
        self.fresh = new_result_call(self, d)
        # op(A) whole (none for IDENTITY), the folded result, and alpha times it.
        applied = 0 if self._op is UnaryOp.IDENTITY else _bytes(a)
        self.temporary_bytes = applied + 2 * _bytes(d)

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write the reduction into ``d``."""
        check_device(self.device, (inputs[0], d, c), self._context)
        x = _unary(self._op, inputs[0])
        method = getattr(x, self._method)
        target = d.transpose(self._d_as_a)
        plain = scalars.alpha == 1 and (scalars.beta == 0 or c is None)
        if plain and self._method == "sum" and x.dtype == target.dtype and x.dtype.kind in "fc":
            # CuPy may hand a contiguous x to CUB's block reduction, which writes ``out`` as
            # a C-ordered buffer (and, for an F-ordered x, gives it F strides): only a
            # C-ordered target beside a C-ordered or strided x takes the sum in place.
            if target.flags.c_contiguous and (x.flags.c_contiguous or not x.flags.f_contiguous):
                _sum_kernel()(x, axis=self._axes, out=target)
            else:
                cupy.copyto(target, _sum_kernel()(x, axis=self._axes))
            return
        if self._method not in ("sum", "prod"):
            folded = method(axis=self._axes)
        elif plain:  # straight into D (CuPy's CUB reductions stage their own temporary)
            method(axis=self._axes, dtype=self._dtype, out=target)
            return
        else:
            folded = method(axis=self._axes, dtype=self._dtype)
        _combine(folded, target, scalars.alpha, scalars.beta,
                 None if c is None else c.transpose(self._d_as_a))


@functools.cache
def _sum_kernel() -> Any:
    """CuPy's own reduction codegen for a float or complex sum, whatever
    CUPY_ACCELERATORS sends ndarray.sum to (with "cutensor" there, cuTENSOR's reduction
    again: no rival to time against gpu_tc's cuTENSOR plan)."""
    return cupy.ReductionKernel("T x", "T y", "x", "a + b", "y = a", "0", "gpu_tc_sum")


# (operator, bool data) -> the ndarray method that folds it.
_REDUCTIONS = {
    (ReduceOp.SUM, False): "sum", (ReduceOp.PROD, False): "prod",
    (ReduceOp.MAX, False): "max", (ReduceOp.MIN, False): "min",
    (ReduceOp.SUM, True): "any", (ReduceOp.PROD, True): "all",
    (ReduceOp.MAX, True): "any", (ReduceOp.MIN, True): "all",
}


class CupyElementwisePlan(_CupyPlan):
    """D = op_abc(op_ab(alpha op_a(A), beta op_b(B)), gamma op_c(C)) by CuPy ufuncs."""

    def __init__(self, problem: ElementwiseProblem, reason: str) -> None:
        self.reason = reason
        self.problem = problem
        # Each input's op(x) and its scaled copy, and op_ab's result, D's shape.
        inputs = [x for x in (problem.a, problem.b, problem.c) if x is not None]
        self.temporary_bytes = sum(2 * _bytes(x, problem.d.dtype) for x in inputs) + (
            _bytes(problem.d) if problem.b is not None else 0)

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, addend: Any) -> None:
        """Write the result into ``d`` (inputs: A, C or A, B, C)."""
        p = self.problem
        left = self._scaled(inputs[0], p.a, p.op_a, scalars.alpha)
        if p.b is not None:
            right = self._scaled(inputs[1], p.b, p.op_b, scalars.beta)
            left = _binary(p.op_ab, left, right)
        last = self._scaled(inputs[-1], p.c, p.op_c, scalars.gamma)
        _binary(p.op_abc, left, last, out=d)

    def _scaled(self, x: Any, spec: TensorSpec, op: UnaryOp, scale: Any) -> Any:
        """scale * op(x), its axes in D's order with extent 1 for labels it lacks."""
        d = self.problem.d
        present = [label for label in d.labels if label in spec.labels]
        x = x.transpose([spec.labels.index(label) for label in present])
        x = x.reshape([spec.extent(label) if label in spec.labels else 1 for label in d.labels])
        x = _unary(op, x)
        return x if scale == 1 else cupy.multiply(x, scale)
