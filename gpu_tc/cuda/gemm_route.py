"""The cuBLAS route's plain data: a contraction mapped onto one column-major GEMM.

Row-major tensors reach column-major cuBLAS as D = A B or D^T = B^T A^T, reading every
operand in place (a leading dimension, a transpose flag, a uniform batch stride), or,
on the staged route, after A or B is copied into the layout :func:`gpu_tc.gemm.lower`
packs it in (torch.einsum's way); D is always written in place. Decided on the CPU,
unit-tested without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_tc.gemm import GemmLowering, MatrixOperand, lower
from gpu_tc.problem import ContractionProblem, TensorSpec, contiguous_spec
from gpu_tc.strides import Merged, merge

# cuBLAS takes m, n, k, leading dimensions and the batch count as 32-bit ints.
INT32_MAX = 2**31 - 1
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1


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


@dataclass(frozen=True)
class StagedGemm:
    """A contraction run as one cuBLAS GEMM after copying A and/or B.

    Attributes:
        problem: The contraction on the staged operands (dense copies, in the original
            label order; D unchanged).
        gemm: Its cuBLAS mapping.
        staged: Whether A, whether B is copied.
        reason: What is copied and the GEMM.
    """

    problem: ContractionProblem
    gemm: CublasGemm
    staged: tuple[bool, bool]
    reason: str


def staged_gemm(problem: ContractionProblem) -> StagedGemm | None:
    """``problem`` as one cuBLAS GEMM after copying the operands that cannot be read
    as matrices in place, or None: it needs no copy (:func:`cublas_gemm` maps it), it
    is no GEMM, or D cannot be written in place."""
    low = lower(problem, "pack")
    if not isinstance(low, GemmLowering) or low.d.pack or not (low.a.pack or low.b.pack):
        return None
    a = _packed(problem.a, low.a) if low.a.pack else problem.a
    b = _packed(problem.b, low.b) if low.b.pack else problem.b
    staged = ContractionProblem(a, b, problem.d)
    route = cublas_gemm(staged)
    if route.gemm is None:
        return None
    copied = " and ".join(name for name, m in (("A", low.a), ("B", low.b)) if m.pack)
    gemm = route.reason.removeprefix("no copy: ")
    return StagedGemm(staged, route.gemm, (low.a.pack, low.b.pack),
                      f"{copied} copied into GEMM order, then {gemm}")


def _packed(spec: TensorSpec, matrix: MatrixOperand) -> TensorSpec:
    """``spec`` as a dense copy laid out as ``matrix`` packs it (labels kept in order)."""
    order = "".join(spec.labels[matrix.perm[i]] for i in matrix.memory_axes())
    dense = contiguous_spec(order, [spec.extent(x) for x in order], spec.dtype)
    return dense.permuted(spec.labels)


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
