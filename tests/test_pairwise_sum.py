"""Sums of contiguous stretches and of evenly spaced runs (diagonals) on OpenMP's threads
(cpu_fallback.pairwise_sum): the rows, the cuts, and results with NumPy's own bits
however the rows are cut; the route competes with the ufunc reduction by timing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import call_until_reason, count_fresh_calls

import gpu_tc
from cpu_fallback import kernels, pairwise_sum
from cpu_fallback.pairwise_sum import (
    MIN_BYTES,
    MIN_ONE_THREAD,
    PairwiseSumPlan,
    one_thread_plan,
    pairwise_sum_plans,
    pieces_per_row,
)
from cpu_fallback.sum_layout import LeafProgram, RowLayout, cuts, is_run, leaf_program, row_layout
from gpu_tc.backend import Scalars
from gpu_tc.options import ReduceOp, UnaryOp
from gpu_tc.problem import ReductionProblem, TensorSpec, contiguous_spec

pytestmark = pytest.mark.skipif(not kernels.built("_pairwise"),
                                reason="cpu_fallback._pairwise was not built")


def _problem(x: np.ndarray, labels: str, kept: str, d: np.ndarray | None = None,
             **ops) -> ReductionProblem:
    spec = TensorSpec(labels, x.shape, tuple(s // x.itemsize for s in x.strides), x.dtype.char)
    if d is None:
        out = contiguous_spec(kept, [spec.extent(k) for k in kept], x.dtype.char)
    else:
        out = TensorSpec(kept, d.shape, tuple(s // d.itemsize for s in d.strides), d.dtype.char)
    return ReductionProblem(spec, out, **ops)


def _recursion_cuts(n: int, depth: int) -> list[tuple[int, int]]:
    """NumPy's pairwise recursion, written out: (start, length) of its pieces at ``depth``."""
    if depth == 0 or n <= 128:
        return [(0, n)]
    half = n // 2 - (n // 2) % 8
    return _recursion_cuts(half, depth - 1) + [
        (half + s, m) for s, m in _recursion_cuts(n - half, depth - 1)]


def test_rows_are_the_kept_indices_and_the_summed_axes_one_stretch():
    a = np.empty((3, 4, 5, 6))
    layout = row_layout(_problem(a, "abcd", "a"), contiguous_spec("a", (3,), "d"))
    assert layout.length == 120 and layout.row_src.tolist() == [0, 120, 240]
    assert layout.row_dst.tolist() == [0, 1, 2]
    # a Fortran-ordered array: the summed axes still make one stretch, in memory order
    f = np.asfortranarray(a)
    layout = row_layout(_problem(f, "abcd", "d"), contiguous_spec("d", (6,), "d"))
    assert layout.length == 60 and layout.row_src.tolist() == [60 * k for k in range(6)]
    # a reversed kept axis: its rows start from the top of memory
    layout = row_layout(_problem(a[::-1], "abcd", "a"), contiguous_spec("a", (3,), "d"))
    assert layout.src_base == 240 and layout.row_src.tolist() == [240, 120, 0]


def test_a_diagonal_or_a_stepped_view_makes_evenly_spaced_rows():
    a = np.empty((5, 5))
    layout = row_layout(_problem(a.diagonal(), "a", ""), contiguous_spec("", (), "d"))
    assert (layout.step, layout.length, layout.row_src.tolist()) == (6, 5, [0])
    b = np.empty((3, 4, 4))
    diagonals = np.diagonal(b, axis1=1, axis2=2)  # 'bii->b'
    layout = row_layout(_problem(diagonals, "ba", "b"), contiguous_spec("b", (3,), "d"))
    assert (layout.step, layout.length, layout.row_src.tolist()) == (5, 4, [0, 16, 32])
    c = np.empty((4, 6, 9))[:, :, ::3]  # c and b summed: one run of 18 at a step of 3
    layout = row_layout(_problem(c, "abc", "a"), contiguous_spec("a", (4,), "d"))
    assert (layout.step, layout.length, layout.row_src.tolist()) == (3, 18, [0, 54, 108, 162])


