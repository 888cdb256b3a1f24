"""Lower a ContractionProblem onto (batched) GEMM: Uni20's strategy, as plain data.

Labels are grouped into batch, M (free in A), N (free in B) and K (contracted). Each
group gets one label order, chosen so that it merges into a single axis in as many
bytes of the operands holding it as possible; an operand whose groups do not merge,
or whose merged matrix BLAS cannot read in place, is packed (copied) into the layout
that makes K contiguous: A as (batch, M, K), B as (batch, N, K) viewed as (batch, K, N).
D is written in place when its groups merge into a BLAS matrix; otherwise the GEMM
writes a temporary, oriented (M, N) or (N, M) after D's fastest label, and it is
unpacked into D. Which of C = AB or C^T = B^T A^T runs follows from those layouts.

Whether to loop over a free group that does not merge (reading the operand in place
with many smaller GEMMs) or to pack the operand is a trade no rule settles across
sizes and hosts: :func:`policies` names the policies whose lowerings differ
("heuristic": the thresholds below; "pack": never loop; "loop": loop wherever it
spares packing an operand), and a backend may time them (cpu_fallback.measure).
"""

from __future__ import annotations

from dataclasses import dataclass

from .problem import ContractionProblem, TensorSpec
from .strides import is_blas_matrix, merge, order_by_stride

# Below this many flops, packing costs more than BLAS saves: multiply plain views.
SMALL_FLOPS = 2 * 32**3
# A free group that does not merge is looped (batch axes of matmul) instead of packed
# only when the operand is big enough for packing to cost more than many GEMM calls
# (measured on TCCG: packing a 1 MiB ccsd_t operand beats looping; looping a 576 MiB
# intensli operand in 2^15 GEMMs runs 2.6x faster than packing it), when the GEMM
# keeps at least LOOP_MIN_GROUP elements of the group, and at most LOOP_MAX_CALLS GEMMs.
LOOP_MIN_ELEMENTS = 1 << 21
LOOP_MIN_GROUP = 32
LOOP_MAX_CALLS = 1 << 17


@dataclass(frozen=True)
class MatrixOperand:
    """One operand seen as a stack of matrices (batch..., rows, cols).

    Attributes:
        perm: The operand's axes in the order batch labels, row labels, column labels.
        grouped: The extents after ``perm`` (before merging the row and column groups).
        shape: The batch extents, then rows and columns (after merging).
        pack: Copy into a new buffer before the GEMM (for D: GEMM into a temporary,
            then unpack).
        transposed: A packed buffer is laid out (batch, cols, rows) and viewed
            transposed.
        n_batch: How many axes of ``perm`` are batch labels.
        n_rows: How many axes of ``perm`` are row labels (the rest are columns).
    """

    perm: tuple[int, ...]
    grouped: tuple[int, ...]
    shape: tuple[int, ...]
    pack: bool
    transposed: bool
    n_batch: int
    n_rows: int

    def memory_axes(self) -> tuple[int, ...]:
        """Positions in ``perm`` in the order a packed buffer stores them."""
        batch = tuple(range(self.n_batch))
        rows = tuple(range(self.n_batch, self.n_batch + self.n_rows))
        cols = tuple(range(self.n_batch + self.n_rows, len(self.perm)))
        return batch + (cols + rows if self.transposed else rows + cols)


@dataclass(frozen=True)
class GemmLowering:
    """D = A @ B over matrix stacks; route is "direct", "batched", "packed" or "small"."""

    route: str
    reason: str
    a: MatrixOperand
    b: MatrixOperand
    d: MatrixOperand


