"""Tiles of a contraction whose copies would exceed a memory budget, as plain data.

A GEMM lowering may copy whole operands: A or B packed, D staged in a temporary (packed
D, or any D while ``beta != 0``). When those copies exceed the budget, the contraction
runs tile by tile, cut along two labels of different roles: a label of A's side (a free
label of A, or a batch label), one of B's side (a free label of B) or a contracted one.
Each tile is a smaller contraction of the same kind whose copies are a chunk of A, a
chunk of B and a tile of D; the chunks of a contracted label add into their D tile
(``beta = 1`` after the first). The tiles of one outer chunk share its packed operand;
the inner operand is packed again for every outer chunk, unless the outer cut is a
contracted label (then every chunk of either operand is packed once).

A product added into D (``beta != 0``, or a later chunk of a contracted label) needs no
staged D where BLAS's own gemm adds it in place (cpu_fallback.cblas: one GEMM, D not
packed, a float dtype); elsewhere it is computed aside first and D counts as a copy.

Among the cuts that fit, :func:`choose` takes the cheapest by a cost model in bytes
copied: every copy (repacking included) weighted by how short its contiguous runs are,
D written in place by how short its tile's runs are, the packing BLAS does inside each
tile's GEMM, plus the GEMM time a thin tile loses, plus a fixed cost per tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gpu_tc.gemm import GemmLowering, Lowering, MultiplyLowering, lower
from gpu_tc.memory import nbytes
from gpu_tc.problem import ContractionProblem, TensorSpec

from .cblas import matrix_layout

# Each tile costs a few GEMM calls' overhead: counted as this many bytes copied.
TILE_COST_BYTES = 256 << 10
# A GEMM flop costs about 1/FLOPS_PER_BYTE of a copied byte (BLAS at ~100-200 GFLOP/s
# against permuting copies at ~4-8 GB/s, measured on 2-core x86 hosts), and a GEMM whose
# smallest dimension is n runs about (1 + THIN_GEMM / n) times slower than a square one.
FLOPS_PER_BYTE = 32
THIN_GEMM = 32
# A copy whose contiguous runs are r bytes long costs (1 + SHORT_RUN_BYTES / r) per byte.
SHORT_RUN_BYTES = 64
# Per role, the labels tried as cuts: those with the largest strides in that operand.
LABELS_PER_ROLE = 2
# Without a memory limit, copies may take this fraction of the bytes of A, B and D
# together (under a quarter, room left for the rest of a call), and at least
# DEFAULT_MIN_BYTES: below it the memory saved is small against a process's own (NumPy
# and its BLAS: tens of MiB) while tiles cost time (TCCG cases 20-30 at half extents, 38 MiB of
# operands, ran 1.6x slower in 16 tiles under an 8 MiB budget). At full extents, before
# BLAS added chunks into D in place, a fifth cut cases 20-30 into 4 x 4 tiles (the inner
# operand packed 4 times), 1.10-1.19x the untiled time; 0.23 admitted 2 x 8 tiles
# (packed twice), 1.06-1.17x. A contracted cut packs each operand once (see README).
DEFAULT_FRACTION = 0.23
DEFAULT_MIN_BYTES = 32 << 20
# A lowering that copies an operand may instead run as a loop of GEMMs on views (the
# tiling that copies nothing, BLAS adding a contracted label's chunks into D), timed
# beside it where the loop has at most LOOP_MAX_TILES tiles of LOOP_MIN_TILE_FLOPS or
# more each (a tile's slicing and BLAS call cost about 10 us). TCCG case 13 at half
# extents, float64, in one probe (benchmarks/results/epyc-zen4/current/stop63-probes):
# gpu_tc's plan 17.5 ms, the loop over its contracted label c (148 GEMMs of 7.2 MFLOP,
# OpenBLAS) 15.9 ms, torch.einsum 18.4.
LOOP_MAX_TILES = 512
LOOP_MIN_TILE_FLOPS = 2e6


def default_budget(problem: ContractionProblem) -> int:
    """The copies a contraction may make without a memory limit, in bytes."""
    operands = problem.a.size + problem.b.size + problem.d.size
    itemsize = np.dtype(problem.d.dtype).itemsize
    return max(DEFAULT_MIN_BYTES, int(DEFAULT_FRACTION * operands * itemsize))


@dataclass(frozen=True)
class Cut:
    """One label (of D, or contracted) cut into chunks of ``chunk`` (the last may be
    shorter)."""

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
        cost: The modelled cost of the whole run, in bytes copied (see choose).
    """

    outer: Cut | None
    inner: Cut | None
    peak_bytes: int
    copied_bytes: int
    cost: float = 0.0

    @property
    def tiles(self) -> int:
        """The number of tiles."""
        return (self.outer.count if self.outer else 1) * (self.inner.count if self.inner else 1)

    def describe(self) -> str:
        """The cuts, as a plan's reason shows them."""
        cuts = [c for c in (self.outer, self.inner) if c is not None]
        parts = [f"label {c.label!r} in chunks of {c.chunk} of {c.extent}" for c in cuts]
        return f"in {self.tiles} tiles ({', '.join(parts)}), copies at most {self.peak_bytes} bytes"