@pytest.mark.parametrize(("view", "labels", "kept"), [
    (lambda a: a, "abc", "b"),             # summed axes a and c are not one stretch
    (lambda a: a[:, :, :5], "abc", "a"),   # rows padded: b and c not one stretch
    (lambda a: a[:, :, ::-1], "abc", "a"),  # a reversed summed axis
    (lambda a: a, "abc", "abc"),           # nothing summed
])
def test_no_rows_where_the_summed_axes_are_not_one_stretch(view, labels, kept):
    x = view(np.empty((3, 4, 6)))
    problem = _problem(x, labels, kept)
    assert row_layout(problem, problem.d) is None


@pytest.mark.parametrize(("n", "pieces"), [(1000, 2), (16_777_216, 8), (1_000_003, 4),
                                           (300_001, 16)])
def test_rows_are_cut_where_numpys_recursion_halves_them(n, pieces):
    lengths = cuts(n, pieces)
    starts = leaf_program(lengths).offsets
    expected = _recursion_cuts(n, pieces.bit_length() - 1)
    assert list(zip(starts.tolist(), lengths.tolist())) == expected
    assert sum(lengths) == n


def test_the_leaf_program_spells_out_numpys_recursion():
    """1000 = (496 = (248 = 120 + 128) x 2) + (504 = 248 + 256), by hand, 256 = 128 + 128
    one run; a piece of 100 is one block."""
    program = leaf_program(np.array([1000, 100, 1000]))
    blocks = [120, 128, 120, 128, 120, 128, 256]
    assert program.lengths.tolist() == blocks + [100] + blocks
    adds = [0, 1, 0, 2, 0, 1, 2]  # after each block or run, the halves it closes
    assert program.adds.tolist() == adds + [0] + adds
    assert program.entries.tolist() == [0, 7, 8, 15]
    assert program.offsets.tolist() == [0, 1000, 1100]


def test_a_stretch_halved_into_equal_leaves_is_one_run():
    """128 x 2^k, or 96 x 2^k (any multiple of 8 from 72 to 128 times 2^k): the recursion
    halves it exactly into equal leaves all the way down, one entry, which the kernel sums
    without tables; 200 is not (NumPy halves it into 96 + 104), nor 8 past 2^21."""
    assert [is_run(n) for n in (128, 256, 384, 1 << 21, (1 << 21) + 8, 200, 144, 3 << 18)] == [
        False, True, True, True, False, False, True, True]
    program = leaf_program(cuts(1 << 24, 8))
    assert program.lengths.tolist() == [1 << 21] * 8 and program.adds.tolist() == [0] * 8
    program = leaf_program(np.array([384, 200]))
    assert program.lengths.tolist() == [384, 96, 104]
    assert program.adds.tolist() == [0, 0, 1]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("leaf", range(72, 129, 8))
