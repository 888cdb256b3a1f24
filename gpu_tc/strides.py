"""Stride groups: merge a group of labels into one (extent, stride) descriptor.

A group (M, N, K or batch) of labels can be viewed as one axis of an operand when, in
the chosen order, each outer label's stride equals the next inner label's stride times
its extent. Labels of extent 1 never block a merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .problem import TensorSpec


@dataclass(frozen=True)
class Merged:
    """A group of labels viewed as one axis."""

    extent: int
    stride: int | None  # None: the group has no label of extent > 1 (any stride fits)


def merge(spec: TensorSpec, order: Sequence[str]) -> Merged | None:
    """The group ``order`` (outermost first) of ``spec`` as one axis, or None."""
    extent = 1
    stride: int | None = None
    for label in reversed(order):  # innermost first
        e = spec.extent(label)
        if e == 1:
            continue
        s = spec.stride(label)
        if stride is None:
            stride = s
        elif s != stride * extent:
            return None
        extent *= e
    return Merged(extent, stride)


def same_layout(spec: TensorSpec, strides: tuple[int, ...]) -> bool:
    """Whether an array of ``spec``'s extents with ``strides`` is laid out as ``spec``:
    the stride of an axis of extent 1 (or of an empty array) never moves an element, so
    it may be anything (NumPy gives a size-1 axis a stride of its own)."""
    if strides == spec.strides or 0 in spec.extents:
        return True
    return all(e == 1 or s == t for e, s, t in zip(spec.extents, spec.strides, strides))


@lru_cache(maxsize=1024)
def elements_overlap(extents: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two elements of a layout share an address (a stride-0 axis, or strides
    that interleave): writing such a tensor races, and cuTENSOR takes none.

    Axes sorted by |stride| that each step over the whole span of the smaller ones never
    overlap (every slice of an array does); other layouts are checked element by element.
    """
    axes = sorted((abs(s), e) for e, s in zip(extents, strides) if e > 1)
    if 0 in extents or not axes:
        return False
    span = 0
    for stride, extent in axes:
        if stride <= span:
            break
        span += stride * (extent - 1)
    else:
        return False
    offsets = np.zeros(1, dtype=np.int64)
    for stride, extent in axes:
        offsets = (offsets[:, None] + stride * np.arange(extent, dtype=np.int64)).ravel()
    return bool(np.unique(offsets).size != offsets.size)


def order_by_stride(spec: TensorSpec, labels: str) -> str:
    """``labels`` ordered outermost first by this operand's strides (|stride| falling)."""
    return "".join(sorted(labels, key=lambda x: -abs(spec.stride(x))))


def batch_innermost(spec: TensorSpec, batch: str) -> bool:
    """Whether the operand's smallest stride of an axis longer than 1 is one of the
    ``batch`` labels' (a stack of matrices read across the stack; True for none)."""
    strides = [(abs(spec.stride(x)), x not in batch) for x in spec.labels if spec.extent(x) > 1]
    return not strides or not min(strides)[1]


def is_blas_matrix(rows: Merged, cols: Merged) -> bool:
    """Whether BLAS can read the matrix (rows x cols) in place.

    One of the two axes must have unit stride and the other a positive leading
    dimension at least as large as the unit axis' extent; a vector needs a positive
    stride.
    """
    if rows.extent <= 1 or cols.extent <= 1:
        single = cols if rows.extent <= 1 else rows
        return single.extent <= 1 or (single.stride is not None and single.stride > 0)
    r, c = rows.stride, cols.stride
    if r is None or c is None:
        raise AssertionError("internal error: a merged axis of extent > 1 has no stride")
    return (c == 1 and r >= cols.extent) or (r == 1 and c >= rows.extent)