@dataclass(frozen=True)
class BroadcastOperand:
    """An operand viewed in D's label order, with extent-1 axes for labels it lacks."""

    perm: tuple[int, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class MultiplyLowering:
    """No label is contracted (outer or Hadamard product): D = A * B, broadcasting."""

    route: str
    reason: str
    a: BroadcastOperand
    b: BroadcastOperand


@dataclass(frozen=True)
class EmptyLowering:
    """Some extent is zero: D is empty, or the sum is empty and D = beta * C."""

    route: str
    reason: str
    d_empty: bool


Lowering = GemmLowering | MultiplyLowering | EmptyLowering
POLICIES = ("heuristic", "pack", "loop")


def policies(problem: ContractionProblem) -> tuple[str, ...]:
    """The policies whose lowerings of ``problem`` differ, "heuristic" first; one when
    none differs (small, empty and product-only problems)."""
    found: dict[str, Lowering] = {}
    for policy in POLICIES:
        low = lower(problem, policy)
        if all(_operands(low) != _operands(x) for x in found.values()):
            found[policy] = low
    return tuple(found)


def _operands(low: Lowering) -> tuple[object, ...]:
    return (low.a, low.b, low.d) if isinstance(low, GemmLowering) else (low,)


def lower(problem: ContractionProblem, policy: str = "heuristic") -> Lowering:
    """Choose how to run ``problem`` as GEMM calls on views and packed buffers.

    Args:
        problem: The contraction.
        policy: How a free group that does not merge in its operand is handled:
            "heuristic" (loop over its outer labels when the thresholds say it pays),
            "pack" (pack the operand), "loop" (loop whenever that reads the operand in
            place, D going through a temporary if it must).
    """
    a, b, d = problem.a, problem.b, problem.d
    roles = problem.roles
    if roles.summed:
        raise AssertionError(f"internal error: summed labels {roles.summed!r} reached a GEMM")
    if 0 in a.extents + b.extents + d.extents:
        d_empty = 0 in d.extents
        why = "the result is empty" if d_empty else "a contracted extent is 0: D = beta * C"
        return EmptyLowering("empty", why, d_empty)
    if all(a.extent(x) == 1 for x in roles.contracted):
        return MultiplyLowering(
            "multiply",
            "no label is contracted: a broadcast product writes D directly",
            _broadcast(a, d.labels, roles.contracted),
            _broadcast(b, d.labels, roles.contracted),
        )

    batch = order_by_stride(d, roles.batch)
    m = _choose_order(roles.free_a, (a, d))
    n = _choose_order(roles.free_b, (b, d))
    k = _choose_order(roles.contracted, (a, b))
    flops = 2 * _product(d, batch) * _product(d, m) * _product(d, n) * _product(a, k)
    if flops < SMALL_FLOPS:
        d_merges = merge(d, m) is not None and merge(d, n) is not None
        return GemmLowering(
            "small",
            f"{flops} flops: below {SMALL_FLOPS}, matmul on views without packing",
            _matrix(a, batch, m, k, pack=False, transposed=False),
            _matrix(b, batch, k, n, pack=False, transposed=False),
            _matrix(d, batch, m, n, pack=not d_merges, transposed=_fastest_in(d, m)),
        )

    m_loop, m = _split_group(a, m, d, k, b, rows_first=True, policy=policy)
    n_loop, n = _split_group(b, n, d, k, a, rows_first=False, policy=policy)
    loops = m_loop + n_loop
    batch = order_by_stride(d, batch + loops)
    ok_a, why_a = _fits(a, batch, m, k, "A")
    ok_b, why_b = _fits(b, batch, k, n, "B")
    ok_d, why_d = _fits(d, batch, m, n, "D")
    looped = f"; labels {loops!r} looped as batch axes instead of packing" if loops else ""
    packed = [name for name, ok in (("A", ok_a), ("B", ok_b), ("D", ok_d)) if not ok]
    if packed:
        route = "packed"
        reason = "; ".join(w for w in (why_a, why_b, why_d) if w) + looped
    else:
        route = "batched" if any(d.extent(x) > 1 for x in batch) else "direct"
        reason = "every operand is a BLAS matrix (stack) in place: no copy" + looped
    return GemmLowering(
        route,
        reason,
        _matrix(a, batch, m, k, pack=not ok_a, transposed=False),
        _matrix(b, batch, k, n, pack=not ok_b, transposed=True),
        _matrix(d, batch, m, n, pack=not ok_d, transposed=_fastest_in(d, m)),
    )


def _split_group(
    x: TensorSpec, order: str, d: TensorSpec, k: str, other: TensorSpec, *, rows_first: bool,
    policy: str,
) -> tuple[str, str]:
    """Split a free group that does not merge in its operand ``x`` (or in D).

    The outer labels become batch axes of matmul (the other operand broadcast along
    them) and the innermost run that merges stays the GEMM group: ``x`` is read in
    place by many smaller GEMMs instead of being packed. Only for an operand of at
    least LOOP_MIN_ELEMENTS, when that run keeps at least LOOP_MIN_GROUP elements, the
    loop runs at most LOOP_MAX_CALLS GEMMs, and ``x`` then is a BLAS matrix stack in
    place (with the contracted labels ``k``): a packed operand merges the whole group.
    Each GEMM of the loop reads the ``other`` operand again, so the loop must read it
    no more than the packing of ``x`` would move (2 |x|). The "loop" policy drops every
    threshold but LOOP_MAX_CALLS and the need for D to merge; "pack" never splits.

    Returns:
        (looped labels, GEMM labels); ("", order) when nothing is split.
    """
    if policy == "pack" or (merge(x, order) is not None and merge(d, order) is not None):
        return "", order
    if policy == "loop":
        return _loop_for(x, order, k, rows_first)
    if x.size < LOOP_MIN_ELEMENTS:
        return "", order
    for cut in range(1, len(order)):
        inner, outer = order[cut:], order[:cut]
        if merge(x, inner) is None or merge(d, inner) is None:
            continue
        rows, cols = (inner, k) if rows_first else (k, inner)
        if (
            _product(x, inner) >= LOOP_MIN_GROUP
            and _product(x, outer) <= LOOP_MAX_CALLS
            and _product(x, outer) * other.size <= 2 * x.size
            and _fits(x, "", rows, cols, "")[0]
        ):
            return outer, inner
        break
    return "", order


def _loop_for(x: TensorSpec, order: str, k: str, rows_first: bool) -> tuple[str, str]:
    """The outer labels to loop so that the rest of ``order`` merges in ``x`` and ``x``
    is a BLAS matrix stack in place; ("", order) when ``x`` merges already or no cut
    does it within LOOP_MAX_CALLS GEMMs."""
    if merge(x, order) is not None:
        return "", order
    for cut in range(1, len(order)):
        inner, outer = order[cut:], order[:cut]
        rows, cols = (inner, k) if rows_first else (k, inner)
        if merge(x, inner) is not None and _fits(x, "", rows, cols, "")[0]:
            return (outer, inner) if _product(x, outer) <= LOOP_MAX_CALLS else ("", order)
    return "", order


def _product(spec: TensorSpec, labels: str) -> int:
    n = 1
    for x in labels:
        n *= spec.extent(x)
    return n


def _choose_order(labels: str, holders: tuple[TensorSpec, ...]) -> str:
    """The order of a group that merges in the most elements of its holders."""
    best, best_score = labels, -1
    for holder in holders:
        order = order_by_stride(holder, labels)
        score = sum(h.size for h in holders if merge(h, order) is not None)
        if score > best_score:
            best, best_score = order, score
    return best


def _fits(spec: TensorSpec, batch: str, rows: str, cols: str, name: str) -> tuple[bool, str]:
    """Whether ``spec`` is a BLAS matrix stack in place, and why not."""
    r, c = merge(spec, rows), merge(spec, cols)
    if r is None or c is None:
        group = rows if r is None else cols
        return False, f"{name} packed: labels {group!r} do not merge into one axis"
    if not is_blas_matrix(r, c):
        return False, f"{name} packed: no unit stride with a valid leading dimension"
    return True, ""


def _fastest_in(spec: TensorSpec, labels: str) -> bool:
    """Whether the label of ``spec`` with the smallest stride (extent > 1) is in ``labels``."""
    moving = [(abs(s), x) for x, e, s in zip(spec.labels, spec.extents, spec.strides) if e > 1]
    return bool(moving) and min(moving)[1] in labels


def _matrix(
    spec: TensorSpec, batch: str, rows: str, cols: str, *, pack: bool, transposed: bool
) -> MatrixOperand:
    """``spec`` as (batch..., rows, cols); a batch label it lacks is an axis of extent 1
    (matmul broadcasts the operand along it)."""
    present = "".join(x for x in batch if x in spec.labels)
    order = present + rows + cols
    perm = tuple(spec.labels.index(x) for x in order)
    grouped = tuple(spec.extent(x) for x in order)
    shape = tuple(spec.extent(x) if x in spec.labels else 1 for x in batch) + (
        _product(spec, rows),
        _product(spec, cols),
    )
    return MatrixOperand(perm, grouped, shape, pack, transposed and pack, len(present), len(rows))


def _broadcast(spec: TensorSpec, d_labels: str, contracted: str) -> BroadcastOperand:
    present = [x for x in d_labels if x in spec.labels]
    perm = tuple(spec.labels.index(x) for x in present + list(contracted))
    shape = tuple(spec.extent(x) if x in spec.labels else 1 for x in d_labels)
    return BroadcastOperand(perm, shape)