def copy_bytes(
    low: Lowering, problem: ContractionProblem, staged: bool, blas_adds: bool = False
) -> tuple[int, int, int]:
    """Bytes a lowering copies of A, B and D; D counts when packed, or when ``staged``
    (a call with ``beta != 0``, or a later chunk of a contracted label, adds the
    product to D) unless BLAS adds it in place (``blas_adds``: cblas serves the dtype
    here; see :func:`adds_in_place`)."""
    itemsize = np.dtype(problem.d.dtype).itemsize
    if isinstance(low, GemmLowering):
        aside = staged and not (blas_adds and adds_in_place(low, problem))
        return (
            itemsize * math.prod(low.a.grouped) * low.a.pack,
            itemsize * math.prod(low.b.grouped) * low.b.pack,
            itemsize * math.prod(low.d.grouped) * (low.d.pack or aside),
        )
    if isinstance(low, MultiplyLowering) and staged:
        return 0, 0, itemsize * problem.d.size
    return 0, 0, 0


def adds_in_place(low: GemmLowering, problem: ContractionProblem) -> bool:
    """Whether BLAS's gemm can add the product straight into D: one GEMM (no batch),
    D not packed, its matrix with a unit stride (cblas.matrix_layout)."""
    d = low.d
    if d.pack or d.n_batch:
        return False
    strides = []
    for group in (d.perm[: d.n_rows], d.perm[d.n_rows:]):
        moving = [i for i in group if problem.d.extents[i] > 1]  # a merged axis's stride
        strides.append(problem.d.strides[moving[-1]] if moving else 0)
    return matrix_layout(d.shape[-2:], (strides[0], strides[1])) is not None


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


def _widest(spec: TensorSpec, labels: str) -> list[str]:
    """Up to LABELS_PER_ROLE labels of ``labels`` (extent > 1), largest stride in
    ``spec`` first: cutting them leaves the longest contiguous runs."""
    moving = sorted((x for x in labels if spec.extent(x) > 1), key=lambda x: -abs(spec.stride(x)))
    return moving[:LABELS_PER_ROLE]


def _cut_groups(problem: ContractionProblem) -> list[list[str]]:
    """The labels tried as cuts, per role: A's side (free in A, or batch), B's side
    (free in B), contracted (see :func:`_widest`)."""
    roles = problem.roles
    return [_widest(problem.a, roles.batch + roles.free_a), _widest(problem.b, roles.free_b),
            _widest(problem.a, roles.contracted)]


def accumulates(problem: ContractionProblem, cut: Cut | None) -> bool:
    """Whether ``cut`` is of a contracted label (its chunks add into one D tile)."""
    return cut is not None and cut.label not in problem.d.labels


def _extent(problem: ContractionProblem, label: str) -> int:
    return (problem.a if label in problem.a.labels else problem.b).extent(label)


