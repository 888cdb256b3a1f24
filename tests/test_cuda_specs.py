"""The GPU backend's plain-data decisions, on the CPU: no CuPy, no nvmath, no GPU.

Descriptor specs, mode maps, dtype tables, alignment, keys, the forms cuTENSOR is
given, element-wise roles, the cuBLAS route (strided-batched criterion, transposition
flags) and the workspace policy.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gpu_tc.cuda import descriptors as specs
from gpu_tc.cuda.descriptors import (
    DescriptorSpec,
    documented_forms,
    expected_alignment,
    extra_key,
    mode_map,
    orient,
    pointer_alignment,
)
from gpu_tc.cuda.gemm_route import CUBLAS_OP_N, CUBLAS_OP_T, cublas_gemm, leading_dimension
from gpu_tc.cuda.roles import ElementwiseRoles, elementwise_roles
from gpu_tc.cuda.workspace import (
    choose_workspace,
    fallback_note,
    refused_within,
    workspace_cap,
)
from gpu_tc.errors import MemoryLimitError, WorkspaceError
from gpu_tc.options import BinaryOp, UnaryOp
from gpu_tc.problem import ContractionProblem, ElementwiseProblem, TensorSpec, contiguous_spec
from gpu_tc.strides import Merged


def spec(
    labels: str, extents: tuple[int, ...], strides: tuple[int, ...], dtype: str = "d"
) -> TensorSpec:
    return TensorSpec(labels, extents, strides, dtype)


def c_order(labels: str, extents: tuple[int, ...], dtype: str = "d") -> TensorSpec:
    return contiguous_spec(labels, extents, dtype)


def f_order(labels: str, extents: tuple[int, ...], dtype: str = "d") -> TensorSpec:
    reverse = contiguous_spec(labels[::-1], extents[::-1], dtype)
    return TensorSpec(labels, extents, reverse.strides[::-1], dtype)


# --- isolation ----------------------------------------------------------------------


def test_plain_data_modules_import_without_cupy_or_nvmath():
    script = textwrap.dedent(
        """
        import sys

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("cupy", "cupy_backends", "cupyx", "nvmath"):
                    raise ImportError(f"blocked import of {name}")
                return None

        sys.meta_path.insert(0, Blocker())
        import gpu_tc
        import gpu_tc.cuda.descriptors, gpu_tc.cuda.gemm_route, gpu_tc.cuda.libraries
        import gpu_tc.cuda.roles, gpu_tc.cuda.workspace
        blocked = [m for m in sys.modules if m.split(".")[0] in ("cupy", "nvmath")]
        print("clean" if not blocked else blocked)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


# --- dtype tables, alignment, keys, modes -------------------------------------------


def test_cutensor_data_and_compute_types_per_dtype():
    # cudaDataType_t: CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_C_32F = 4, CUDA_C_64F = 5.
    assert specs.DATA_TYPES == {"f": 0, "d": 1, "F": 4, "D": 5}
    assert specs.COMPUTE_DESCRIPTORS == {
        "f": "COMPUTE_32F",
        "d": "COMPUTE_64F",
        "F": "COMPUTE_32F",
        "D": "COMPUTE_64F",
    }


@pytest.mark.parametrize(
    "pointer, alignment",
    [
        (0, 256),
        (256, 256),
        (0x7F00_0000_0000, 256),
        (0x7F00_0000_0010, 16),
        (0x1008, 8),
        (4, 4),
        (3, 1),
    ],
)
def test_pointer_alignment(pointer, alignment):
    assert pointer_alignment(pointer) == alignment


def test_extra_key_holds_device_and_alignments_never_pointers():
    pointers = [0x7F12_3456_7800, 0x7F12_3456_7808, 0x7F12_3456_7A10]
    key = extra_key(1, pointers)
    assert key == (1, (256, 8, 16))
    flat = [key[0], *key[1]]
    assert all(isinstance(x, int) for x in flat)
    assert not set(flat) & set(pointers)
    assert extra_key(0, [0x7F00_0000_1000]) == extra_key(0, [0x7F00_0020_0000])


def test_mode_map_numbers_labels_by_first_appearance():
    assert mode_map("abc", "cbd", "da") == {"a": 0, "b": 1, "c": 2, "d": 3}
    assert mode_map() == {}


# --- descriptor specs ---------------------------------------------------------------


def test_orient_keeps_positive_strides_in_place():
    (a,) = orient([c_order("ab", (3, 4), "f")])
    assert a == DescriptorSpec((0, 1), (3, 4), (4, 1), 0, 0, (), False)


def test_orient_drops_extent_one_labels_everywhere():
    a, d = orient([spec("abc", (3, 1, 4), (4, 4, 1)), c_order("cab", (4, 3, 1))])
    assert (a.modes, a.extents, a.strides) == ((0, 2), (3, 4), (4, 1))
    assert (d.modes, d.extents, d.strides) == ((2, 0), (4, 3), (3, 1))
    assert a.data_type == 1 and not a.staged and not d.staged