def test_runs_of_every_leaf_length_give_numpys_bits(monkeypatch, dtype, leaf):
    """Rows of leaf x 2^k elements, one run each (and cut into pieces, runs of half),
    against NumPy's own reduction, bit for bit; asked ahead and not."""
    from cpu_fallback import caches, pairwise_kernel

    rng = np.random.default_rng(leaf)
    length = leaf << 6
    assert is_run(length)
    x = (rng.standard_normal((3, length)) * 10.0 ** rng.uniform(-6, 6, (3, length))).astype(dtype)
    expected = np.add.reduce(x, axis=1)
    layout = RowLayout(np.arange(3) * length, np.arange(3), length, 0, 0)
    for pieces, parallel, cache in ((1, False, 1 << 40), (4, True, 1024)):
        program = leaf_program(cuts(length, pieces))
        assert program.lengths.tolist() == [length // pieces] * pieces
        monkeypatch.setattr(caches, "last_level_bytes", lambda cache=cache: cache)
        assert pairwise_kernel.asks_ahead(layout, x.dtype) == (cache == 1024)
        d = np.full(3, np.nan, dtype)
        pairwise_kernel.run(x, d, layout, program, parallel=parallel)
        assert d.tobytes() == expected.tobytes()
    # the same rows' elements 3 apart (each element followed by two others)
    spread = np.zeros((3, length, 3), dtype)
    spread[:, :, 0] = x
    strided = RowLayout(np.arange(3) * length * 3, np.arange(3), length, 0, 0, 3)
    d = np.full(3, np.nan, dtype)
    pairwise_kernel.run(spread, d, strided, leaf_program(cuts(length, 2)), parallel=True)
    assert d.tobytes() == expected.tobytes()


@pytest.mark.parametrize("n", [1, 129, 1000, 1_000_003, 1 << 21])
def test_the_leaf_program_covers_the_piece_and_ends_with_one_sum(n):
    program = leaf_program(np.array([n]))
    assert program.lengths.sum() == n
    assert all(length <= 128 or is_run(length) for length in program.lengths.tolist())
    depth = np.cumsum(1 - program.adds)  # partial sums held after each block
    assert depth[-1] == 1 and depth.min() >= 1 and depth.max() <= 64


def test_pieces_give_each_thread_several_and_none_is_short():
    assert pieces_per_row(1, 1 << 24, 2) == 8
    assert pieces_per_row(3, 1 << 24, 2) == 4
    assert pieces_per_row(64, 1 << 18, 2) == 1
    assert pieces_per_row(1, 1 << 15, 16) == 2  # halves of 2^14: no shorter pieces
    assert pieces_per_row(1, (1 << 15) - 1, 16) == 1


def _bitwise_cases():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 170_003))
    b = rng.standard_normal((64, 16, 16, 17))
    return [
        ("ab->", a.reshape(-1)[: 2 * 170_003].reshape(2, -1), "ab", "", (0, 1)),
        ("ab-> in runs", a.reshape(-1)[: 1 << 18].reshape(2, -1), "ab", "", (0, 1)),
        ("abcd->a", b, "abcd", "a", (1, 2, 3)),
        ("ab->a reversed", a[::-1], "ab", "a", (1,)),
        ("ab->b Fortran", np.asfortranarray(a.T), "ab", "b", (0,)),
    ]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("pieces", [1, 2, 4, 8])
@pytest.mark.parametrize("case", range(5), ids=[c[0] for c in _bitwise_cases()])
def test_the_sum_has_numpys_bits_however_rows_are_cut(case, pieces, dtype):
    _, x, labels, kept, axes = _bitwise_cases()[case]
    x = x.astype(dtype, order="K")
    problem = _problem(x, labels, kept)
    layout = row_layout(problem, problem.d)
    d = np.full(problem.d.extents, np.nan, dtype)
    PairwiseSumPlan(problem, layout, pieces).execute((x,), d, Scalars(), None)
    np.testing.assert_array_equal(d, np.add.reduce(x, axis=axes))


def _stepped_cases(dtype: str):
    rng = np.random.default_rng(11)
    square = rng.standard_normal((3001, 3001)).astype(dtype)
    batch = rng.standard_normal((3, 1100, 1100)).astype(dtype)
    wide = rng.standard_normal((5, 3 * 4099)).astype(dtype)
    return [
        ("ii->", square.diagonal(), "a", "", (0,)),
        ("bii->b", np.diagonal(batch, axis1=1, axis2=2), "ba", "b", (1,)),
        ("ab->a every third", wide[:, ::3], "ab", "a", (1,)),
    ]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("pieces", [1, 2, 8])
@pytest.mark.parametrize("case", range(3), ids=[c[0] for c in _stepped_cases("d")])
def test_rows_whose_elements_lie_apart_have_numpys_bits_however_cut(case, pieces, dtype):
    """Diagonals and stepped views: each row's elements `step` apart, summed as NumPy
    sums the same view (pairwise at that stride), on one thread or cut into pieces."""
    from cpu_fallback import pairwise_kernel

    _, x, labels, kept, axes = _stepped_cases(dtype)[case]
    problem = _problem(x, labels, kept)
    layout = row_layout(problem, problem.d)
    assert layout.step > 1
    expected = np.add.reduce(x, axis=axes)
    d = np.full(problem.d.extents, np.nan, dtype)
    PairwiseSumPlan(problem, layout, pieces).execute((x,), d, Scalars(), None)
    np.testing.assert_array_equal(d, expected)
    d[...] = np.nan
    pairwise_kernel.run(x, d, layout, leaf_program(cuts(layout.length, pieces)),
                        parallel=False)
    np.testing.assert_array_equal(d, expected)


