"""NumPy meanings of the operator Enums (the CPU backend computes with them) and the
check of which operator applies to which dtype.

The GPU backend passes the Enum values to cuTENSOR instead; the reference kernel keeps
its own table, so it judges these rather than sharing them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import DTypeError
from .options import BinaryOp, ReduceOp, UnaryOp

_REAL_ONLY_UNARY = frozenset({UnaryOp.RELU, UnaryOp.CEIL, UnaryOp.FLOOR, UnaryOp.SIGMOID})
_REAL_ONLY_BINARY = frozenset({BinaryOp.MAX, BinaryOp.MIN})
# The unary operators that keep integers (and bools) integers; the rest give floats.
_INTEGER_UNARY = frozenset({UnaryOp.IDENTITY, UnaryOp.CONJ, UnaryOp.NEG, UnaryOp.ABS,
                            UnaryOp.RELU})
_BOOL_UNARY = frozenset({UnaryOp.IDENTITY, UnaryOp.ABS})  # NumPy's others give integers


def _sigmoid(x: Any, out: Any = None) -> Any:
    result = np.negative(x, out=out)
    np.exp(result, out=result)
    np.add(result, 1, out=result)
    return np.reciprocal(result, out=result)


def _relu(x: Any, out: Any = None) -> Any:
    return np.maximum(x, 0, out=out)


def _identity(x: Any, out: Any = None) -> Any:
    if out is None:
        return np.array(x, copy=True)
    np.copyto(out, x)
    return out


UNARY: dict[UnaryOp, Callable[..., Any]] = {
    UnaryOp.IDENTITY: _identity,
    UnaryOp.SQRT: np.sqrt,
    UnaryOp.RELU: _relu,
    UnaryOp.CONJ: np.conjugate,
    UnaryOp.RCP: np.reciprocal,
    UnaryOp.SIGMOID: _sigmoid,
    UnaryOp.TANH: np.tanh,
    UnaryOp.EXP: np.exp,
    UnaryOp.LOG: np.log,
    UnaryOp.ABS: np.absolute,
    UnaryOp.NEG: np.negative,
    UnaryOp.SIN: np.sin,
    UnaryOp.COS: np.cos,
    UnaryOp.TAN: np.tan,
    UnaryOp.SINH: np.sinh,
    UnaryOp.COSH: np.cosh,
    UnaryOp.ASIN: np.arcsin,
    UnaryOp.ACOS: np.arccos,
    UnaryOp.ATAN: np.arctan,
    UnaryOp.ASINH: np.arcsinh,
    UnaryOp.ACOSH: np.arccosh,
    UnaryOp.ATANH: np.arctanh,
    UnaryOp.CEIL: np.ceil,
    UnaryOp.FLOOR: np.floor,
}

BINARY: dict[BinaryOp, Any] = {
    BinaryOp.ADD: np.add,
    BinaryOp.MUL: np.multiply,
    BinaryOp.MAX: np.maximum,
    BinaryOp.MIN: np.minimum,
}

REDUCE: dict[ReduceOp, Any] = {
    ReduceOp.SUM: np.add,
    ReduceOp.PROD: np.multiply,
    ReduceOp.MAX: np.maximum,
    ReduceOp.MIN: np.minimum,
}


def check_op(op: Any, kind: type[enum.Enum], dtype: str, context: str) -> None:
    """Check that ``op`` is a member of the Enum ``kind`` that applies to ``dtype``.

    Raises:
        DTypeError: ``op`` is not a ``kind``, it orders values of a complex dtype, or it
            gives values of another dtype from integer or bool data.
    """
    if not isinstance(op, kind):
        raise DTypeError(f"{op!r} is not a {kind.__name__} in {context}")
    integral = {"b": _BOOL_UNARY, "i": _INTEGER_UNARY, "u": _INTEGER_UNARY}.get(
        np.dtype(dtype).kind
    )
    if kind is UnaryOp and integral is not None and op not in integral:
        raise DTypeError(
            f"UnaryOp.{op.name} is not defined for {np.dtype(dtype).name} data (it would "
            f"give values of another dtype) in {context}; cast the operand first"
        )
    complex_dtype = np.dtype(dtype).kind == "c"
    real_only = (
        op in _REAL_ONLY_UNARY
        or op in _REAL_ONLY_BINARY
        or (kind is ReduceOp and op in (ReduceOp.MAX, ReduceOp.MIN))
    )
    if complex_dtype and real_only:
        raise DTypeError(
            f"{kind.__name__}.{getattr(op, 'name', op)} orders values and is not defined "
            f"for complex dtype {np.dtype(dtype).name} in {context}"
        )