def test_orient_reverses_a_label_negative_in_every_tensor():
    a, b = orient([spec("ab", (3, 4), (-4, 1)), spec("ba", (4, 3), (1, -4))])
    assert (a.strides, a.offset, a.flip, a.staged) == ((4, 1), -8, (0,), False)
    assert (b.strides, b.offset, b.flip, b.staged) == ((1, 4), -8, (1,), False)


def test_orient_stages_the_smaller_side_of_a_mixed_label():
    # 'a' is negative in A (12 elements) and positive in D (6): reversed, D staged.
    a, b, d = orient(
        [spec("ab", (3, 4), (-4, 1)), c_order("bc", (4, 2)), c_order("ac", (3, 2))]
    )
    assert (a.strides, a.offset, a.flip, a.staged) == ((4, 1), -8, (0,), False)
    assert not b.staged and b.flip == ()
    assert (d.strides, d.offset, d.flip, d.staged) == ((2, 1), 0, (0,), True)
    # Equal sizes: nothing reversed, the negative tensor is staged.
    x, y = orient([spec("ab", (3, 4), (-4, 1)), c_order("ba", (4, 3))])
    assert (x.strides, x.offset, x.flip, x.staged) == ((4, 1), 0, (), True)
    assert not y.staged


def test_orient_stages_zero_strides():
    a, d = orient([spec("ab", (3, 4), (0, 1)), c_order("ab", (3, 4))])
    assert a.staged and a.strides == (4, 1)
    assert not d.staged


def test_orient_stages_a_tensor_whose_elements_overlap():
    window = spec("ij", (7, 4), (1, 1))  # a sliding window: element (i, j) at i + j
    gapped = spec("ij", (3, 4), (2, 5))  # interleaved but never the same address twice
    overlapping, fine = orient((window, spec("ij", (7, 4), (4, 1))))
    assert overlapping.staged and not fine.staged
    assert not orient((gapped, spec("ij", (3, 4), (4, 1))))[0].staged


def test_orient_refuses_zero_extents():
    with pytest.raises(AssertionError, match="internal error"):
        orient([c_order("ab", (0, 4))])


def test_same_layout_ignores_mode_order():
    x = DescriptorSpec((0, 1), (3, 4), (4, 1), 1, 0, (), False)
    y = DescriptorSpec((1, 0), (4, 3), (1, 4), 1, 16, (), True)
    z = DescriptorSpec((1, 0), (4, 3), (3, 1), 1, 0, (), False)
    assert x.same_layout(y)
    assert not x.same_layout(z)


def test_expected_alignment_of_a_fresh_allocation():
    in_place = DescriptorSpec((0,), (4,), (1,), 1, 0, (), False)
    reversed_ = DescriptorSpec((0,), (4,), (1,), 1, -3, (0,), False)
    staged = DescriptorSpec((0,), (4,), (1,), 1, 0, (), True)
    assert expected_alignment(in_place, 8) == 256
    assert expected_alignment(reversed_, 8) == 8  # 24 bytes before a 256-byte base
    assert expected_alignment(staged, 16) == 256


def test_staging_note_names_the_staged_tensors():
    plain = DescriptorSpec((0,), (4,), (1,), 1, 0, (), False)
    staged = DescriptorSpec((0,), (4,), (1,), 1, 0, (), True)
    assert specs.staging_note("AB", [plain, plain]) == ""
    assert specs.staging_note("AB", [plain, staged]) == (
        "; B staged through a C-ordered copy (negative or zero strides, or overlapping elements)"
    )


def test_documented_forms_leave_ordinary_operations_alone():
    a, b, d = orient((spec("ab", (3, 4), (4, 1)), spec("bc", (4, 5), (5, 1)),
                      spec("ac", (3, 5), (5, 1))))
    assert documented_forms((a, b, d), contraction=True) == ((a, b, d), "")


def test_documented_forms_give_an_outer_product_a_contracted_mode():
    a, b, d = orient((spec("a", (3,), (1,)), spec("b", (4,), (1,)), spec("ab", (3, 4), (4, 1))))
    (pa, pb, pd), note = documented_forms((a, b, d), contraction=True)
    assert pa.modes == (0, 2) and pb.modes == (1, 2) and pd == d
    assert (pa.extents[-1], pa.strides[-1]) == (1, 1)
    assert note == "; an extent-1 contracted mode added (no label is contracted)"


