"""The plain data of a tiled copy: axes and tile layout (cpu_fallback.blocked plans it,
cpu_fallback.tiles runs it)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Axis:
    """One axis of the copy: its extent and its strides, in words."""

    extent: int
    src: int
    dst: int


@dataclass(frozen=True)
class TileLayout:
    """A copy recast as tiles of words, the form the kernel takes.

    A tile's rows run along ``rows``, axes that the destination holds contiguously (so
    a row index r sits r * rows[0].dst words into the destination); its columns run
    along ``cols``, axes that the source holds contiguously. Grouping several short
    axes keeps tiles large when extents are small.

    Attributes:
        word: The word dtype the kernel moves ("u1", "u2", "u4" or "u8").
        outer: Axes looped outside the tiles, outermost first.
        rows: The destination's fastest axes, fastest first.
        cols: The source's fastest axes (none of ``rows``), fastest first.
        run: A run contiguous in both arrays inside each tile element (extent 1: none).
        tile_rows, tile_cols: The tile's extents along ``rows`` and ``cols``.
        src_base, dst_base: Words from each view's lowest address to its element 0.
        src_start: Words from the source's lowest address to the element where the
            walk starts (the destination's walk starts at its lowest address).
        src_span, dst_span: Words between each view's lowest and highest address, + 1.
    """

    word: str
    outer: tuple[Axis, ...]
    rows: tuple[Axis, ...]
    cols: tuple[Axis, ...]
    run: Axis
    tile_rows: int
    tile_cols: int
    src_base: int
    dst_base: int
    src_start: int
    src_span: int
    dst_span: int

    @property
    def n_rows(self) -> int:
        """Rows in all (the product of the row axes' extents)."""
        return math.prod(a.extent for a in self.rows)

    @property
    def n_cols(self) -> int:
        """Columns in all (the product of the column axes' extents)."""
        return math.prod(a.extent for a in self.cols)

    @property
    def rows_contiguous(self) -> bool:
        """Whether each tile's rows lie contiguous in the destination and its columns in
        the source, a run of unit strides inside each element (the kernel's fast paths,
        where it can stream its writes)."""
        run = self.run
        return (run.src == 1 and run.dst == 1 and self.cols[0].src == run.extent
                and self.rows[0].dst == run.extent)
