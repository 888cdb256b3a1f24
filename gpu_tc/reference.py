"""The slow, obviously correct kernel that judges both backends.

Every operand is broadcast over the union of labels, multiplied in float64 or
complex128, and the labels missing from the output are summed. No BLAS, no einsum.
Production code never calls this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .expression import expand, parse
from .operators import BINARY, REDUCE, UNARY
from .options import BinaryOp, ReduceOp, UnaryOp


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
    expression = expand(parse(subscripts), tuple(a.ndim for a in arrays))
    union = expression.labels
    product: Any = np.ones((), dtype=np.float64)
    for array, term in zip(arrays, expression.terms):
        array, labels = _diagonal_view(array, term)
        product = product * _on_union(array, labels, union)
    summed = tuple(i for i, label in enumerate(union) if label not in expression.output)
    total = np.sum(product, axis=summed)
    kept = [label for label in union if label in expression.output]
    return np.transpose(total, [kept.index(label) for label in expression.output])


def contract(
    subscripts: str, a: Any, b: Any, alpha: complex = 1, beta: complex = 0, c: Any = None
) -> np.ndarray:
    """alpha * einsum(subscripts, a, b) + beta * c."""
    result = alpha * einsum(subscripts, a, b)
    return result + beta * _wide(c) if c is not None and beta != 0 else result


def _unary(op: UnaryOp, x: np.ndarray) -> np.ndarray:
    return np.asarray(UNARY[op](x))


def _labelled(subscripts: str, operands: Sequence[Any]) -> tuple[list[np.ndarray], Any]:
    arrays = [_wide(x) for x in operands]
    expression = expand(parse(subscripts), tuple(a.ndim for a in arrays))
    views = []
    for array, term in zip(arrays, expression.terms):
        array, labels = _diagonal_view(array, term)
        views.append(_on_union(array, labels, expression.output))
    return views, expression


def permute(
    subscripts: str, a: Any, alpha: complex = 1, op_a: UnaryOp = UnaryOp.IDENTITY
) -> np.ndarray:
    """alpha * op_a(a), its axes reordered."""
    (view,), _ = _labelled(subscripts, [a])
    return alpha * _unary(op_a, view)


def elementwise(
    subscripts: str,
    operands: Sequence[Any],
    scales: Sequence[complex],
    unary: Sequence[UnaryOp],
    binary: Sequence[BinaryOp],
) -> np.ndarray:
    """Fold ``op(scale * unary(x))`` left to right with the binary operators."""
    views, _ = _labelled(subscripts, operands)
    terms = [scale * _unary(op, v) for v, scale, op in zip(views, scales, unary)]
    result = terms[0]
    for op, term in zip(binary, terms[1:]):
        result = BINARY[op](result, term)
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
    expression = expand(parse(subscripts), (array.ndim,))
    array, labels = _diagonal_view(array, expression.terms[0])
    array = _unary(op_a, array)
    axes = tuple(i for i, label in enumerate(labels) if label not in expression.output)
    folded = REDUCE[op].reduce(array, axis=axes) if axes else array
    kept = [label for label in labels if label in expression.output]
    result = alpha * np.transpose(folded, [kept.index(x) for x in expression.output])
    return result + beta * _wide(c) if c is not None and beta != 0 else result