def _halvings(extent: int) -> list[int]:
    """Chunk sizes extent, extent/2, extent/4, ... 1 (rounded up, distinct)."""
    sizes = [extent]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // 2))
    return sizes


def contiguous_run(spec: TensorSpec, chunks: dict[str, int]) -> int:
    """Bytes of the longest contiguous run in a chunk of ``spec`` (labels in ``chunks``
    cut to those extents): the innermost axes multiply while they stay contiguous."""
    run = np.dtype(spec.dtype).itemsize
    for label in sorted(spec.labels, key=lambda x: abs(spec.stride(x))):
        extent = spec.extent(label)
        if extent == 1:
            continue
        if abs(spec.stride(label)) * np.dtype(spec.dtype).itemsize != run:
            break
        if label in chunks:
            return run * chunks[label]
        run *= extent
    return run


def _weight(spec: TensorSpec, chunks: dict[str, int]) -> float:
    """The cost per byte of copying a chunk of ``spec``."""
    return 1 + SHORT_RUN_BYTES / contiguous_run(spec, chunks)


def _measure(
    problem: ContractionProblem,
    policy: str,
    staged: bool,
    blas_adds: bool,
    outer: Cut | None,
    inner: Cut | None,
) -> Tiling:
    """Peak, total copies and cost of one tiling (lowering its full-size tile)."""
    chunks = {c.label: c.chunk for c in (outer, inner) if c is not None}
    tile = tile_problem(problem, chunks)
    low = lower(tile, policy)
    adding = accumulates(problem, outer) or accumulates(problem, inner)
    a, b, d = copy_bytes(low, tile, staged or adding, blas_adds)
    wa, wb, wd = (a * _weight(problem.a, chunks), b * _weight(problem.b, chunks),
                  d * _weight(problem.d, chunks))
    n_outer = outer.count if outer else 1
    n_inner = inner.count if inner else 1
    held = hoisted(problem, inner)
    # Where BLAS adds into D in place, each tile that adds reads its D tile once more.
    re_read = 0
    if d == 0 and (staged or adding):
        first_visits = 0 if staged else math.prod(
            c.count for c in (outer, inner) if c is not None and not accumulates(problem, c))
        re_read = (n_outer * n_inner - first_visits) * math.prod(tile.d.extents) * (
            np.dtype(problem.d.dtype).itemsize)

    def over_tiles(x_a: float, x_b: float, x_d: float) -> float:
        """A tile's amounts summed over all tiles, the held operand once per outer chunk."""
        if held is None:
            return n_outer * n_inner * (x_a + x_b + x_d)
        once, each = (x_a, x_b) if held == "a" else (x_b, x_a)
        return n_outer * (once + n_inner * (each + x_d))

    # Where D is written in place (not staged), a tile of short runs writes its lines in
    # pieces: every byte of D written pays the short-run part of a copy's weight.
    written = 0.0
    if d == 0:
        written = nbytes(problem.d) * (_weight(problem.d, chunks) - 1)
    # Counted where gpu_tc calls BLAS's gemm itself; with D staged, the older measurement
    # of 2 x 8 tiles against 4 x 4 stands.
    packing = n_outer * n_inner * _blas_packing(low, problem) if blas_adds else 0.0
    cost = (over_tiles(wa, wb, wd) + re_read + written + TILE_COST_BYTES * n_outer * n_inner
            + packing + _thin_gemm_cost(low, problem))
    return Tiling(outer, inner, a + b + d, int(over_tiles(a, b, d)), cost)


def _blas_packing(low: Lowering, problem: ContractionProblem) -> float:
    """The bytes BLAS's gemm packs into panels of its own in one tile's call: its A and B
    matrices, once each, counted as a copy. 8 tiles that cut a free label and halve a
    contracted one pack B 4x the bytes 4 tiles along the contracted label do; TCCG cases
    20-30 ran as fast or up to 10% faster in those 4 tiles (22 of 22, float32 and
    float64, an AVX-512 host; benchmarks/results/HISTORY.md)."""
    if not isinstance(low, GemmLowering):
        return 0.0
    rows, inner = low.a.shape[-2:]
    matrices = math.prod(low.a.shape[:-2])
    return float(np.dtype(problem.d.dtype).itemsize * matrices
                 * (rows * inner + inner * low.b.shape[-1]))