def test_the_one_thread_kernel_has_numpys_bits_too():
    from cpu_fallback import pairwise_kernel

    x = np.random.default_rng(3).standard_normal((5, 40_001)).astype("float32")
    problem = _problem(x, "ab", "a")
    d = np.empty(5, "float32")
    layout = row_layout(problem, problem.d)
    pairwise_kernel.run(x, d, layout, leaf_program(cuts(layout.length, 2)), parallel=False)
    np.testing.assert_array_equal(d, x.sum(axis=1))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("step", [1, 3])
def test_a_row_of_any_length_has_numpys_bits(dtype, step):
    """Rows of every length from 2 to 299 and longer ones around powers of two (blocks of
    128 and shorter, with and without a tail past the multiple of 8; contiguous and
    with elements 3 apart), each summed alone, have NumPy's bits. The values span
    sixteen decades, so any other order of additions shows."""
    from cpu_fallback import pairwise_kernel

    rng = np.random.default_rng(5)
    lengths = [*range(2, 300), 383, 512, 520, 1000, 1024, 1031, 2048, 4093, 4096, 8200,
               16384, 40_001]
    for n in lengths:
        x = (rng.standard_normal(n * step) * 10.0 ** rng.uniform(-8, 8, n * step)).astype(dtype)
        row = x[::step]
        problem = _problem(row, "a", "")
        layout = row_layout(problem, problem.d)
        d = np.full((), np.nan, dtype)
        pairwise_kernel.run(row, d, layout, leaf_program(cuts(n, 1)), parallel=False)
        assert d.tobytes() == np.add.reduce(row).tobytes(), n


def test_a_strided_output_alpha_beta_and_an_addend(rng):
    x = rng.standard_normal((8, 50_000))
    problem = _problem(x, "ab", "a", d=np.empty((8, 3))[:, 1])
    [plan] = pairwise_sum_plans(problem) or [PairwiseSumPlan(
        problem, row_layout(problem, problem.d), 2)]
    base = np.zeros((8, 3))
    plan.execute((x,), base[:, 1], Scalars(), None)
    np.testing.assert_array_equal(base[:, 1], x.sum(axis=1))
    assert not base[:, 0].any() and not base[:, 2].any()
    c = rng.standard_normal(8)
    out = np.empty((8, 3))[:, 1]
    plan.execute((x,), out, Scalars(2.0, -3.0), c)
    np.testing.assert_allclose(out, 2 * x.sum(axis=1) - 3 * c, rtol=1e-13, atol=1e-12)
    before = out.copy()
    plan.execute((x,), out, Scalars(1.0, 1.0), out)  # the addend is the output itself
    np.testing.assert_allclose(out, before + x.sum(axis=1), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize(("dtype", "out_dtype", "ops"), [
    ("int64", "int64", {}), ("complex128", "complex128", {}), ("float32", "float64", {}),
    ("float64", "float64", {"op_a": UnaryOp.ABS}),
    ("float64", "float64", {"op_reduce": ReduceOp.MAX}),
])
def test_only_float_sums_into_their_own_dtype_get_the_plan(monkeypatch, dtype, out_dtype, ops):
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    x = np.ones((4, 1 << 16), dtype)  # 1 MiB or more in every dtype
    problem = _problem(x, "ab", "a", d=np.empty(4, out_dtype), **ops)
    assert pairwise_sum_plans(problem) == ()
    assert len(pairwise_sum_plans(_problem(np.ones(x.shape), "ab", "a"))) == 1


def test_small_sums_and_one_core_get_no_plan(monkeypatch):
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    assert pairwise_sum_plans(_problem(np.ones((4, (1 << 15) - 1)), "ab", "a")) == ()
    assert len(pairwise_sum_plans(_problem(np.ones((4, 1 << 15)), "ab", "a"))) == 1  # 1 MiB
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 1)
    assert pairwise_sum_plans(_problem(np.ones((4, 1 << 15)), "ab", "a")) == ()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(300, 300), (64, 64), (3000, 30), (2, 4096)])