def test_documented_forms_give_every_tensor_a_mode_when_one_has_none():
    a, b, d = orient((spec("ab", (3, 4), (4, 1)), spec("ab", (3, 4), (4, 1)),
                      spec("", (), ())))
    (pa, pb, pd), note = documented_forms((a, b, d), contraction=True)
    assert pa.modes == (0, 1, 2) and pb.modes == (0, 1, 2) and pd.modes == (2,)
    assert pd.extents == (1,)
    assert note == "; an extent-1 mode added to every tensor (one has no modes)"
    ones = orient((spec("ab", (1, 1), (1, 1)), spec("", (), ())))
    padded, note = documented_forms(ones)
    assert [p.modes for p in padded] == [(0,), (0,)]


# --- element-wise roles -------------------------------------------------------------


def elementwise(
    a: TensorSpec,
    b: TensorSpec | None,
    c: TensorSpec,
    d: TensorSpec,
    op_ab: BinaryOp = BinaryOp.ADD,
    op_abc: BinaryOp = BinaryOp.ADD,
) -> ElementwiseProblem:
    i = UnaryOp.IDENTITY
    return ElementwiseProblem(a, b, c, d, i, i, i, op_ab, op_abc)


def roles(problem: ElementwiseProblem) -> ElementwiseRoles:
    tensors = [t for t in (problem.a, problem.b, problem.c, problem.d) if t is not None]
    oriented = list(orient(tensors))
    if problem.b is None:
        oriented.insert(1, None)
    return elementwise_roles(problem, *oriented)


def test_elementwise_roles_binary():
    d = c_order("ab", (3, 4))
    transposed = f_order("ab", (3, 4))
    assert roles(elementwise(transposed, None, d, d)) == ElementwiseRoles((0, 2), False)
    assert roles(elementwise(d, None, transposed, d)) == ElementwiseRoles((2, 0), False)
    assert roles(elementwise(transposed, None, transposed, d)).stage_c
    broadcast = c_order("b", (4,))
    assert roles(elementwise(d, None, broadcast, d)) == ElementwiseRoles((2, 0), False)


def test_elementwise_roles_trinary():
    d = c_order("ab", (3, 4))
    t = f_order("ab", (3, 4))
    assert roles(elementwise(t, t, d, d)) == ElementwiseRoles((0, 1, 2), False)
    assert roles(elementwise(d, t, t, d)) == ElementwiseRoles((2, 1, 0), False)
    assert roles(elementwise(t, d, t, d, BinaryOp.MUL, BinaryOp.MUL)) == ElementwiseRoles(
        (0, 2, 1), False
    )
    # (A*B)+C is not (C*B)+A: with different operators C keeps its role and is staged.
    assert roles(elementwise(d, t, t, d, BinaryOp.MUL, BinaryOp.ADD)).stage_c


# --- the cuBLAS route ---------------------------------------------------------------


def test_leading_dimension():
    assert leading_dimension(Merged(3, 1), Merged(4, 5)) == 5
    assert leading_dimension(Merged(3, 1), Merged(4, 2)) is None  # overlapping columns
    assert leading_dimension(Merged(3, 4), Merged(4, 1)) is None  # rows not unit-stride
    assert leading_dimension(Merged(1, None), Merged(4, 7)) == 7  # a row vector
    assert leading_dimension(Merged(3, 1), Merged(1, None)) == 3  # a column vector
    assert leading_dimension(Merged(3, 1), Merged(4, -5)) is None


def test_cublas_row_major_gemm_runs_transposed():
    a, b, d = c_order("ij", (3, 4)), c_order("jk", (4, 5)), c_order("ik", (3, 5))
    problem = ContractionProblem(a, b, d)
    route = cublas_gemm(problem)
    g = route.gemm
    assert g is not None and g.swap
    assert (g.transa, g.transb) == (CUBLAS_OP_N, CUBLAS_OP_N)
    assert (g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch) == (5, 3, 4, 5, 4, 5, 1)
    assert g.call == "gemm"
    assert "D^T = B^T A^T" in route.reason and "no copy" in route.reason


def test_cublas_column_major_gemm_runs_as_is():
    a, b, d = f_order("ij", (3, 4)), f_order("jk", (4, 5)), f_order("ik", (3, 5))
    problem = ContractionProblem(a, b, d)
    route = cublas_gemm(problem)
    g = route.gemm
    assert g is not None and not g.swap
    assert (g.transa, g.transb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc) == (
        CUBLAS_OP_N, CUBLAS_OP_N, 3, 5, 4, 3, 4, 3,
    )


def test_cublas_transposed_operand_sets_its_flag():
    a = TensorSpec("ij", (3, 4), (1, 3), "d")  # A stored as (j, i) C-ordered
    route = cublas_gemm(ContractionProblem(a, c_order("jk", (4, 5)), c_order("ik", (3, 5))))
    g = route.gemm
    assert g is not None and g.swap
    assert (g.transa, g.lda) == (CUBLAS_OP_N, 5)  # B^T read as stored
    assert (g.transb, g.ldb) == (CUBLAS_OP_T, 3)  # A^T from A column-major


