"""The slow, obviously correct kernel that judges both backends.

Every operand is broadcast over the union of labels, multiplied in float64 or
complex128, and the labels missing from the output are summed. No BLAS, no einsum.
It shares nothing with the code it judges: its subscripts reader and its operator
table are its own (the operator Enums only name the operations). Input is assumed
valid: checking it is the judged code's job. Production code never calls this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .options import BinaryOp, ReduceOp, UnaryOp

# Each operator by name, as numpy computes it.
_UNARY: dict[str, Callable[[Any], Any]] = {
    "IDENTITY": lambda x: x,
    "SQRT": np.sqrt,
    "RELU": lambda x: np.maximum(x, 0),
    "CONJ": np.conj,
    "RCP": lambda x: 1 / x,
    "SIGMOID": lambda x: 1 / (1 + np.exp(-x)),
    "TANH": np.tanh,
    "EXP": np.exp,
    "LOG": np.log,
    "ABS": np.abs,
    "NEG": lambda x: -x,
    "SIN": np.sin,
    "COS": np.cos,
    "TAN": np.tan,
    "SINH": np.sinh,
    "COSH": np.cosh,
    "ASIN": np.arcsin,
    "ACOS": np.arccos,
    "ATAN": np.arctan,
    "ASINH": np.arcsinh,
    "ACOSH": np.arccosh,
    "ATANH": np.arctanh,
    "CEIL": np.ceil,
    "FLOOR": np.floor,
}
_BINARY: dict[str, Callable[..., Any]] = {
    "ADD": np.add, "MUL": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
}
_REDUCE: dict[str, Callable[..., Any]] = {
    "SUM": np.sum, "PROD": np.prod, "MAX": np.max, "MIN": np.min,
}
# Stand-ins for the axes "..." covers: private-use characters no subscripts contain.
_ELLIPSIS_BASE = 0xE000


def _read(subscripts: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The labels of each operand's axes and of the output, "..." spelled out."""
    text = "".join(subscripts.split())
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    widths = [rank - (len(t) - 3) if "..." in t else 0 for t, rank in zip(terms, ranks)]
    covered = "".join(chr(_ELLIPSIS_BASE + i) for i in range(max(widths, default=0)))
    terms = [t.replace("...", covered[len(covered) - w :]) for t, w in zip(terms, widths)]
    if arrow:
        return terms, rhs.replace("...", covered)
    letters = "".join(t for t in terms if t)
    once = sorted(x for x in set(letters) if letters.count(x) == 1 and x not in covered)
    return terms, covered + "".join(once)


def _wide(x: Any) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def _diagonal_view(x: np.ndarray, term: str) -> tuple[np.ndarray, str]:
    """Fold repeated labels: index the full array on equal coordinates (a gather)."""
    labels = "".join(dict.fromkeys(term))
    if labels == term:
        return x, term
    extents = {label: n for label, n in zip(term, x.shape)}
    grids = np.indices([extents[label] for label in labels], sparse=True)
    index = tuple(grids[labels.index(label)] for label in term)
    return x[index], labels


def _on_union(x: np.ndarray, term: str, union: str) -> np.ndarray:
    """``x`` (unique labels ``term``) transposed and reshaped to broadcast over ``union``."""
    present = [label for label in union if label in term]
    x = np.transpose(x, [term.index(label) for label in present])
    shape = [x.shape[present.index(label)] if label in term else 1 for label in union]
    return x.reshape(shape)


def einsum(subscripts: str, *operands: Any) -> np.ndarray:
    """numpy.einsum semantics, computed by brute force in double precision."""
    arrays = [_wide(x) for x in operands]
    terms, output = _read(subscripts, [a.ndim for a in arrays])
    union = "".join(dict.fromkeys("".join(terms) + output))
    product: Any = np.ones((), dtype=np.float64)
    for array, term in zip(arrays, terms):
        array, labels = _diagonal_view(array, term)
        product = product * _on_union(array, labels, union)
    summed = tuple(i for i, label in enumerate(union) if label not in output)
    total = np.sum(product, axis=summed)
    kept = [label for label in union if label in output]
    return np.transpose(total, [kept.index(label) for label in output])


def contract(
    subscripts: str, a: Any, b: Any, alpha: complex = 1, beta: complex = 0, c: Any = None
) -> np.ndarray:
    """alpha * einsum(subscripts, a, b) + beta * c, where a and b count only if alpha != 0
    and c only if beta != 0 (as in BLAS's gemm: an inf or nan there is not seen)."""
    result = einsum(subscripts, a, b)
    result = alpha * result if alpha != 0 else np.zeros_like(result)
    return result + beta * _wide(c) if c is not None and beta != 0 else result


def _unary(op: UnaryOp, x: np.ndarray) -> np.ndarray:
    return np.asarray(_UNARY[op.name](x))


def _labelled(subscripts: str, operands: Sequence[Any]) -> list[np.ndarray]:
    """Each operand (diagonals folded) broadcast over the output's labels."""
    arrays = [_wide(x) for x in operands]
    terms, output = _read(subscripts, [a.ndim for a in arrays])
    views = []
    for array, term in zip(arrays, terms):
        array, labels = _diagonal_view(array, term)
        views.append(_on_union(array, labels, output))
    return views


def permute(
    subscripts: str, a: Any, alpha: complex = 1, op_a: UnaryOp = UnaryOp.IDENTITY
) -> np.ndarray:
    """alpha * op_a(a), its axes reordered."""
    (view,) = _labelled(subscripts, [a])
    return alpha * _unary(op_a, view)


def elementwise(
    subscripts: str,
    operands: Sequence[Any],
    scales: Sequence[complex],
    unary: Sequence[UnaryOp],
    binary: Sequence[BinaryOp],
) -> np.ndarray:
    """Fold ``op(scale * unary(x))`` left to right with the binary operators."""
    views = _labelled(subscripts, operands)
    terms = [scale * _unary(op, v) for v, scale, op in zip(views, scales, unary)]
    result = terms[0]
    for op, term in zip(binary, terms[1:]):
        result = _BINARY[op.name](result, term)
    return np.asarray(result)


def reduce(
    subscripts: str,
    a: Any,
    op: ReduceOp = ReduceOp.SUM,
    alpha: complex = 1,
    beta: complex = 0,
    c: Any = None,
    op_a: UnaryOp = UnaryOp.IDENTITY,
) -> np.ndarray:
    """alpha * op-reduce(op_a(a)) over the labels missing from the output + beta * c."""
    array = _wide(a)
    (term,), output = _read(subscripts, [array.ndim])
    array, labels = _diagonal_view(array, term)
    array = _unary(op_a, array)
    axes = tuple(i for i, label in enumerate(labels) if label not in output)
    folded = _REDUCE[op.name](array, axis=axes) if axes else array
    kept = [label for label in labels if label in output]
    result = alpha * np.transpose(folded, [kept.index(x) for x in output])
    return result + beta * _wide(c) if c is not None and beta != 0 else result