def test_middling_row_sums_run_on_the_calling_thread_with_numpys_bits(rng, shape, dtype):
    """Several contiguous rows, MIN_ONE_THREAD elements up to MIN_BYTES: the kernel on
    the calling thread, chosen without timing, warm and cold calls, alpha and beta too,
    bit for bit NumPy's reduction."""
    a = rng.standard_normal(shape).astype(dtype)
    plan = gpu_tc.prepare("ij->i", a)
    assert plan.route == "reduce:pairwise", plan.reason
    assert "compiled loops on one thread in NumPy's pairwise order" in plan.reason
    expected = np.add.reduce(a, axis=1)
    for _ in range(3):
        assert np.array_equal(gpu_tc.einsum("ij->i", a), expected)
    c = rng.standard_normal(shape[0]).astype(dtype)
    got = gpu_tc.reduce("ij->i", a, alpha=2.0, beta=0.5, c=c)
    np.testing.assert_allclose(got, 2.0 * expected + 0.5 * c, rtol=1e-6)


def test_the_calling_thread_takes_only_middling_sums_of_several_contiguous_rows():
    def plan(shape, labels="ab", kept="a", dtype=np.float64, view=lambda x: x):
        return one_thread_plan(_problem(view(np.ones(shape, dtype)), labels, kept))
    assert plan((MIN_ONE_THREAD // 64, 64)) is not None
    assert plan((MIN_ONE_THREAD // 64 - 1, 64)) is None  # tiny: the ufunc's call is cheaper
    assert plan((MIN_BYTES // 8 // 64, 64)) is None  # large: timed against the threads
    assert plan((1, 8192), "ab", "a") is None  # one row: the ufunc has no cost per row
    assert plan((64, 128), "ab", "b") is None  # columns: rows not contiguous
    assert plan((64, 128), dtype=np.int64) is None  # integers: not pairwise
    assert plan((128, 128), view=lambda x: x[:, ::2]) is None  # stepped rows


def test_a_long_diagonal_gets_the_plan_from_2048_elements(monkeypatch):
    """Elements far apart cost a cache line each: a diagonal is offered the threads from
    2048 elements (16 KiB of values), cut into pieces of at least 1024."""
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    short = np.ones((2047, 2047)).diagonal()
    assert pairwise_sum_plans(_problem(short, "a", "")) == ()
    (plan,) = pairwise_sum_plans(_problem(np.ones((4096, 4096)).diagonal(), "a", ""))
    assert plan.reason.endswith("1 stretch(es) of 4096 elements 4097 apart, each cut into 4 pieces")
    batch = np.diagonal(np.ones((64, 256, 256)), axis1=1, axis2=2)  # 'bii->b'
    assert len(pairwise_sum_plans(_problem(batch, "ba", "b"))) == 1


@pytest.mark.parametrize(("shape", "labels", "kept"), [
    ((64, 64, 64, 64), "abcd", "ad"),  # rows (a, d): b and c summed, 64 apart
    ((4096, 4096), "ab", "b"),         # column sums: rows one element apart
])
def test_interleaved_stepped_rows_get_no_plan(monkeypatch, shape, labels, kept):
    """Rows whose elements lie apart but whose neighbours share their cache lines: a
    row at a time would read every line once per row (a 64^4 'abcd->ad' ran at 5 GB/s
    so, 40 by the threaded loops)."""
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    problem = _problem(np.ones(shape), labels, kept)
    assert row_layout(problem, problem.d).step > 1
    assert pairwise_sum_plans(problem) == ()


def test_einsum_times_the_route_against_the_ufunc_and_keeps_numpys_bits(monkeypatch, rng):
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    a = rng.standard_normal((512, 2048))
    plan = gpu_tc.prepare("ab->", a)

    def call() -> None:
        assert plan.execute(a) == a.sum()

    call_until_reason(plan, "measured:", call, 400)
    assert "measured:" in plan.reason and "reduce:threaded-pairwise " in plan.reason


def test_a_trace_times_the_threads_too_and_keeps_numpys_bits(monkeypatch, rng):
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    a = rng.standard_normal((4096, 4096))
    plan = gpu_tc.prepare("ii->", a)

    def call() -> None:
        assert plan.execute(a) == np.trace(a)

    call_until_reason(plan, "measured:", call, 400)
    assert "measured:" in plan.reason and "reduce:threaded-pairwise " in plan.reason


def _fresh_cases():
    rng = np.random.default_rng(13)
    square = rng.standard_normal((2100, 2100))
    return [
        ("ab->", rng.standard_normal((700, 1500)), "ab", "", (0, 1)),
        ("abcd->a", rng.standard_normal((16, 8, 8, 1024)).astype("float32"), "abcd", "a",
         (1, 2, 3)),
        ("ii->", square.diagonal(), "a", "", (0,)),
        ("bii->b", np.diagonal(square.reshape(3, 700, 2100)[:, :, :700], axis1=1, axis2=2),
         "ba", "b", (1,)),
        # 40,000 sums: a result of 312 KiB, from the host pool
        ("ab->a long", rng.standard_normal((40_000, 32)), "ab", "a", (1,)),
    ]


@pytest.mark.parametrize("case", range(5), ids=[c[0] for c in _fresh_cases()])
def test_the_fresh_call_returns_a_new_sum_with_numpys_bits(monkeypatch, case):
    """A warm call into a new result runs the kernel straight into a new C-ordered array
    of D's extents and dtype (0-d for a total): NumPy's bits, a new array each call."""
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    _, x, labels, kept, axes = _fresh_cases()[case]
    (plan,) = pairwise_sum_plans(_problem(x, labels, kept))
    first, second = plan.fresh(x), plan.fresh(x)
    expected = np.add.reduce(x, axis=axes)
    for result in (first, second):
        assert type(result) is np.ndarray and result.dtype == x.dtype
        assert result.shape == expected.shape and result.flags.c_contiguous
        assert result.flags.writeable and result.tobytes() == expected.tobytes()
    assert not np.shares_memory(first, second)
    # a result of 256 KiB or more is a view of a pooled buffer, a smaller one NumPy's own
    assert first.flags.owndata == (first.nbytes < (256 << 10))


def test_no_fresh_call_where_d_is_not_c_ordered(rng):
    """A D with gaps or in another axis order is written by execute() only (the warm
    path then allocates D as laid out and runs it)."""
    x = rng.standard_normal((8, 4, 50_000))
    for source, labels, kept, d in [(x[:, 0], "ab", "a", np.full((8, 3), np.nan)[:, 1]),
                                    (x, "abc", "ab", np.full((4, 8), np.nan).T)]:
        problem = _problem(source, labels, kept, d=d)
        plan = PairwiseSumPlan(problem, row_layout(problem, problem.d), 2)
        assert plan.fresh is None
        plan.execute((source,), d, Scalars(), None)
        np.testing.assert_array_equal(d, np.add.reduce(source, axis=-1))


def test_warm_einsum_calls_of_the_route_keep_numpys_bits(monkeypatch, rng):
    """Once measured, warm einsum calls run the chosen variant's fresh call: a trace
    gives NumPy's scalar, a partial sum a new array each call."""
    monkeypatch.setattr(pairwise_sum.os, "cpu_count", lambda: 2)
    fresh_calls = count_fresh_calls(monkeypatch, PairwiseSumPlan, lambda plan, a: a.shape)
    gpu_tc.plan_cache().clear()
    square = rng.standard_normal((4096, 4096))
    block = rng.standard_normal((64, 64, 256))
    results = []
    for _ in range(40):
        total = gpu_tc.einsum("ii->", square)
        assert type(total) is np.float64 and total == np.trace(square)
        results.append(gpu_tc.einsum("abc->a", block))
        np.testing.assert_array_equal(results[-1], block.sum(axis=(1, 2)))
    assert not np.shares_memory(results[-1], results[-2])
    # each plan's lead-in call of the route at least ran its fresh call
    assert (4096,) in fresh_calls and (64, 64, 256) in fresh_calls


def test_the_compiled_sums_are_built():
    """gpu_tc's install builds cpu_fallback._pairwise and _sums (setup.py); without them
    long sums run as NumPy's one-thread reductions."""
    for extension in ("_pairwise", "_sums"):
        assert kernels.built(extension), f"cpu_fallback.{extension} was not built"


def test_without_the_compiled_sums_long_sums_warn_once_and_use_numpy():
    """An install that could not build the extensions (no C compiler): one warning, then
    the ufunc reduction, with NumPy's result. Two CPUs are claimed: on one, no
    threaded plan is offered, so the kernel is never wanted."""
    code = (
        "import os, sys, warnings, numpy as np\n"
        "os.cpu_count = lambda: 2\n"
        "import gpu_tc\n"
        "sys.modules['cpu_fallback._pairwise'] = sys.modules['cpu_fallback._sums'] = None\n"
        "a = np.random.default_rng(0).standard_normal((512, 2048))\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    plan = gpu_tc.prepare('ab->', a)\n"
        "    results = [plan.execute(a) for _ in range(3)]\n"
        "    gpu_tc.einsum('ab->a', a)\n"
        "assert all(r == a.sum() for r in results), results\n"
        "assert 'pairwise' not in plan.reason, plan.reason\n"
        "print(len(caught), caught[0].message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("1 the compiled kernel cpu_fallback._pairwise"), out.stdout
    assert "long sums run as NumPy reductions" in out.stdout


def _refusal(layout: RowLayout, program: LeafProgram, message: str) -> None:
    from cpu_fallback import pairwise_kernel

    with pytest.raises(ValueError, match=message):
        pairwise_kernel.run(np.arange(1000.0), np.empty(()), layout, program, parallel=False)


def test_the_kernel_refuses_a_program_that_does_not_fit():
    """The kernel checks rows, pieces and the stack against its buffers before it sums."""
    layout = RowLayout(np.zeros(1, np.int64), np.zeros(1, np.int64), 1000, 0, 0)
    program = leaf_program(cuts(1000, 4))
    shifted = RowLayout(np.ones(1, np.int64), layout.row_dst, 1000, 0, 0)
    _refusal(shifted, program, "outside the buffers")
    longer = LeafProgram(program.offsets, program.lengths + 1, program.adds, program.entries)
    _refusal(layout, longer, "outside the buffers")
    deeper = LeafProgram(program.offsets, program.lengths, program.adds + 70, program.entries)
    _refusal(layout, deeper, "overflows its stack")
    three = LeafProgram(program.offsets[:3], program.lengths, program.adds, program.entries[:4])
    _refusal(layout, three, "power-of-two")
    # 200 is no run (NumPy halves it into 96 + 104); a run of 4 blocks holds 2 partial
    # sums above the 62, and like the blocks one by one the kernel keeps one slot spare:
    # refused
    one = np.zeros(1, np.int64)
    not_a_run = LeafProgram(one, np.array([200]), one, np.array([0, 1]))
    _refusal(layout, not_a_run, "not a run")
    high = LeafProgram(one, np.array([1] * 62 + [512]), np.zeros(63, np.int64),
                       np.array([0, 63]))
    _refusal(layout, high, "overflows its stack")
    # two runs of 2^62 elements, whose sum wraps a 64-bit span; an offset whose product
    # with the step wraps
    huge = LeafProgram(one, np.array([1 << 62, 1 << 62]), np.zeros(2, np.int64),
                       np.array([0, 2]))
    _refusal(layout, huge, "outside the buffers")
    far = LeafProgram(np.array([1 << 62]), np.array([10]), one, np.array([0, 1]))
    _refusal(RowLayout(layout.row_src, layout.row_dst, 1000, 0, 0, step=4), far,
             "outside the buffers")
    # elements 2 apart: 1000 of them reach past a buffer of 1000
    _refusal(RowLayout(layout.row_src, layout.row_dst, 1000, 0, 0, step=2), program,
             "outside the buffers")
    _refusal(RowLayout(layout.row_src, layout.row_dst, 10, 0, 0, step=0),
             leaf_program(cuts(10, 1)), "positive step")


def test_the_kernel_sums_views_where_they_lie():
    """The kernel takes each array as it is: a large matrix's diagonal (a trace), rows
    whose kept axis runs backwards (element 0 above the lowest address) and a strided
    destination inside a larger array, which keeps its other elements."""
    from cpu_fallback import pairwise_kernel

    rng = np.random.default_rng(8)
    m = rng.standard_normal((3000, 3000))
    diagonal = m.diagonal()
    trace = _problem(diagonal, "a", "")
    d = np.full((), np.nan)
    pairwise_kernel.run(diagonal, d, row_layout(trace, trace.d), leaf_program(cuts(3000, 4)),
                        parallel=True)
    assert d.tobytes() == np.add.reduce(diagonal).tobytes()
    x = rng.standard_normal((6, 5000)).astype("float32")[::-1]
    whole = np.zeros((6, 3), "float32")
    out = whole[::-1, 1]
    rows = _problem(x, "ab", "a", d=out)
    layout = row_layout(rows, rows.d)
    assert layout.src_base == 5 * 5000 and layout.dst_base == 5 * 3
    pairwise_kernel.run(x, out, layout, leaf_program(cuts(5000, 2)), parallel=False)
    assert out.tobytes() == np.add.reduce(x, axis=1).tobytes()
    assert not whole[:, [0, 2]].any()


def test_the_kernel_refuses_an_array_that_is_not_its_layouts():
    """Each array's own view bounds what the kernel touches: a view shorter than the
    layout's rows, an element size or a start (a reversed view) other than the
    layout's, and a read-only destination are refused before any element is read."""
    from cpu_fallback import pairwise_kernel

    x = np.arange(1000.0)
    layout = RowLayout(np.zeros(1, np.int64), np.zeros(1, np.int64), 1000, 0, 0)
    program = leaf_program(cuts(1000, 2))
    d = np.full((), np.nan)
    with pytest.raises(ValueError, match="outside the buffers"):
        pairwise_kernel.run(x[:500], d, layout, program, parallel=False)
    with pytest.raises(ValueError, match="differ from the layout"):
        pairwise_kernel.run(x.astype("float32"), d, layout, program, parallel=False)
    with pytest.raises(ValueError, match="differ from the layout"):
        pairwise_kernel.run(x[::-1], d, layout, program, parallel=False)
    frozen = np.zeros(())
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pairwise_kernel.run(x, frozen, layout, program, parallel=False)
    assert np.isnan(d) and frozen == 0
    pairwise_kernel.run(x, d, layout, program, parallel=False)
    assert d == x.sum()


def test_a_forked_child_sums_on_its_own_thread_with_the_same_bits():
    """OpenMP's threads in a forked child would hang it (libgomp is not fork-safe): the
    child runs the one-thread kernel instead."""
    code = (
        "import os, numpy as np\n"
        "from cpu_fallback import pairwise_kernel\n"
        "from cpu_fallback.sum_layout import RowLayout, cuts, leaf_program\n"
        "x = np.random.default_rng(0).standard_normal(1_000_000)\n"
        "layout = RowLayout(np.zeros(1, np.int64), np.zeros(1, np.int64), 1_000_000,"
        " 0, 0)\n"
        "program = leaf_program(cuts(1_000_000, 4))\n"
        "d = np.empty(())\n"
        "pairwise_kernel.run(x, d, layout, program, parallel=True)\n"
        "call = pairwise_kernel.bound(layout, program, x.dtype, parallel=True)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    e, f = np.empty(()), np.empty(())\n"
        "    pairwise_kernel.run(x, e, layout, program, parallel=True)\n"
        "    call(x, f)  # bound in the parent\n"
        "    os._exit(0 if e == x.sum() == f else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status), d == x.sum())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split() == ["0", "True"]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("parallel", [False, True])
def test_diagonals_of_a_stack_have_numpys_bits(dtype, parallel):
    """'bii->b' over 257 matrices of 3 to 130 rows: short rows whose elements each have a
    line of their own, so the kernel asks for the next row's lines ahead (and, at 130,
    rows past one block, which it does not); each diagonal's sum has NumPy's bits."""
    from cpu_fallback import pairwise_kernel

    rng = np.random.default_rng(11)
    for n in (3, 17, 64, 129, 130):
        b = (rng.standard_normal((257, n, n)) * 10.0 ** rng.uniform(-8, 8, (257, n, n))
             ).astype(dtype)
        diagonals = np.diagonal(b, axis1=1, axis2=2)
        problem = _problem(diagonals, "ba", "b")
        layout = row_layout(problem, problem.d)
        d = np.full(257, np.nan, dtype)
        pairwise_kernel.run(diagonals, d, layout, leaf_program(cuts(layout.length, 1)),
                            parallel=parallel)
        assert d.tobytes() == np.add.reduce(diagonals, axis=1).tobytes(), n
