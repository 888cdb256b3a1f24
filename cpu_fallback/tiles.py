"""The compiled cache-blocked copy (cpu_fallback._tile_copy, built from tile_copy.c):
runs a TileLayout between two arrays' memory, viewed as words.

Imported by ``cpu_fallback.blocked`` on the first copy that needs it, through
cpu_fallback.kernels: where the extension was not built, the import fails and copies
fall back to numpy.copyto. Importing it loads OpenMP's library (libgomp), which reads
its spin setting then (cpu_fallback.openmp).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from . import openmp

with openmp.spin_environment():
    import cpu_fallback._tile_copy as _tile_copy

from .raw_memory import flat
from .tile_layout import Axis, TileLayout


def threads() -> int:
    """How many threads a parallel copy uses: OpenMP's count (OMP_NUM_THREADS, else one
    per CPU this process may run on); 1 in a forked child (see openmp.forked)."""
    return 1 if openmp.forked() else int(_tile_copy.max_threads())


def streams() -> bool:
    """Whether the kernel can write with non-temporal stores (built for x86-64)."""
    return bool(_tile_copy.streams)


def copy(layout: TileLayout, source: np.ndarray, destination: np.ndarray, chunks: int,
         stream: bool = False) -> None:
    """Run the copy ``layout`` describes; ``chunks`` > 0 shares its tiles among OpenMP's
    threads in that many chunks (one launch at a time), 0 (or a forked child) runs it
    on the calling thread; ``stream`` writes the destination's rows with non-temporal
    stores where they are contiguous (``layout.rows_contiguous``).

    The kernel checks that every word it would touch lies inside the two views' spans
    (a ValueError otherwise) and releases the GIL while it copies.
    """
    src = _words(source, layout.word, layout.src_base, layout.src_span, writeable=False)
    dst = _words(destination, layout.word, layout.dst_base, layout.dst_span, writeable=True)
    outer, row_src, col_dst = _tables(layout)
    word = int(layout.word[1:])
    if chunks and not openmp.forked():
        with openmp.LOCK:
            _tile_copy.copy(src, dst, word, outer, row_src, col_dst, *_geometry(layout),
                            chunks, threads(), stream)
    else:
        _tile_copy.copy(src, dst, word, outer, row_src, col_dst, *_geometry(layout), 0, 1,
                        stream)


_TYPESTR = {word: np.dtype(word).str for word in ("u1", "u2", "u4", "u8")}


def _words(array: np.ndarray, word: str, base: int, span: int, *, writeable: bool) -> np.ndarray:
    """The memory under ``array`` as a 1-D array of ``span`` words from its lowest address
    (``base`` words before its element 0)."""
    return flat(array, _TYPESTR[word], base, span, writeable=writeable)


@functools.lru_cache(maxsize=256)
def _tables(layout: TileLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's arrays: the outer axes (extent, source stride, destination stride);
    each row's offset in the source; each column's offset in the destination."""
    outer = np.array([(a.extent, a.src, a.dst) for a in layout.outer], np.int64).reshape(-1, 3)
    row_src = _offsets(layout.rows, lambda a: a.src)
    col_dst = _offsets(layout.cols, lambda a: a.dst)
    for table in (outer, row_src, col_dst):
        table.flags.writeable = False
    return outer, row_src, col_dst


def _offsets(group: tuple[Axis, ...], stride: Callable[[Axis], int]) -> np.ndarray:
    """The offset of each index of a group of axes (fastest first), by ``stride``."""
    offsets = np.zeros(1, np.int64)
    for axis in group:  # each new axis is slower: it varies across the previous block
        offsets = (np.arange(axis.extent, dtype=np.int64)[:, None] * stride(axis) + offsets).ravel()
    return offsets


def _geometry(layout: TileLayout) -> tuple[int, int, int, int, int, int, int, int, int, int]:
    """The kernel's scalar arguments, in its order."""
    run = layout.run
    return (
        layout.src_start,
        layout.n_rows, layout.rows[0].dst, layout.n_cols, layout.cols[0].src,
        run.extent, run.src, run.dst, layout.tile_rows, layout.tile_cols,
    )  # fmt: skip