def test_cublas_matrix_vector_with_a_stepped_vector():
    b = TensorSpec("j", (4,), (2,), "d")
    route = cublas_gemm(ContractionProblem(c_order("ij", (3, 4)), b, c_order("i", (3,))))
    g = route.gemm
    assert g is not None and not g.swap
    assert (g.transa, g.transb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc) == (
        CUBLAS_OP_T, CUBLAS_OP_T, 3, 1, 4, 4, 2, 3,
    )


def test_cublas_strided_batched_when_the_batch_is_one_stride():
    problem = ContractionProblem(
        c_order("bij", (2, 3, 4)), c_order("bjk", (2, 4, 5)), c_order("bik", (2, 3, 5))
    )
    route = cublas_gemm(problem)
    g = route.gemm
    assert g is not None and g.call == "gemmStridedBatched" and g.batch == 2
    # D^T = B^T A^T: the first operand is B.
    assert (g.stride_a, g.stride_b, g.stride_c) == (20, 12, 15)
    assert "batch=2" in route.reason


def test_cublas_refuses_a_batch_without_one_stride():
    # A stores its batch labels (x, y) as (y, x): they do not merge in D's order.
    a = TensorSpec("xyij", (2, 3, 4, 5), (20, 40, 5, 1), "d")
    problem = ContractionProblem(a, c_order("xyjk", (2, 3, 5, 6)), c_order("xyik", (2, 3, 4, 6)))
    route = cublas_gemm(problem)
    assert route.gemm is None
    assert "A do not merge" in route.reason


def test_cublas_refuses_negative_strides_and_non_gemms():
    a = TensorSpec("ij", (3, 4), (-4, 1), "d")
    route = cublas_gemm(ContractionProblem(a, c_order("jk", (4, 5)), c_order("ik", (3, 5))))
    assert route.gemm is None and "no unit stride" in route.reason
    outer = ContractionProblem(c_order("i", (3,)), c_order("k", (5,)), c_order("ik", (3, 5)))
    route = cublas_gemm(outer)
    assert route.gemm is None and route.reason.startswith("not a GEMM (multiply")


# --- workspace policy ---------------------------------------------------------------


def test_workspace_recommended_without_a_limit():
    choice = choose_workspace(4096, 256, None)
    assert choice.limit == 4096 and "recommended" in choice.note
    assert choose_workspace(4096, 256, 8192).limit == 4096


def test_workspace_capped_by_the_limit():
    choice = choose_workspace(4096, 256, 1000)
    assert choice.limit == 1000
    assert "workspace_limit=1000" in choice.note and "4096" in choice.note
    assert "minimum estimate" not in choice.note


def test_a_limit_below_the_minimum_estimate_is_still_tried():
    """cuTENSOR 2.8.0 estimated 32 MiB at least, then planned with none (an H200)."""
    choice = choose_workspace(4096, 256, 100)
    assert choice.limit == 100 and "under cuTENSOR's minimum estimate of 256" in choice.note
    error = refused_within(100, 256, "contraction ab,bc->ac", "workspace_limit",
                           "CUTENSOR_STATUS_INSUFFICIENT_WORKSPACE")
    assert isinstance(error, WorkspaceError) and "within the 100 bytes" in str(error)
    assert "contraction ab,bc->ac" in str(error) and "at least 256 bytes" in str(error)


def test_memory_limit_caps_the_workspace_after_staged_copies():
    assert workspace_cap(None, None, 0) == (None, "workspace_limit")
    assert workspace_cap(5000, None, 100) == (5000, "workspace_limit")
    assert workspace_cap(None, 5000, 1000) == (4000, "memory_limit")
    assert workspace_cap(3000, 5000, 1000) == (3000, "workspace_limit")
    assert workspace_cap(None, 500, 1000) == (0, "memory_limit")
    choice = choose_workspace(4096, 256, 1000, "memory_limit")
    assert choice.limit == 1000 and "memory_limit=1000" in choice.note


def test_memory_limit_cutensor_cannot_plan_within_names_both():
    error = refused_within(100, 256, "contraction ab,bc->ac", "memory_limit",
                           "CUTENSOR_STATUS_INSUFFICIENT_WORKSPACE")
    assert isinstance(error, MemoryLimitError) and isinstance(error, MemoryError)
    assert error.need == 256 and "Options.memory_limit leaves" in str(error)


def test_fallback_note_records_the_out_of_memory_retry():
    assert fallback_note(4096, 256, 256) == (
        "workspace of 4096 bytes hit out-of-memory: planned again with cuTENSOR's minimum "
        "estimate of 256 bytes"
    )
    assert fallback_note(256, 0, 256) == (
        "workspace of 256 bytes hit out-of-memory: planned again with 0 bytes"
    )
