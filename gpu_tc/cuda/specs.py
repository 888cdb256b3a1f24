"""Plain data for the GPU backend: descriptor specs, mode maps, alignment, routes, keys.

Everything the GPU backend decides before it calls a library lives here, so it is
unit-tested on the CPU: nothing in this module imports CuPy or nvmath.

cuTENSOR wants positive strides and extents (a stride of zero is written by leaving
the mode out). :func:`orient` maps the core's tensor specs onto that: labels of extent
1 are dropped everywhere, a label whose strides are negative is reversed in every
tensor holding it (a base-pointer offset, no copy), and a tensor that still has a
non-positive stride is staged through a C-ordered buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_tc.errors import WorkspaceError
from gpu_tc.gemm import GemmLowering, MatrixOperand, lower
from gpu_tc.problem import ContractionProblem, ElementwiseProblem, TensorSpec
from gpu_tc.strides import Merged, merge

# cudaDataType_t values (library_types.h): CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F.
DATA_TYPES: dict[str, int] = {"f": 0, "d": 1, "F": 4, "D": 5}
# cutensorComputeDescriptor_t per dtype; names of nvmath's ComputeDesc class methods.
COMPUTE_DESCRIPTORS: dict[str, str] = {
    "f": "COMPUTE_32F",
    "d": "COMPUTE_64F",
    "F": "COMPUTE_32F",
    "D": "COMPUTE_64F",
}
# cuTENSOR never needs more than 256-byte alignment (cudaMalloc's guarantee).
MAX_ALIGNMENT = 256
# cuBLAS takes m, n, k, leading dimensions and the batch count as 32-bit ints.
INT32_MAX = 2**31 - 1
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1


def pointer_alignment(pointer: int) -> int:
    """The alignment in bytes of a device pointer, capped at 256 (0 counts as 256)."""
    return MAX_ALIGNMENT if pointer == 0 else min(pointer & -pointer, MAX_ALIGNMENT)


def extra_key(device: int, pointers: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """The plan-key values of GPU operands: the device and each pointer's alignment.

    Only plain ints derived from the pointers join a key, never the pointers.
    """
    return device, tuple(pointer_alignment(p) for p in pointers)


def mode_map(*label_strings: str) -> dict[str, int]:
    """cuTENSOR mode numbers for labels, in order of first appearance."""
    modes: dict[str, int] = {}
    for label in "".join(label_strings):
        modes.setdefault(label, len(modes))
    return modes


@dataclass(frozen=True)
class DescriptorSpec:
    """One tensor as a cuTENSOR tensor descriptor sees it.

    Attributes:
        modes: The mode number of each descriptor axis.
        extents: Extents (all > 1).
        strides: Strides in elements (all > 0).
        data_type: The cudaDataType_t value.
        offset: Elements from the array's data pointer to the descriptor's base.
        flip: Axes of the array (in its spec's order) read in reverse.
        staged: The tensor goes through a C-ordered buffer holding ``array[flip]``.
    """

    modes: tuple[int, ...]
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    data_type: int
    offset: int
    flip: tuple[int, ...]
    staged: bool

    def same_layout(self, other: DescriptorSpec) -> bool:
        """Whether both address every mode's elements alike (mode order aside)."""
        return sorted(zip(self.modes, self.extents, self.strides)) == sorted(
            zip(other.modes, other.extents, other.strides)
        )


def expected_alignment(descriptor: DescriptorSpec, itemsize: int) -> int:
    """The base alignment of a tensor whose array starts 256-byte aligned, as every
    fresh CuPy allocation does: the alignment a plan is first built for."""
    if descriptor.staged:
        return MAX_ALIGNMENT
    return pointer_alignment(descriptor.offset * itemsize)


def orient(tensors: Sequence[TensorSpec]) -> tuple[DescriptorSpec, ...]:
    """Descriptor specs of the tensors of one operation (no extent may be 0).

    A label whose strides are negative in more elements than they are positive is
    reversed everywhere; the tensors left with a negative or zero stride are staged.
    """
    if any(0 in t.extents for t in tensors):
        raise AssertionError("internal error: a zero-size tensor reached a descriptor")
    modes = mode_map(*(t.labels for t in tensors))
    staged = [any(e > 1 and s == 0 for e, s in zip(t.extents, t.strides)) for t in tensors]
    flipped: set[str] = set()
    for label in modes:
        holders = [
            i
            for i, t in enumerate(tensors)
            if not staged[i] and label in t.labels and t.extent(label) > 1
        ]
        negative = [i for i in holders if tensors[i].stride(label) < 0]
        if not negative:
            continue
        positive = [i for i in holders if i not in negative]
        if sum(tensors[i].size for i in negative) > sum(tensors[i].size for i in positive):
            flipped.add(label)
            losers = positive
        else:
            losers = negative
        for i in losers:
            staged[i] = True
    return tuple(_descriptor(t, modes, flipped, s) for t, s in zip(tensors, staged))


def _descriptor(
    spec: TensorSpec, modes: dict[str, int], flipped: set[str], staged: bool
) -> DescriptorSpec:
    kept = [i for i, e in enumerate(spec.extents) if e != 1]
    flip = tuple(i for i in kept if spec.labels[i] in flipped)
    extents = tuple(spec.extents[i] for i in kept)
    if staged:
        strides = _c_strides(extents)
        offset = 0
    else:
        strides = tuple(abs(spec.strides[i]) for i in kept)
        offset = sum(spec.strides[i] * (spec.extents[i] - 1) for i in flip)
    return DescriptorSpec(
        tuple(modes[spec.labels[i]] for i in kept),
        extents,
        strides,
        DATA_TYPES[spec.dtype],
        offset,
        flip,
        staged,
    )


def _c_strides(extents: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for extent in reversed(extents):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def staging_note(names: str, descriptors: Sequence[DescriptorSpec]) -> str:
    """A reason fragment naming the staged tensors, or "" when none is."""
    staged = [name for name, d in zip(names, descriptors) if d.staged]
    if not staged:
        return ""
    return f"; {', '.join(staged)} staged through a C-ordered copy (negative or zero strides)"


@dataclass(frozen=True)
class ElementwiseRoles:
    """Which operand plays cuTENSOR's A, (B,) and C in an element-wise operation.

    cuTENSOR writes D in C's layout, so the C role goes to an operand laid out like D
    (the binary operators are commutative and, when op_ab == op_abc, associative).

    Attributes:
        order: Operand indices (0 = A, 1 = B, 2 = C of the problem) for each role;
            two entries for a binary problem, whose operands are (A, C).
        stage_c: No operand has D's layout: D is first set to gamma * op_c(C), then
            takes the C role in place.
    """

    order: tuple[int, ...]
    stage_c: bool


def elementwise_roles(
    problem: ElementwiseProblem,
    a: DescriptorSpec,
    b: DescriptorSpec | None,
    c: DescriptorSpec,
    d: DescriptorSpec,
) -> ElementwiseRoles:
    """Assign the roles from the oriented descriptors of A, B (None if binary), C and D."""
    like_d = [x is not None and x.same_layout(d) for x in (a, b, c)]
    if b is None:
        if like_d[2]:
            return ElementwiseRoles((0, 2), False)
        if like_d[0]:
            return ElementwiseRoles((2, 0), False)
        return ElementwiseRoles((0, 2), True)
    if like_d[2]:
        return ElementwiseRoles((0, 1, 2), False)
    if problem.op_ab is problem.op_abc:
        if like_d[0]:
            return ElementwiseRoles((2, 1, 0), False)
        if like_d[1]:
            return ElementwiseRoles((0, 2, 1), False)
    return ElementwiseRoles((0, 1, 2), True)


@dataclass(frozen=True)
class CublasGemm:
    """One cuBLAS GEMM (column-major): D' = op(first) @ op(second), batched by stride.

    Attributes:
        swap: False: D = A @ B (first = A). True: D^T = B^T @ A^T (first = B).
        transa, transb: CUBLAS_OP_N or CUBLAS_OP_T for the first and second operand.
        m, n, k: The GEMM sizes in cuBLAS terms.
        lda, ldb, ldc: Leading dimensions of the first, second and output matrices.
        stride_a, stride_b, stride_c: Batch strides in elements (0 when batch == 1).
        batch: The batch count (1: a plain gemm).
    """

    swap: bool
    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int

    @property
    def call(self) -> str:
        """The cuBLAS routine family: "gemm" or "gemmStridedBatched"."""
        return "gemmStridedBatched" if self.batch > 1 else "gemm"


@dataclass(frozen=True)
class GemmRoute:
    """The cuBLAS mapping of a contraction, or None and why not."""

    gemm: CublasGemm | None
    reason: str


def cublas_gemm(problem: ContractionProblem) -> GemmRoute:
    """Map ``problem`` onto one cuBLAS gemm / gemmStridedBatched without any copy.

    Uses the label groups of :func:`gpu_tc.gemm.lower`; every operand's batch, row and
    column groups must merge into single axes, each matrix must be column-major or
    transposed in place, and the batch must be one uniform positive stride.
    """
    low = lower(problem)
    if not isinstance(low, GemmLowering):
        return GemmRoute(None, f"not a GEMM ({low.route}: {low.reason})")
    groups = []
    operands = (("A", problem.a, low.a), ("B", problem.b, low.b), ("D", problem.d, low.d))
    for name, spec, matrix in operands:
        merged = _merged_groups(spec, matrix)
        if merged is None:
            return GemmRoute(None, f"the label groups of {name} do not merge into a matrix stack")
        groups.append(merged)
    (ab, am, ak), (bb, bk, bn), (db, dm, dn) = groups
    batch = db.extent
    if batch > 1 and not all(g.stride is not None and g.stride > 0 for g in (ab, bb, db)):
        return GemmRoute(None, "the batch labels have no positive uniform stride in every operand")
    sizes = (dm.extent, dn.extent, ak.extent, batch)
    if max(sizes) > INT32_MAX:
        return GemmRoute(None, "a GEMM size exceeds cuBLAS's 32-bit range")
    strides = [(g.stride or 0) if batch > 1 else 0 for g in (ab, bb, db)]
    for swap in (False, True):
        gemm = _orientation(swap, am, ak, bk, bn, dm, dn, strides, batch)
        if gemm is not None:
            shape = "D^T = B^T A^T" if swap else "D = A B"
            return GemmRoute(
                gemm,
                f"no copy: one cuBLAS {gemm.call} ({shape}, m={gemm.m}, n={gemm.n}, "
                f"k={gemm.k}, batch={gemm.batch})",
            )
    return GemmRoute(None, "an operand has no unit stride with a valid leading dimension")


def _merged_groups(spec: TensorSpec, matrix: MatrixOperand) -> tuple[Merged, Merged, Merged] | None:
    order = [spec.labels[i] for i in matrix.perm]
    split = (matrix.n_batch, matrix.n_batch + matrix.n_rows)
    merged = (
        merge(spec, order[: split[0]]),
        merge(spec, order[split[0] : split[1]]),
        merge(spec, order[split[1] :]),
    )
    if merged[0] is None or merged[1] is None or merged[2] is None:
        return None
    return merged[0], merged[1], merged[2]


def leading_dimension(rows: Merged, cols: Merged) -> int | None:
    """The leading dimension of a rows x cols matrix read column-major in place, or None.

    Column-major means unit row stride and a column stride of at least the row count;
    an axis of extent 1 may have any stride.
    """
    if rows.extent > 1 and rows.stride != 1:
        return None
    least = max(rows.extent, 1)
    if cols.extent <= 1:
        return least
    if cols.stride is None or cols.stride < least or cols.stride > INT32_MAX:
        return None
    return cols.stride


def _operand(rows: Merged, cols: Merged) -> tuple[int, int] | None:
    """(op, ld) for a matrix used as ``rows x cols``: as stored, or stored transposed."""
    ld = leading_dimension(rows, cols)
    if ld is not None:
        return CUBLAS_OP_N, ld
    ld = leading_dimension(cols, rows)
    if ld is not None:
        return CUBLAS_OP_T, ld
    return None


def _orientation(
    swap: bool,
    am: Merged,
    ak: Merged,
    bk: Merged,
    bn: Merged,
    dm: Merged,
    dn: Merged,
    strides: list[int],
    batch: int,
) -> CublasGemm | None:
    if swap:  # D^T (n x m) = B^T (n x k) @ A^T (k x m)
        ldc = leading_dimension(dn, dm)
        first, second = _operand(bn, bk), _operand(ak, am)
        m, n = dn.extent, dm.extent
        stride_first, stride_second = strides[1], strides[0]
    else:  # D (m x n) = A (m x k) @ B (k x n)
        ldc = leading_dimension(dm, dn)
        first, second = _operand(am, ak), _operand(bk, bn)
        m, n = dm.extent, dn.extent
        stride_first, stride_second = strides[0], strides[1]
    if ldc is None or first is None or second is None:
        return None
    return CublasGemm(
        swap,
        first[0],
        second[0],
        m,
        n,
        ak.extent,
        first[1],
        second[1],
        ldc,
        stride_first,
        stride_second,
        strides[2],
        batch,
    )


@dataclass(frozen=True)
class WorkspaceChoice:
    """The workspace limit handed to cutensorCreatePlan, and why."""

    limit: int
    note: str


def choose_workspace(
    recommended: int, minimum: int, limit: int | None, context: str
) -> WorkspaceChoice:
    """The recommended workspace, capped by ``Options.workspace_limit``.

    Raises:
        WorkspaceError: even the minimum workspace exceeds the limit.
    """
    if limit is None or recommended <= limit:
        return WorkspaceChoice(recommended, f"workspace {recommended} bytes (recommended)")
    if minimum > limit:
        raise WorkspaceError(
            f"{context} needs at least {minimum} bytes of workspace but "
            f"Options.workspace_limit is {limit}"
        )
    return WorkspaceChoice(
        limit, f"workspace capped at workspace_limit={limit} bytes ({recommended} recommended)"
    )


def fallback_note(failed: int, minimum: int) -> str:
    """The reason fragment recorded when a workspace allocation ran out of memory."""
    return (
        f"workspace of {failed} bytes hit out-of-memory: planned again with the "
        f"minimum of {minimum} bytes"
    )