def _thin_gemm_cost(low: Lowering, problem: ContractionProblem) -> float:
    """The GEMM time (in bytes copied) lost to a tile's smallest matrix dimension."""
    if not isinstance(low, GemmLowering):
        return 0.0
    smallest = min(low.a.shape[-2], low.a.shape[-1], low.b.shape[-1])
    if smallest == 0:
        return 0.0
    flops = 2 * math.prod(problem.a.extents) * math.prod(
        problem.b.extent(x) for x in problem.roles.free_b)
    return flops / FLOPS_PER_BYTE * THIN_GEMM / smallest


def uncopied(problem: ContractionProblem, policy: str, blas_adds: bool) -> Tiling | None:
    """The tiling that runs ``problem`` (beta = 0) without a copy, where its lowering
    under ``policy`` copies: cuts of one label, or two of different roles (as
    :func:`choose` tries them), in chunks of 1 (a shorter chunk leaves a group as
    unmergeable as the whole), at most LOOP_MAX_TILES tiles of LOOP_MIN_TILE_FLOPS or
    more; the cheapest by :func:`choose`'s cost; None where none copies nothing.
    ``blas_adds`` as in :func:`choose`."""
    if _measure(problem, policy, False, blas_adds, None, None).peak_bytes == 0:
        return None
    groups = _cut_groups(problem)
    tuples: list[tuple[str, ...]] = [(x,) for group in groups for x in group]
    tuples += [(x, y) for i, gx in enumerate(groups) for gy in groups[i + 1:]
               for x in gx for y in gy]
    found = []
    for labels in tuples:
        tiles = math.prod(_extent(problem, x) for x in labels)
        if tiles > LOOP_MAX_TILES or problem.flops < LOOP_MIN_TILE_FLOPS * tiles:
            continue
        outer, *inner = (Cut(x, _extent(problem, x), 1) for x in labels)
        tiling = _measure(problem, policy, False, blas_adds, outer, inner[0] if inner else None)
        if tiling.peak_bytes == 0:
            found.append(tiling)
    return min(found, key=lambda t: (t.cost, t.tiles), default=None)


def choose(
    problem: ContractionProblem, policy: str, budget: int, staged: bool, blas_adds: bool = False
) -> Tiling:
    """The cheapest tiling whose copies fit ``budget`` bytes; the one with the smallest
    peak when none fits (its ``peak_bytes`` then exceeds the budget). ``staged``: the
    product is added to C (beta != 0); ``blas_adds``: BLAS can add it in place (see
    :func:`copy_bytes`).

    Per pair of labels and outer chunk size, inner chunks are tried from the largest
    down to the first that fits (smaller ones only add tiles)."""
    untiled = _measure(problem, policy, staged, blas_adds, None, None)
    if untiled.peak_bytes <= budget:
        return untiled
    groups = _cut_groups(problem)
    pairs: list[tuple[str, str | None]] = [(x, None) for group in groups for x in group]
    pairs += [(x, y) for i, gx in enumerate(groups) for j, gy in enumerate(groups) if i != j
              for x in gx for y in gy]
    options: list[Tiling] = []
    for first, second in pairs:
        for first_chunk in _halvings(_extent(problem, first))[1:]:
            outer = Cut(first, _extent(problem, first), first_chunk)
            if second is None:
                options.append(_measure(problem, policy, staged, blas_adds, outer, None))
                continue
            for second_chunk in _halvings(_extent(problem, second)):
                inner = Cut(second, _extent(problem, second), second_chunk)
                tiling = _measure(problem, policy, staged, blas_adds, outer, inner)
                options.append(tiling)
                if tiling.peak_bytes <= budget:
                    break
    fitting = [t for t in options if t.peak_bytes <= budget]
    if not fitting:
        return min(options + [untiled], key=lambda t: (t.peak_bytes, t.tiles))
    return min(fitting, key=lambda t: (t.cost, t.tiles))
