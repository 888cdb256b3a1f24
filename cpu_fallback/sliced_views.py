"""Views of a C-ordered array as a reshape and slices: a diagonal is every (n + 1)-th
element of the flat array; a batch of diagonals ('bii->bi') is the array reshaped to
(batch, n * n) and every (n + 1)-th element of each row. NumPy takes that in about 0.3
us, where a view built from strides took about 1.5 (a warm call's whole budget is a
microsecond or two)."""

from __future__ import annotations

import math

Slicing = tuple[tuple[int, ...], tuple[slice, ...], tuple[int, ...] | None]


def c_ordered(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` and ``strides`` (in elements) is C-ordered, as
    NumPy's flag says: the stride of an axis of one never matters."""
    step = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return 0 in shape
        step *= extent
    return True


def slicing(shape: tuple[int, ...], extents: tuple[int, ...],
            strides: tuple[int, ...]) -> Slicing | None:
    """(the shape to reshape a C-ordered array of ``shape`` to, the index to take, the
    transpose back to ``extents``' axis order or None) that view it with ``extents`` and
    ``strides`` (in elements); None where no such reshape and slices do. The view's
    axes, by stride, must each step over the whole span of the next (the outermost over
    the whole array), and the innermost's elements lie one step apart."""
    if not extents or 0 in extents or 1 in extents or min(strides) <= 0:
        return None
    order = sorted(range(len(extents)), key=lambda i: -strides[i])
    outer, inner = order[:-1], order[-1]
    block = math.prod(shape)  # the elements each outer index spans, outermost first
    for axis in outer:
        if strides[axis] * extents[axis] != block:
            return None
        block = strides[axis]
    span = (extents[inner] - 1) * strides[inner] + 1
    if span > block:
        return None
    reshape = tuple(extents[axis] for axis in outer) + (block,)
    index = (slice(None),) * len(outer) + (slice(0, span, strides[inner]),)
    axes = None if order == sorted(order) else tuple(order.index(i) for i in range(len(order)))
    return reshape, index, axes
