"""The loop nests of sums (cpu_fallback.sum_kernel, cpu_fallback.pairwise_kernel), as plain data.

A sum over some axes of a strided view is run as three loops: outside, the kept axes but
one (the threaded variant shares them among threads, each writing its own outputs); in
the middle, the summed axes but one; inside, the axis of smallest stride, so that the
innermost loop walks memory at one short, constant stride (the hardware prefetcher
follows it, and a page serves many elements). Offsets of the two outer groups come from
tables. When the inner axis is kept, each output row accumulates a row of the input per
middle index; when it is summed, each output element accumulates in a register. A
contiguous summed inner axis is not summed this way: NumPy's pairwise summation is more
accurate than these sequential sums (which are as accurate as NumPy's own strided sums).
Where the summed axes make one contiguous stretch per output element, a RowLayout
describes the sum as rows for the pairwise kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_tc.problem import ReductionProblem, TensorSpec

from .raw_memory import memory_extent

# NumPy's pairwise block: stretches of at most this many elements are summed in eight
# running sums, longer ones halved.
BLOCK = 128


@dataclass(frozen=True)
class SumLayout:
    """The loop nest: offsets in elements from each array's lowest address.

    Attributes:
        kept_src, kept_dst: Per outer index (the kept axes but the inner one), where it
            starts in the source and in the destination.
        summed_src: Per middle index (the summed axes but the inner one), its source offset.
        inner: (extent, source stride, destination stride) of the inner axis; the
            destination stride is 0 when the inner axis is summed.
        src_span, dst_span: Elements from each array's lowest to its highest address.
        src_base, dst_base: Elements from the lowest address to each array's element 0.
    """

    kept_src: np.ndarray
    kept_dst: np.ndarray
    summed_src: np.ndarray
    inner: tuple[int, int, int]
    src_span: int
    dst_span: int
    src_base: int
    dst_base: int

    @property
    def inner_kept(self) -> bool:
        """Whether the inner axis is an output axis."""
        return self.inner[2] != 0


def sum_layout(problem: ReductionProblem, d: TensorSpec) -> SumLayout | None:
    """The loop nest of ``problem``'s sum written into ``d``'s layout; None where the
    kernel does not serve it: an empty extent, no summed axis, or a summed inner axis
    of unit stride (NumPy's pairwise sum)."""
    a = problem.a
    axes = [i for i, e in enumerate(a.extents) if e > 1]
    if 0 in a.extents or not axes or not any(a.labels[i] not in d.labels for i in axes):
        return None
    inner = min(axes, key=lambda i: abs(a.strides[i]))
    label = a.labels[inner]
    summed_inner = label not in d.labels
    if summed_inner and abs(a.strides[inner]) == 1:
        return None
    kept = [i for i in axes if a.labels[i] in d.labels and i != inner]
    summed = [i for i in axes if a.labels[i] not in d.labels and i != inner]
    src_base, src_span = memory_extent(a.extents, a.strides)
    dst_base, dst_span = memory_extent(d.extents, d.strides)
    return SumLayout(
        kept_src=offset_table([(a.extents[i], a.strides[i]) for i in kept], src_base),
        kept_dst=offset_table([(a.extents[i], d.stride(a.labels[i])) for i in kept], dst_base),
        summed_src=offset_table([(a.extents[i], a.strides[i]) for i in summed], 0),
        inner=(a.extents[inner], a.strides[inner], 0 if summed_inner else d.stride(label)),
        src_span=src_span, dst_span=dst_span, src_base=src_base, dst_base=dst_base,
    )


@dataclass(frozen=True)
class RowLayout:
    """A sum whose summed axes make one evenly spaced run of elements per output
    element (one contiguous stretch, or a diagonal), as rows: one per index of the kept
    axes, each of ``length`` elements ``step`` apart.

    Attributes:
        row_src, row_dst: Per row (the kept axes, the last varying fastest), where it
            starts in the source and where its sum goes in the destination.
        length: The elements of a row.
        src_base, dst_base: As SumLayout's (the kernel takes each array's span from the
            array's own view).
        step: Elements between a row's neighbours in the source (1: contiguous).
    """

    row_src: np.ndarray
    row_dst: np.ndarray
    length: int
    src_base: int
    dst_base: int
    step: int = 1


def row_layout(problem: ReductionProblem, d: TensorSpec) -> RowLayout | None:
    """``problem``'s sum written into ``d``'s layout, as rows; None unless the summed
    axes (those of extent > 1) make one evenly spaced run: ascending positive strides,
    the first the step, each the next the step times the product of the extents below
    it (NumPy's reductions coalesce them into one pairwise sum at that stride)."""
    a = problem.a
    if 0 in a.extents:
        return None
    axes = [i for i, e in enumerate(a.extents) if e > 1]
    summed = sorted((i for i in axes if a.labels[i] not in d.labels), key=lambda i: a.strides[i])
    if not summed or a.strides[summed[0]] < 1:
        return None
    step, length = a.strides[summed[0]], 1
    for i in summed:
        if a.strides[i] != step * length:
            return None
        length *= a.extents[i]
    kept = [i for i in axes if a.labels[i] in d.labels]
    src_base, _ = memory_extent(a.extents, a.strides)
    dst_base, _ = memory_extent(d.extents, d.strides)
    return RowLayout(
        row_src=offset_table([(a.extents[i], a.strides[i]) for i in kept], src_base),
        row_dst=offset_table([(a.extents[i], d.stride(a.labels[i])) for i in kept], dst_base),
        length=length, src_base=src_base, dst_base=dst_base, step=step,
    )


def cuts(length: int, pieces: int) -> np.ndarray:
    """The lengths of ``pieces`` consecutive pieces of a row of ``length`` elements, cut
    where NumPy's pairwise recursion halves it, until there are ``pieces`` (a power of
    two; each piece longer than 128 elements, NumPy's block, so that the recursion
    halves every one)."""
    lengths = [length]
    while len(lengths) < pieces:
        lengths = [part for n in lengths for part in (_half(n), n - _half(n))]
    return np.array(lengths, np.int64)


def is_run(n: int) -> bool:
    """Whether ``n`` elements are a run: NumPy's recursion halves them exactly, level by
    level, into 2^k leaves (k >= 1) of one length, a multiple of 8 of at most 128
    (128 x 2^k, 96 x 2^k, ...: L x 2^k for L in 72, 80, ..., 128)."""
    leaves = 1
    while n // leaves > BLOCK:  # as the kernel's run_leaves (pairwise_pieces.h) counts
        leaves *= 2
    leaf, remainder = divmod(n, leaves)
    return leaves > 1 and remainder == 0 and leaf % 8 == 0


def _half(n: int) -> int:
    """Where NumPy's pairwise recursion cuts ``n`` elements: at half, less its remainder
    modulo 8."""
    return n // 2 - (n // 2) % 8


@dataclass(frozen=True)
class LeafProgram:
    """NumPy's pairwise recursion over each piece of a row, flattened: the kernel runs it
    with a loop and a short stack instead of recursive calls.

    Piece p starts ``offsets[p]`` elements into its row; its blocks (or runs, below) are
    entries ``entries[p]`` to ``entries[p + 1]`` - 1: each block's length (at most 128
    elements, summed in address order), and how many additions follow it, each popping the top
    partial sum of the stack into the one below (the recursion's additions, in its order).
    A stretch whose recursion is a perfect tree of equal leaves (:func:`is_run`: 128 x
    2^k elements, or 96 x 2^k, ...) is one entry, a run: the kernel sums its leaves
    without reading a table (a whole sum of 4096^2 float64 read its per-block tables in
    step with the data, and ran about a tenth slower than without them; one float32 row
    of 3 x 2^18 elements, leaves of 96 entry by entry, ran 0.78x a row of 2^20 on one
    thread of the 2-core EPYC, stop79-probes).

    Attributes:
        offsets: Where each piece starts in its row (the pieces follow each other).
        lengths: Elements of each block or run.
        adds: Additions after each block or run.
        entries: Where each piece's blocks start, and the end (one more than pieces).
    """

    offsets: np.ndarray
    lengths: np.ndarray
    adds: np.ndarray
    entries: np.ndarray


def leaf_program(piece_lengths: np.ndarray) -> LeafProgram:
    """The LeafProgram of a row cut into consecutive pieces of ``piece_lengths``
    elements (pieces of one length share the work of building it)."""
    built: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def blocks(n: int) -> tuple[np.ndarray, np.ndarray]:
        if n not in built:
            if n <= BLOCK or is_run(n):
                built[n] = np.array([n], np.int64), np.zeros(1, np.int64)
            else:
                half = _half(n)
                (left, left_adds), (right, right_adds) = blocks(half), blocks(n - half)
                adds = np.concatenate([left_adds, right_adds])
                adds[-1] += 1  # the two halves' sums
                built[n] = np.concatenate([left, right]), adds
        return built[n]

    programs = [blocks(int(n)) for n in piece_lengths]
    offsets = np.cumsum([0, *piece_lengths[:-1]]).astype(np.int64)
    entries = np.cumsum([0] + [len(lengths) for lengths, _ in programs]).astype(np.int64)
    return LeafProgram(offsets, np.concatenate([lengths for lengths, _ in programs]),
                       np.concatenate([adds for _, adds in programs]), entries)


def offset_table(axes: list[tuple[int, int]], base: int) -> np.ndarray:
    """The offset of every index of ``axes`` ((extent, stride), the last varying
    fastest), plus ``base``."""
    offsets = np.full(1, base, np.int64)
    for extent, stride in axes:
        offsets = (offsets[:, None] + np.arange(extent, dtype=np.int64) * stride).ravel()
    return offsets
