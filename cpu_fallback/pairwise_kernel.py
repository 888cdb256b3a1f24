"""The compiled kernel of pairwise row sums (cpu_fallback._pairwise, built from pairwise.c;
cpu_fallback.sum_layout.RowLayout describes the rows).

Each row's sum follows NumPy's pairwise summation step for step (blocks of up to 128
elements in eight running sums, longer stretches halved at a multiple of 8 and the
halves' sums added), so a row summed whole gives NumPy's bits. A threaded plan cuts
each row into pieces at the first halvings of that recursion, sums the pieces on
OpenMP's threads and adds their sums in the recursion's order: the same bits again.
The recursion itself is flattened at plan time (cpu_fallback.sum_layout.LeafProgram):
the kernel walks a piece's blocks in address order and adds partial sums on a short
stack as the program says, so the halving rule lives in one place, next to the cuts.
Imported through cpu_fallback.kernels by the first sum that uses it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import caches, openmp

with openmp.spin_environment():
    import cpu_fallback._pairwise as _pairwise

from .sum_kernel import type_name
from .sum_layout import LeafProgram, RowLayout

# Chunks of pieces per thread.
CHUNKS_PER_THREAD = 4


def run(source: np.ndarray, destination: np.ndarray, layout: RowLayout,
        program: LeafProgram, parallel: bool) -> None:
    """Write into ``destination`` the pairwise sum of each row ``layout`` describes of
    ``source`` (float32 or float64, as ``destination``), each row cut into the pieces
    whose recursions ``program`` spells out (see cpu_fallback.sum_layout.cuts);
    ``parallel`` shares the pieces among OpenMP's threads, except in a forked child
    (openmp.forked), which sums on its own thread: the same bits.

    The kernel takes the two arrays as they are (a trace's diagonal view too), checks
    that every element it would touch lies inside the span of each one's view (a
    ValueError otherwise) and releases the GIL while it sums.
    """
    bound(layout, program, destination.dtype, parallel)(source, destination)


def bound(layout: RowLayout, program: LeafProgram, dtype: np.dtype,
          parallel: bool) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(source, destination)``: :func:`run` of ``layout`` and ``program`` on arrays
    of ``dtype``, its arguments gathered once (a warm trace's call is ~10 us)."""
    tables = (type_name(np.dtype(dtype)), layout.row_src, layout.row_dst, program.offsets,
              program.lengths, program.adds, program.entries)
    placing = (layout.step, layout.src_base, layout.dst_base, asks_ahead(layout, dtype))
    tasks = layout.row_src.size * program.offsets.size
    pairwise, max_threads, forked, lock = (_pairwise.pairwise, _pairwise.max_threads,
                                           openmp.forked, openmp.LOCK)

    def call(source: np.ndarray, destination: np.ndarray) -> None:
        if parallel and not forked():
            count = max_threads()
            with lock:
                pairwise(source, destination, *tables, min(tasks, CHUNKS_PER_THREAD * count),
                         count, *placing)
        else:
            pairwise(source, destination, *tables, 1, 0, *placing)

    return call


# The kernel asks ahead for rows of more than this many times the largest cache's bytes.
# Past it the lines come from memory; below it a share of them is still in the cache,
# and asking for those only costs: whole sums on the 2-core EPYC (32 MiB L3, asks on
# against off, alternated in one process, stop79-probes/ahead_sizes.py.txt) took 1.16-1.47x
# (float64) and 1.60-1.86x (float32) the time at 48 MiB, 0.98-1.07x and 1.02-1.08x at
# 64, 0.94-0.99x and 0.97-1.00x at 96, 0.75-0.91x and 0.97-1.00x at 128.
AHEAD_FROM_CACHES = 2


def asks_ahead(layout: RowLayout, dtype: np.dtype) -> bool:
    """Whether the kernel asks contiguous rows' lines into L2 ahead of reading them: where
    the rows hold more than AHEAD_FROM_CACHES times the largest cache's bytes, so that
    they come from memory (asking lines the caches hold only costs; see pairwise.c's
    AHEAD_BYTES)."""
    size = layout.row_src.size * layout.length * np.dtype(dtype).itemsize
    return layout.step == 1 and size > AHEAD_FROM_CACHES * caches.last_level_bytes()
