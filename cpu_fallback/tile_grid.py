"""Where the tiles of a tiling (cpu_fallback.tiling) lie in a contraction's operands:
each tile's views of A, B and D, and the bytes from one tile to another (what a
cblas.GemmLoop moves its pointers by)."""

from __future__ import annotations

from typing import Any

from gpu_tc.problem import ContractionProblem

from .tiling import Cut

# A tile's (start, stop) along each cut: the outer cut's, then the inner's.
Bounds = list[tuple[int, int]]


class TileGrid:
    """The tiles of ``cuts`` (the outer cut, then the inner one) of ``problem``."""

    def __init__(self, problem: ContractionProblem, cuts: list[Cut]) -> None:
        # Per cut, the axis of its label in A, B and D (None: not theirs).
        self._axes = [
            tuple(spec.labels.index(c.label) if c.label in spec.labels else None
                  for spec in (problem.a, problem.b, problem.d))
            for c in cuts
        ]

    def view(self, x: Any, which: int, bounds: Bounds) -> Any:
        """A view of operand ``which`` (0: A, 1: B, 2: D or C) for one tile; ``x`` itself
        when no cut reaches it (a 0-d D indexed by ``()`` would be a copy)."""
        index: list[Any] = [slice(None)] * x.ndim
        for axes, (lo, hi) in zip(self._axes, bounds):
            axis = axes[which]
            if axis is not None:
                index[axis] = slice(lo, hi)
        return x[tuple(index)] if x.ndim else x

    def steps(self, a: Any, b: Any, d: Any) -> list[tuple[int, int, int]]:
        """Per cut, the bytes one step of its label moves in A, B and D (0: not theirs)."""
        return [(_stride(a, axes[0]), _stride(b, axes[1]), _stride(d, axes[2]))
                for axes in self._axes]


def tile_sizes(bounds: Bounds) -> tuple[int, ...]:
    """A tile's extent along each cut."""
    return tuple(hi - lo for lo, hi in bounds)


def tile_offsets(bounds: Bounds, origin: Bounds,
            steps: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """The bytes from the tile at ``origin`` to the tile at ``bounds`` in A, B and D
    (``steps`` from :meth:`TileGrid.steps`)."""
    moves = [lo - first for (lo, _), (first, _) in zip(bounds, origin)]
    return (sum(n * s[0] for n, s in zip(moves, steps)),
            sum(n * s[1] for n, s in zip(moves, steps)),
            sum(n * s[2] for n, s in zip(moves, steps)))


def _stride(x: Any, axis: int | None) -> int:
    return 0 if axis is None else int(x.strides[axis])
