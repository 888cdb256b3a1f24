"""Sums of contiguous stretches (or evenly spaced runs: diagonals) on OpenMP's
threads, in NumPy's pairwise order.

Where the summed axes make one contiguous stretch per output element ('ab->',
'abcd->a'), NumPy's reduction is one pairwise sum per stretch, on one core: memory-bound
work that one core does not saturate. cpu_fallback.reduction splits it over Python
threads, whose idle workers sleep and wake late on a virtual machine (about 4 calls in
10 of a 4096^2 float64 'ab->' took 7-10 ms instead of 5 on a 2-core host). This plan
runs the same pairwise sums in C on OpenMP's threads instead
(cpu_fallback.pairwise_kernel), which spin briefly before sleeping
(cpu_fallback.openmp), and cuts a long stretch only where NumPy's recursion halves it:
its result has NumPy's bits, however many threads run it. It competes with the ufunc
reduction by timing (cpu_fallback.measure).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from gpu_tc.memory import nbytes
from gpu_tc.options import ReduceOp, UnaryOp
from gpu_tc.problem import ReductionProblem, TensorSpec

from . import kernels
from .strided_sum import FoldedSumPlan
from .sum_layout import RowLayout, cuts, leaf_program, row_layout

# The dtypes whose NumPy sum is pairwise and computed in their own type (integer sums
# are exact in any order; complex ones pair differently).
_DTYPES = "fd"
# Below this many bytes of A the ufunc's reduction on one thread is about as fast as
# waking the kernel's threads, and timing the two costs each call ~10 us (2-core Zen 3,
# the kernel then compiled by numba,
# 'ab->a' of a square matrix: the threads ran 0.82-0.87x its speed at 512 KB,
# 0.88-1.9x at 1 MB, 1.7-2.7x at 4 MB).
MIN_BYTES = 1 << 20
# Rows whose elements lie apart (a diagonal) cost a cache line, and far apart a page
# walk, per element: a 4096^2 float64 trace took 33 us on one core (2-core Xeon), so
# from this many elements a second thread pays for its waking.
MIN_STRIDED = 1 << 11
# Pieces per thread, so that rows of unequal cost even out; no piece shorter than this
# (of a contiguous row, or of a row whose elements lie apart).
PIECES_PER_THREAD = 4
MIN_PIECE = 1 << 14
MIN_STRIDED_PIECE = 1 << 10
# Below MIN_BYTES, from this many elements in more than one contiguous row, the kernel
# sums on the calling thread, untimed: NumPy's bits without its reduction's cost per row
# (2-core Xeon, 'ij->i' float64: 300 x 300 in 11.2 us against the ufunc's 23.8, 64 x 64
# in 1.4 against 2.3, 3000 x 30 in 32 against 72, float32 alike; 16 x 16 in 0.77 against
# 0.94, which the Python around the kernel's call outweighs).
MIN_ONE_THREAD = 1 << 12


def pairwise_sum_plans(problem: ReductionProblem) -> tuple[PairwiseSumPlan, ...]:
    """The threaded pairwise plan of a large float SUM whose summed axes are one
    contiguous stretch or one evenly spaced run (a diagonal) per output element, A and
    D of one dtype; none otherwise, on one core, or without the compiled kernel."""
    a, d = problem.a, problem.d
    if not _pairwise(problem) or (os.cpu_count() or 1) < 2:
        return ()
    layout = row_layout(problem, d)
    if layout is None or (layout.step > 1 and not _apart(problem, layout)):
        return ()
    large = (nbytes(a) >= MIN_BYTES if layout.step == 1
             else a.size >= MIN_STRIDED)
    if not large or _kernel() is None:
        return ()
    pieces = pieces_per_row(layout.row_src.size, layout.length, os.cpu_count() or 1,
                            MIN_PIECE if layout.step == 1 else MIN_STRIDED_PIECE)
    if layout.row_src.size * pieces < 2:
        return ()
    return (PairwiseSumPlan(problem, layout, pieces),)


def one_thread_plan(problem: ReductionProblem) -> PairwiseSumPlan | None:
    """The pairwise plan on the calling thread of a float SUM of more than one contiguous
    stretch (a row sum, 'ij->i') of MIN_ONE_THREAD elements to MIN_BYTES, A and D of one
    dtype; None otherwise or without the compiled kernel."""
    a, d = problem.a, problem.d
    if (not _pairwise(problem) or a.size < MIN_ONE_THREAD
            or nbytes(a) >= MIN_BYTES):
        return None
    layout = row_layout(problem, d)
    if layout is None or layout.step != 1 or layout.row_src.size < 2 or _kernel() is None:
        return None
    return PairwiseSumPlan(problem, layout, 1, parallel=False)


def _pairwise(problem: ReductionProblem) -> bool:
    """Whether NumPy sums ``problem`` in pairwise order: a float SUM with no operator,
    A and D of one dtype."""
    return (problem.op_reduce is ReduceOp.SUM and problem.op_a is UnaryOp.IDENTITY
            and problem.a.dtype in _DTYPES and problem.d.dtype == problem.a.dtype)


def _apart(problem: ReductionProblem, layout: RowLayout) -> bool:
    """Whether rows whose elements lie ``layout.step`` apart keep to their own stretches
    of memory (every kept axis strides past a row's span: diagonals of a batch), where
    walking a row at a time reads each cache line for one row only. Rows that interleave
    ('abcd->ad': neighbours one element apart) would each read the lines the others
    read too: the ufunc and the loops sum those."""
    a = problem.a
    span = (layout.length - 1) * layout.step + 1
    return all(abs(s) >= span for label, s, n in zip(a.labels, a.strides, a.extents)
               if n > 1 and label in problem.d.labels)


def pieces_per_row(rows: int, length: int, threads: int, min_piece: int = MIN_PIECE) -> int:
    """How many pieces to cut each row into: the least power of two giving every thread
    PIECES_PER_THREAD pieces, fewer where a piece would be shorter than ``min_piece``."""
    pieces = 1
    while rows * pieces < PIECES_PER_THREAD * threads and length // (2 * pieces) >= min_piece:
        pieces *= 2
    return pieces


class PairwiseSumPlan(FoldedSumPlan):
    """D = alpha * sum(A) + beta * C, each output element the pairwise sum of its
    stretch of A, the pieces shared among OpenMP's threads (``parallel``), or on the
    calling thread."""

    def __init__(self, problem: ReductionProblem, layout: RowLayout, pieces: int,
                 parallel: bool = True) -> None:
        # The folded layout's rows are as long.
        self._program = leaf_program(cuts(layout.length, pieces))
        self._parallel = parallel
        super().__init__(problem, layout)
        self.route = "reduce:threaded-pairwise" if parallel else "reduce:pairwise"
        cut = f", each cut into {pieces} pieces" if pieces > 1 else ""
        spacing = "contiguous elements" if layout.step == 1 else f"elements {layout.step} apart"
        by = "OpenMP's threads" if parallel else "compiled loops on one thread"
        self.reason = (
            f"SUM by {by} in NumPy's pairwise order, no copy of A: "
            f"{layout.row_src.size} stretch(es) of {layout.length} {spacing}{cut}"
        )

    def _layout(self, problem: ReductionProblem, d: TensorSpec) -> RowLayout | None:
        return row_layout(problem, d)

    def _bound(self, layout: RowLayout) -> Callable[[Any, Any], None]:
        kernel = _kernel()
        assert kernel is not None  # pairwise_sum_plans loaded it
        return kernel.bound(layout, self._program, np.dtype(self.problem.d.dtype),
                            parallel=self._parallel)


def _kernel() -> ModuleType | None:
    """cpu_fallback.pairwise_kernel, or None where its extension was not built."""
    return kernels.load("pairwise_kernel", "long sums run as NumPy reductions")
