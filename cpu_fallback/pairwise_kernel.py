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

from . import openmp

with openmp.spin_environment():
    import cpu_fallback._pairwise as _pairwise

from .sum_kernel import memory, type_name
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

    The kernel checks that every element it would touch lies inside the two views'
    spans (a ValueError otherwise) and releases the GIL while it sums.
    """
    bound(layout, program, destination.dtype, parallel)(source, destination)


def bound(layout: RowLayout, program: LeafProgram, dtype: np.dtype,
          parallel: bool) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(source, destination)``: :func:`run` of ``layout`` and ``program`` on arrays
    of ``dtype``, its arguments gathered once (a warm trace's call is ~10 us)."""
    tables = (type_name(np.dtype(dtype)), layout.row_src, layout.row_dst, program.offsets,
              program.lengths, program.adds, program.entries)
    src_base, src_span = layout.src_base, layout.src_span
    dst_base, dst_span, step = layout.dst_base, layout.dst_span, layout.step
    tasks = layout.row_src.size * program.offsets.size
    pairwise, max_threads = _pairwise.pairwise, _pairwise.max_threads

    def call(source: np.ndarray, destination: np.ndarray) -> None:
        src = memory(source, src_base, src_span, writeable=False)
        dst = memory(destination, dst_base, dst_span, writeable=True)
        if parallel and not openmp.forked():
            count = int(max_threads())
            with openmp.LOCK:
                pairwise(src, dst, *tables, min(tasks, CHUNKS_PER_THREAD * count), count, step)
        else:
            pairwise(src, dst, *tables, 1, 0, step)

    return call
