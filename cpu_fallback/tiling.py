"""Tiles of a contraction whose copies would exceed a memory budget, as plain data.

A GEMM lowering may copy whole operands: A or B packed, D staged in a temporary (packed
D, or any D while ``beta != 0``). When those copies exceed the budget, the contraction
runs tile by tile: D is cut along one label of A's side (a free label of A, or a batch
label) and one of B's side (a free label of B), each tile a smaller contraction of the
same kind whose copies are a chunk of A, a chunk of B and a tile of D. The tiles of one
outer chunk share its packed operand; the inner operand is packed again for every outer
chunk. Among the cuts that fit, :func:`choose` takes the one that copies the fewest
bytes in all (repacking included) and runs the fewest tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gpu_tc.gemm import GemmLowering, Lowering, MultiplyLowering, lower
from gpu_tc.problem import ContractionProblem, TensorSpec

# Each tile costs a few GEMM calls' overhead: counted as this many bytes copied.
TILE_COST_BYTES = 256 << 10
# Without a memory limit, copies may take this fraction of the bytes of A, B and D
# together, and at least DEFAULT_MIN_BYTES (below it, copies are cheap in any case).
DEFAULT_FRACTION = 0.2
DEFAULT_MIN_BYTES = 4 << 20


def default_budget(problem: ContractionProblem) -> int:
    """The copies a contraction may make without a memory limit, in bytes."""
    operands = problem.a.size + problem.b.size + problem.d.size
    itemsize = np.dtype(problem.d.dtype).itemsize
    return max(DEFAULT_MIN_BYTES, int(DEFAULT_FRACTION * operands * itemsize))


@dataclass(frozen=True)
class Cut:
    """One label of D cut into chunks of ``chunk`` (the last may be shorter)."""

    label: str
    extent: int
    chunk: int

    @property
    def count(self) -> int:
        """The number of chunks."""
        return -(-self.extent // self.chunk)

    def chunks(self) -> list[tuple[int, int]]:
        """(start, stop) of each chunk."""
        return [(i, min(i + self.chunk, self.extent)) for i in range(0, self.extent, self.chunk)]


@dataclass(frozen=True)
class Tiling:
    """How a contraction runs in tiles: ``outer`` chunks hold their packed operand
    while the ``inner`` chunks run; either cut may be None (not cut).

    Attributes:
        outer: The cut of the outer loop.
        inner: The cut of the inner loop.
        peak_bytes: The copies alive during one tile (the largest tile).
        copied_bytes: Bytes copied by packing and staging over all tiles.
    """

    outer: Cut | None
    inner: Cut | None
    peak_bytes: int
    copied_bytes: int

    @property
    def tiles(self) -> int:
        """The number of tiles."""
        return (self.outer.count if self.outer else 1) * (self.inner.count if self.inner else 1)

    def describe(self) -> str:
        """The cuts, as a plan's reason shows them."""
        cuts = [c for c in (self.outer, self.inner) if c is not None]
        parts = [f"label {c.label!r} in chunks of {c.chunk} of {c.extent}" for c in cuts]
        return f"in {self.tiles} tiles ({', '.join(parts)}), copies at most {self.peak_bytes} bytes"


def copy_bytes(low: Lowering, problem: ContractionProblem, staged: bool) -> tuple[int, int, int]:
    """Bytes a lowering copies of A, B and D; D counts when packed, or when ``staged``
    (a call with ``beta != 0`` computes the product aside before adding it to C)."""
    itemsize = np.dtype(problem.d.dtype).itemsize
    if isinstance(low, GemmLowering):
        return (
            itemsize * math.prod(low.a.grouped) * low.a.pack,
            itemsize * math.prod(low.b.grouped) * low.b.pack,
            itemsize * math.prod(low.d.grouped) * (low.d.pack or staged),
        )
    if isinstance(low, MultiplyLowering) and staged:
        return 0, 0, itemsize * problem.d.size
    return 0, 0, 0


def tile_problem(problem: ContractionProblem, extents: dict[str, int]) -> ContractionProblem:
    """``problem`` with the labels of ``extents`` shortened (strides unchanged): a tile."""

    def cut(spec: TensorSpec) -> TensorSpec:
        new = tuple(extents.get(x, e) for x, e in zip(spec.labels, spec.extents))
        return replace(spec, extents=new)

    return ContractionProblem(cut(problem.a), cut(problem.b), cut(problem.d))


def hoisted(problem: ContractionProblem, inner: Cut | None) -> str | None:
    """The operand ("a" or "b") packed once per outer chunk: the one the inner cut does
    not reach; None when the inner cut reaches both (a batch label)."""
    if inner is None:
        return "a"
    in_a, in_b = inner.label in problem.a.labels, inner.label in problem.b.labels
    if in_a and in_b:
        return None
    return "b" if in_a else "a"


def _outermost(d: TensorSpec, labels: str) -> str | None:
    """The label of ``labels`` (extent > 1) with the largest stride in D."""
    moving = [x for x in labels if d.extent(x) > 1]
    return max(moving, key=lambda x: abs(d.stride(x))) if moving else None


def _halvings(extent: int) -> list[int]:
    """Chunk sizes extent, extent/2, extent/4, ... 1 (rounded up, distinct)."""
    sizes = [extent]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // 2))
    return sizes


def _measure(
    problem: ContractionProblem, policy: str, staged: bool, outer: Cut | None, inner: Cut | None
) -> Tiling:
    """Peak and total copies of one tiling (lowering its full-size tile)."""
    extents = {c.label: c.chunk for c in (outer, inner) if c is not None}
    tile = tile_problem(problem, extents)
    a, b, d = copy_bytes(lower(tile, policy), tile, staged)
    n_outer = outer.count if outer else 1
    n_inner = inner.count if inner else 1
    held = hoisted(problem, inner)
    if held is None:
        total = n_outer * n_inner * (a + b + d)
    else:
        once, each = (a, b) if held == "a" else (b, a)
        total = n_outer * (once + n_inner * (each + d))
    return Tiling(outer, inner, a + b + d, total)


def choose(problem: ContractionProblem, policy: str, budget: int, staged: bool) -> Tiling:
    """The tiling whose copies fit ``budget`` bytes at the least cost; the one with the
    smallest peak when none fits (its ``peak_bytes`` then exceeds the budget)."""
    untiled = _measure(problem, policy, staged, None, None)
    if untiled.peak_bytes <= budget:
        return untiled
    roles, d = problem.roles, problem.d
    row = _outermost(d, roles.batch + roles.free_a)
    col = _outermost(d, roles.free_b)
    options: list[Tiling] = []
    pairs = [(row, col), (col, row)] if row and col else [(row or col, None)]
    for first, second in pairs:
        if first is None:
            continue
        for first_chunk in _halvings(d.extent(first)):
            outer = Cut(first, d.extent(first), first_chunk)
            seconds = _halvings(d.extent(second)) if second else [0]
            for second_chunk in seconds:
                inner = Cut(second, d.extent(second), second_chunk) if second else None
                options.append(_measure(problem, policy, staged, outer, inner))
    fitting = [t for t in options if t.peak_bytes <= budget]
    if not fitting:
        return min(options + [untiled], key=lambda t: (t.peak_bytes, t.tiles))
    return min(fitting, key=lambda t: (t.copied_bytes + TILE_COST_BYTES * t.tiles, t.tiles))
