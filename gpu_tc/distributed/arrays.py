"""gpu_tc's einsum on dask arrays: a lazy dask array whose block tasks call gpu_tc.

One ``dask.array.blockwise`` task per output block runs gpu_tc's einsum on the
operands' blocks (NumPy or CuPy chunks), so blocks of equal shapes share one cached
plan per worker. Labels summed away (contracted, or summed out of one operand) may be
chunked; their partial products are added in one of two ways:

* ``accumulate=False`` (dask's own way): every (output block, summed block) pair is a
  task whose partial product keeps a size-1 axis per summed label; dask sums them in a
  tree. Peak memory grows with the number of summed chunks.
* ``accumulate=True``: one task per output block receives the summed chunks of its
  operands and adds their products into one buffer (``gpu_tc.contract(..., beta=1,
  c=out, out=out)`` for two operands), so partial products never pile up.

Chunks that differ along a shared label are rechunked to a common chunking (dask's
``unify_chunks``; within one operand, as the label's first axis); extents that differ
are a :class:`ShapeError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..call import is_dask_array
from ..errors import OutputError, ShapeError
from ..expression import Expression, expand, parse


def lazy_einsum(
    kernel: Callable[..., Any],
    subscripts: str,
    operands: Sequence[Any],
    *,
    out: Any = None,
    accumulate: bool = False,
    accumulate_with: Callable[..., Any] | None = None,
    **keywords: Any,
) -> Any:
    """``kernel(subscripts, *blocks, **keywords)`` over the blocks of dask operands.

    Args:
        kernel: gpu_tc.einsum (passed in, so that this module does not import the API).
        subscripts: The einsum subscripts.
        operands: Dask arrays, and arrays or array-likes (made one-chunk dask arrays).
        out: Not supported: the result is lazy.
        accumulate: Add the partial products of one output block into one buffer.
        accumulate_with: gpu_tc.contract, for the in-place additions of two operands.
        **keywords: einsum's keywords (dtype, casting, order, optimize, options).

    Returns:
        A dask array of the result.

    Raises:
        OutputError: ``out`` was given.
        ShapeError: a label's extents differ between operands.
    """
    import dask.array as da

    if out is not None:
        raise OutputError(
            f"einsum({subscripts!r}) on dask arrays returns a lazy dask array; "
            "out= is not supported (store the result with dask instead)"
        )
    arrays = [x if is_dask_array(x) else da.from_array(np.asarray(x)) for x in operands]
    expression = expand(parse(subscripts), tuple(x.ndim for x in arrays)).lettered()
    extents = _extents(expression, arrays)
    arrays = [_diagonal_chunks(_broadcast(x, term, extents), term)
              for x, term in zip(arrays, expression.terms)]
    summed = "".join(x for x in expression.labels if x not in expression.output)
    pairs = [item for x, term in zip(arrays, expression.terms) for item in (x, term)]
    _, arrays = da.core.unify_chunks(*pairs)
    dtype = np.dtype(keywords["dtype"]) if keywords.get("dtype") is not None else (
        np.result_type(*[x.dtype for x in arrays]))
    text = ",".join(expression.terms) + "->" + expression.output
    meta = da.utils.meta_from_array(arrays[0]._meta, ndim=len(expression.output), dtype=dtype)
    pairs = [item for x, term in zip(arrays, expression.terms) for item in (x, term)]
    if accumulate and summed:
        counts = {}
        for x, term in zip(arrays, expression.terms):
            counts.update({label: n for label, n in zip(term, x.numblocks) if label in summed})
        return da.blockwise(
            _accumulated_block, expression.output, *pairs, dtype=dtype, meta=meta,
            concatenate=False, kernel=kernel, add=accumulate_with, expression=text,
            terms=expression.terms, summed=summed, counts=counts, keywords=keywords,
        )
    index = expression.output + summed
    partial = da.blockwise(
        _partial_block, index, *pairs, dtype=dtype,
        meta=da.utils.meta_from_array(meta, ndim=len(index), dtype=dtype),
        adjust_chunks=dict.fromkeys(summed, 1), kernel=kernel, expression=text,
        n_summed=len(summed), keywords=keywords,
    )
    if not summed:
        return partial
    axes = tuple(range(len(expression.output), len(index)))
    return partial.sum(axis=axes, dtype=dtype)


def _extents(expression: Expression, arrays: Sequence[Any]) -> dict[str, int]:
    """Each label's extent; size 1 broadcasts, as numpy.einsum allows for "..."."""
    extents: dict[str, int] = {}
    for index, (x, term) in enumerate(zip(arrays, expression.terms)):
        for label, extent in zip(term, x.shape):
            known = extents.setdefault(label, extent)
            if known == extent or extent == 1:
                continue
            if known == 1:
                extents[label] = extent
                continue
            raise ShapeError(
                f"label {label!r} has extent {known} and, in operand {index}, {extent} "
                f"in einsum({expression.text!r})"
            )
    return extents


def _broadcast(x: Any, term: str, extents: dict[str, int]) -> Any:
    """``x`` with its size-1 axes broadcast to the label's extent."""
    shape = tuple(extents[label] for label in term)
    if shape == tuple(x.shape):
        return x
    import dask.array as da

    return da.broadcast_to(x, shape)


def _diagonal_chunks(x: Any, term: str) -> Any:
    """``x`` with the axes of a label repeated in ``term`` chunked as its first axis of
    that label (dask's ``unify_chunks`` unifies a label across operands, not within
    one)."""
    first: dict[str, int] = {}
    changes = {}
    for axis, label in enumerate(term):
        first.setdefault(label, axis)
        if x.chunks[axis] != x.chunks[first[label]]:
            changes[axis] = x.chunks[first[label]]
    return x.rechunk(changes) if changes else x


def _partial_block(*blocks: Any, kernel: Callable[..., Any], expression: str, n_summed: int,
                   keywords: dict[str, Any]) -> Any:
    """The einsum of one set of blocks, with a size-1 axis per summed label."""
    result = kernel(expression, *blocks, **keywords)
    return result.reshape(tuple(result.shape) + (1,) * n_summed)


def _accumulated_block(
    *nested: Any, kernel: Callable[..., Any], add: Callable[..., Any] | None, expression: str,
    terms: Sequence[str], summed: str, counts: dict[str, int], keywords: dict[str, Any],
) -> Any:
    """Sum over the summed labels' chunks of the einsum of the matching blocks, added
    into one buffer. ``nested[i]`` nests operand i's blocks by its summed axes, in the
    order they appear in its term (dask's blockwise with ``concatenate=False``)."""
    own = [[x for x in term if x in summed] for term in terms]  # a repeated label: a diagonal
    in_place = add is not None and len(terms) == 2 and not keywords
    total = None
    for combination in itertools.product(*(range(counts[x]) for x in summed)):
        chosen = dict(zip(summed, combination))
        blocks = [_pick(value, [chosen[x] for x in labels]) for value, labels in zip(nested, own)]
        if total is None:
            total = kernel(expression, *blocks, **keywords)
            if isinstance(total, np.generic):  # a 0-d NumPy result comes back as a scalar
                total = np.array(total)
            elif isinstance(total, np.ndarray) and not total.flags.writeable:
                total = total.copy()  # (CuPy arrays have no such flag: all are writable)
        elif in_place and add is not None:
            add(expression, *blocks, beta=1, c=total, out=total)
        else:
            total += kernel(expression, *blocks, **keywords)
    return total


def _pick(value: Any, positions: Sequence[int]) -> Any:
    for position in positions:
        value = value[position]
    return value
