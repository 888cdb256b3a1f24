"""Permutation on the CPU: the copy kernel that packing and unpacking share."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.operators import UNARY
from gpu_tc.options import UnaryOp
from gpu_tc.problem import PermutationProblem

from . import blocked, kernels
from .tile_layout import TileLayout


def copy_permuted(source: Any, destination: Any, stream: bool = False) -> None:
    """Copy ``source`` into ``destination``: two views of one shape, any strides.

    A large copy whose two fastest axes differ runs through the cache-blocked kernel
    (cpu_fallback.blocked); any other copy through numpy.copyto.

    Args:
        source: The view to read (any strides, negative or zero included).
        destination: A writable view of the same shape and dtype that does not
            overlap ``source``.
        stream: The kernel writes with non-temporal stores where it can.
    """
    if not blocked.copy_tiled(source, destination, stream):
        np.copyto(destination, source)


def copy_route(
    extents: tuple[int, ...], src: tuple[int, ...], dst: tuple[int, ...], dtype: str,
    stream: bool = False,
) -> str:
    """How copy_permuted copies between two layouts (strides in elements): a plan's reason.

    Assumes word-aligned data, as numpy allocates it, and OpenMP's default thread count
    (one per CPU).
    """
    layout = _layout(extents, src, dst, dtype)
    size = math.prod(extents)
    if layout is None or size < blocked.MIN_ELEMENTS:
        return "numpy.copyto"
    parallel = blocked.pays(layout, size * np.dtype(dtype).itemsize, os.cpu_count() or 1)
    if parallel is None:
        return "numpy.copyto"
    if not kernels.built("_tile_copy"):
        return "numpy.copyto (the cache-blocked kernel, cpu_fallback._tile_copy, is not built)"
    kernel = "C kernel" + (", threaded" if parallel else "")
    kernel += ", non-temporal stores" if stream and layout.rows_contiguous else ""
    return f"cache-blocked {layout.tile_rows}x{layout.tile_cols} tiles ({kernel})"


def may_stream(
    extents: tuple[int, ...], src: tuple[int, ...], dst: tuple[int, ...], dtype: str
) -> bool:
    """Whether copy_permuted between two layouts (strides in elements) is worth timing
    with non-temporal stores (cpu_fallback.blocked.may_stream; one thread per CPU)."""
    layout = _layout(extents, src, dst, dtype)
    size, kind = math.prod(extents), np.dtype(dtype).kind
    return (layout is not None and size >= blocked.MIN_ELEMENTS and kind in "bfciu"
            and blocked.may_stream(layout, size * np.dtype(dtype).itemsize,
                                   os.cpu_count() or 1))


def _layout(
    extents: tuple[int, ...], src: tuple[int, ...], dst: tuple[int, ...], dtype: str
) -> TileLayout | None:
    """The tile layout of a copy between two layouts (strides in elements), word-aligned."""
    itemsize = np.dtype(dtype).itemsize
    return blocked.tile_layout(
        extents, tuple(s * itemsize for s in src), tuple(d * itemsize for d in dst), itemsize
    )


def write_scaled(product: Any, d: Any, alpha: complex, beta: complex, c: Any) -> None:
    """d = alpha * product + beta * c, where ``product`` may already be ``d`` or None (0).

    A ``product`` other than ``d`` is the caller's scratch: it may be scaled in place
    (so that no second temporary of D's size is needed).
    """
    if beta == 0:
        if product is None:
            d.fill(0)
            return
        if product is not d:
            copy_permuted(product, d)  # the cache-blocked kernel for large permuted copies
        if alpha != 1:
            np.multiply(d, alpha, out=d)
        return
    if c is not d:
        np.multiply(c, beta, out=d)
    elif beta != 1:
        np.multiply(d, beta, out=d)
    if product is not None:
        if alpha != 1 and isinstance(product, np.ndarray) and product.ndim:
            np.multiply(product, alpha, out=product)
        elif alpha != 1:
            product = product * alpha  # a 0-d product comes back as a NumPy scalar
        d += product


class CpuPermutationPlan(PlanDefaults):
    """B = alpha * op(A) with B's axes a permutation of A's; ``stream``: the copy writes
    with non-temporal stores where it can."""

    route = "permute"

    def __init__(self, problem: PermutationProblem, stream: bool = False) -> None:
        self.problem = problem
        self.stream = stream
        self._perm = tuple(problem.a.labels.index(x) for x in problem.b.labels)
        self._op = problem.op_a
        copy = copy_route(*self.copy_layouts, problem.b.dtype, stream)
        self.reason = f"strided copy into B's layout: {copy}" + (
            "" if problem.op_a is UnaryOp.IDENTITY else f", applying {problem.op_a.name}"
        )

    @property
    def copy_layouts(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The copy's extents and the strides (in elements) it reads and writes."""
        a, b = self.problem.a, self.problem.b
        return b.extents, tuple(a.strides[i] for i in self._perm), b.strides

    def __repr__(self) -> str:
        return f"CpuPermutationPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Any, b: Any, scalars: Scalars, addend: Any) -> None:
        """Write alpha * op(a), permuted, into ``b``."""
        alpha = scalars.alpha
        source = inputs[0].transpose(self._perm)
        if self._op is UnaryOp.IDENTITY:
            copy_permuted(source, b, self.stream)
        elif blocked.copy_tiled(source, b, self.stream):
            UNARY[self._op](b, out=b)  # element-wise: applying it after the copy is the same
        else:
            UNARY[self._op](source, out=b)
        if alpha != 1:
            np.multiply(b, alpha, out=b)
