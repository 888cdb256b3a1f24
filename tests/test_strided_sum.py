"""Sums of strided views by compiled loops (cpu_fallback.strided_sum): the loop nest, and
agreement with the reference kernel on traces, partial traces, negative strides,
windows, scalars and dtypes, on one thread and threaded; the routes compete with NumPy's
by timing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import count_fresh_calls
from numpy.lib.stride_tricks import as_strided

import gpu_tc
from cpu_fallback import sum_kernel, workers
from cpu_fallback.measure import RUN
from cpu_fallback.reduction import CpuReductionPlan
from cpu_fallback.strided_sum import (
    MIN_ELEMENTS,
    KernelSumPlan,
    kernel_plans,
    strided_sum_plans,
)
from cpu_fallback.sum_layout import sum_layout
from gpu_tc import reference
from gpu_tc.backend import Scalars
from gpu_tc.options import ReduceOp, UnaryOp
from gpu_tc.problem import ReductionProblem, TensorSpec, contiguous_spec


def _spec(labels: str, extents, strides, dtype: str = "d") -> TensorSpec:
    return TensorSpec(labels, tuple(extents), tuple(strides), dtype)


def _out(a: TensorSpec, labels: str) -> TensorSpec:
    return contiguous_spec(labels, [a.extent(x) for x in labels], a.dtype)


def test_the_inner_loop_takes_the_smallest_stride():
    # 'ijkj->ik' of a 64^4 array: the view (i, k, j) has strides (64^3, 64, 64^2 + 1)
    a = _spec("ikj", (64, 64, 64), (64**3, 64, 64**2 + 1))
    layout = sum_layout(ReductionProblem(a, _out(a, "ik")), _out(a, "ik"))
    assert layout.inner == (64, 64, 1) and layout.inner_kept
    assert layout.kept_src.tolist() == [i * 64**3 for i in range(64)]
    assert layout.kept_dst.tolist() == [i * 64 for i in range(64)]
    assert layout.summed_src.tolist() == [j * (64**2 + 1) for j in range(64)]
    # 'bii->b': the diagonal is summed in a register
    b = _spec("bi", (4096, 64), (4096, 65))
    layout = sum_layout(ReductionProblem(b, _out(b, "b")), _out(b, "b"))
    assert layout.inner == (64, 65, 0) and not layout.inner_kept


def test_a_contiguous_summed_inner_axis_is_left_to_numpys_pairwise_sum():
    a = _spec("ab", (512, 512), (512, 1))
    assert sum_layout(ReductionProblem(a, _out(a, "a")), _out(a, "a")) is None
    assert sum_layout(ReductionProblem(a, _out(a, "")), _out(a, "")) is None
    kept = sum_layout(ReductionProblem(a, _out(a, "b")), _out(a, "b"))  # rows added up
    assert kept is not None and kept.inner == (512, 1, 1)


def test_only_large_identity_sums_of_summable_dtypes_get_the_plans():
    a = _spec("ikj", (64, 64, 64), (64**3, 64, 64**2 + 1))
    plans = kernel_plans(ReductionProblem(a, _out(a, "ik")))
    assert [plan.route for plan in plans] == [
        "reduce:loops", "reduce:threaded-loops", "reduce:column-loops",
        "reduce:threaded-column-loops", "reduce:threaded-column-loops-by-fours"]
    assert kernel_plans(ReductionProblem(a, _out(a, "ik"), op_reduce=ReduceOp.MAX)) == ()
    assert kernel_plans(ReductionProblem(a, _out(a, "ik"), op_a=UnaryOp.ABS)) == ()
    booleans = _spec("ikj", (64, 64, 64), (64**3, 64, 64**2 + 1), "?")
    assert kernel_plans(ReductionProblem(booleans, _out(booleans, "ik"))) == ()
    small = _spec("ij", (8, 8), (1, 8))
    assert small.size < MIN_ELEMENTS
    assert kernel_plans(ReductionProblem(small, _out(small, "j"))) == ()


def test_a_single_outer_index_shares_the_middle_rows_among_threads(rng, monkeypatch):
    """'abcd->d' of a C-ordered 64^4 array: one output row, every other index summed.
    Threaded, each thread sums its share of the rows into its own copy of D (counted as
    temporary bytes), the copies then added: the sum, to rounding; with a budget under
    the copies, or one thread, the loops run on one thread only."""
    monkeypatch.setattr(sum_kernel, "threads", lambda: 2)
    a = _spec("abcd", (64,) * 4, (64**3, 64**2, 64, 1))
    problem = ReductionProblem(a, _out(a, "d"))
    plans = kernel_plans(problem)
    assert [plan.route for plan in plans] == ["reduce:loops", "reduce:threaded-loops"]
    assert "one thread" in plans[0].reason and plans[0].temporary_bytes == 0
    assert "sharing the middle indices" in plans[1].reason
    assert plans[1].temporary_bytes == 2 * 64 * 8
    x = rng.standard_normal((64,) * 4)
    for plan in plans:
        d = np.full(64, 7.0)
        plan.execute((x,), d, Scalars(), None)
        np.testing.assert_allclose(d, x.sum(axis=(0, 1, 2)), rtol=1e-12, atol=1e-10)
    assert [p.route for p in kernel_plans(problem, budget=2 * 64 * 8 - 1)] == ["reduce:loops"]
    monkeypatch.setattr(sum_kernel, "threads", lambda: 1)
    assert [p.route for p in kernel_plans(problem)] == ["reduce:loops"]


@pytest.mark.parametrize("step", [1, 2])
@pytest.mark.parametrize("dtype", ["float64", "int8", "complex64"])
def test_shared_rows_split_in_order_and_add_the_copies_in_order(dtype, step, monkeypatch):
    """Three threads share 1001 rows of 'abc->c' (rows 0-332, 333-666, 667-1000): the
    result is the first part's sum plus the second's plus the third's, bit for bit
    (int8 wraps as NumPy's sums do; each part's rows added in order, four at a time
    and then the remainder where D is contiguous), into D at a stride of 1 or 2; the
    elements between are left alone."""
    monkeypatch.setattr(sum_kernel, "threads", lambda: 3)
    rng = np.random.default_rng(5)  # rounding in every sum: another order, other bits
    values = (rng.standard_normal(7 * 143 * 40) * 1e3 if dtype != "int8"
              else np.arange(7 * 143 * 40) % 11 * 37 - 185)
    x = values.astype(dtype).reshape(7, 143, 40)
    a = _spec("abc", x.shape, (143 * 40, 40, 1), x.dtype.char)
    problem = ReductionProblem(a, _spec("c", (40,), (step,), x.dtype.char))
    plan = kernel_plans(problem)[1]
    assert plan.temporary_bytes == 3 * (39 * step + 1) * x.itemsize  # copies of D's span
    full = np.full(80, 9, dtype)
    plan.execute((x,), full[:40 * step:step], Scalars(), None)
    rows = x.reshape(1001, 40)
    parts = [rows[:333].sum(axis=0, dtype=dtype), rows[333:667].sum(axis=0, dtype=dtype),
             rows[667:].sum(axis=0, dtype=dtype)]
    expected = (np.zeros(40, dtype) + parts[0] + parts[1] + parts[2]).astype(dtype)
    np.testing.assert_array_equal(full[:40 * step:step], expected)
    untouched = np.ones(80, bool)
    untouched[:40 * step:step] = False
    np.testing.assert_array_equal(full[untouched], 9)
    one_thread = np.full(80, 9, dtype)  # the rows in order, as NumPy adds them
    kernel_plans(problem)[0].execute((x,), one_thread[:40 * step:step], Scalars(), None)
    np.testing.assert_array_equal(one_thread[:40 * step:step], rows.sum(axis=0, dtype=dtype))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "complex64"])
def test_strided_rows_add_in_order_four_at_a_time(dtype, threads, monkeypatch):
    """'abc->ac' whose rows (c) lie two elements apart: 143 rows (b) per output row, four
    added a pass and then the remaining three, give the rows' sum in order bit for bit
    (int8 wrapping as NumPy's sums do), on one thread and with the outer index (a)
    shared among threads."""
    monkeypatch.setattr(sum_kernel, "threads", lambda: threads)
    rng = np.random.default_rng(9)  # rounding in every sum: another order, other bits
    shape = (7, 143, 80)
    values = (rng.standard_normal(shape) * 1e3 if dtype != "int8"
              else np.arange(np.prod(shape)).reshape(shape) % 11 * 37 - 185)
    x = values.astype(dtype)[:, :, ::2]
    item = x.itemsize
    a = _spec("abc", x.shape, tuple(t // item for t in x.strides), x.dtype.char)
    problem = ReductionProblem(a, _out(a, "ac"))
    route = "reduce:threaded-loops" if threads > 1 else "reduce:loops"
    plan = {p.route: p for p in kernel_plans(problem)}[route]
    d = np.full((7, 40), 9, dtype)
    plan.execute((x,), d, Scalars(), None)
    expected = np.zeros((7, 40), dtype)
    for b in range(143):  # the rows in order, each sum rounded to the dtype
        expected = (expected + x[:, b, :]).astype(dtype)
    np.testing.assert_array_equal(d, expected)


@pytest.mark.parametrize(("dtype", "total"), [
    ("float64", "float64"), ("float32", "float64"), ("int8", "int64"),
    ("complex64", "complex128")])
def test_shared_rows_of_a_summed_inner_axis_add_in_order_and_scale(dtype, total, monkeypatch):
    """'abc->' of a view whose inner axis c is strided (summed in a register): three
    threads each sum their rows, every element in order in the accumulating type, and
    the three sums are added in order, bit for bit; widened sums (float32 into float64,
    int8 into int64, complex64 into complex128) too; alpha and beta apply after."""
    monkeypatch.setattr(sum_kernel, "threads", lambda: 3)
    rng = np.random.default_rng(6)
    base = rng.standard_normal((9, 41, 120)) * 100
    if dtype == "int8":
        base = rng.integers(-128, 128, size=(9, 41, 120))
    x = base.astype(dtype)[:, :, ::2]  # rows of 60 elements two apart
    a = _spec("abc", x.shape, tuple(s // x.itemsize for s in x.strides), x.dtype.char)
    problem = ReductionProblem(a, contiguous_spec("", (), np.dtype(total).char))
    plan = kernel_plans(problem)[1]
    assert "sharing the middle indices" in plan.reason
    d = np.full((), 7, total)
    plan.execute((x,), d, Scalars(), None)
    flat = x.reshape(369, 60).astype(total)  # rows 0-122, 123-245, 246-368
    parts = [np.add.accumulate(flat[lo:hi].reshape(-1))[-1]
             for lo, hi in ((0, 123), (123, 246), (246, 369))]
    np.testing.assert_array_equal(d, ((np.zeros((), total) + parts[0]) + parts[1]) + parts[2])
    plan.execute((x,), d, Scalars(2, -3), np.full((), 4, total))
    np.testing.assert_allclose(d, 2 * flat.sum() - 12, rtol=1e-5)


@pytest.mark.parametrize(("dtype", "route"), [
    ("float32", "reduce:loops"), ("float64", "reduce:loops"), ("complex64", "reduce:loops"),
    ("complex128", "reduce:loops"), ("int64", "reduce:loops"), ("int8", "reduce:loops"),
    ("uint32", "reduce:loops"), ("float64", "reduce:threaded-loops"),
    ("complex64", "reduce:threaded-loops"), ("int8", "reduce:threaded-loops"),
    ("float64", "reduce:column-loops"), ("int8", "reduce:column-loops"),
    ("complex64", "reduce:threaded-column-loops"), ("float32", "reduce:threaded-column-loops"),
    ("float64", "reduce:threaded-column-loops-by-fours"),
    ("int8", "reduce:threaded-column-loops-by-fours"),
    ("complex128", "reduce:threaded-column-loops-by-fours"),
    ("float32", "reduce:einsum"), ("complex128", "reduce:einsum"), ("int8", "reduce:einsum")])
@pytest.mark.parametrize("view", ["plain", "negative", "window"])
@pytest.mark.parametrize("kept", ["ik", "ki", "", "k"])
def test_the_loops_sum_as_the_reference_does(rng, dtype, route, view, kept):
    """The diagonal view (i, k, j) of 'ijkj' (strides 64^3, 64, 64^2 + 1, or their
    negatives, or a window's), summed over j (and i where not kept) into any layout:
    inner rows written contiguously ('ik', 'k'), at a stride ('ki'), or summed (''); the
    column loops too where the inner axis is kept."""
    def values(shape):  # integers small and positive: their sums are exact everywhere
        if np.dtype(dtype).kind in "iu":
            return rng.integers(0, 4, size=shape).astype(dtype)
        return (rng.standard_normal(shape) * 4).astype(dtype)

    a = values((32, 64, 16, 64))
    if view == "negative":
        a = a[::-1, :, ::-1, :]
    elif view == "window":
        a = np.zeros((64, 64, 32, 64), dtype)[::2, :, ::2, :]
        a[...] = values(a.shape)
    s = a.strides
    diagonal = as_strided(a, (32, 16, 64), (s[0], s[2], s[1] + s[3]))
    spec = _spec("ikj", diagonal.shape, tuple(x // a.itemsize for x in diagonal.strides),
                 np.dtype(dtype).char)
    problem = ReductionProblem(spec, _out(spec, kept))
    plans = {plan.route: plan for plan in strided_sum_plans(problem)}
    if "threaded" in route and kept in ("", "k"):
        # i is summed: one outer index; the middle rows are shared instead, but not by
        # the column loops, nor on one thread
        if "column" in route or sum_kernel.threads() < 2:
            assert route not in plans
            return
        assert "sharing the middle indices" in plans[route].reason
    if "column" in route and kept == "":
        assert route not in plans  # the inner axis is summed: no columns to keep
        return
    plan = plans[route]
    d = np.full([spec.extent(x) for x in kept], 7, dtype)
    plan.execute((diagonal,), d, Scalars(), None)
    expected = reference.einsum(f"ikj->{kept}", diagonal)
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(d, expected.astype(dtype))
    else:
        tolerance = 1e-5 if dtype in ("float32", "complex64") else 1e-12
        np.testing.assert_allclose(d, expected, rtol=tolerance,
                                   atol=tolerance * float(np.abs(diagonal).sum()))


def test_sums_four_a_pass_add_in_order_with_a_remainder(rng):
    """The register sums that add four elements a pass (a summed inner axis; the
    columns by fours) keep the order of one at a time: 7 terms (four, then three) give
    the bits of a sum left to right."""
    x = rng.standard_normal((64, 7, 64, 7))
    s = x.strides
    view = as_strided(x, (64, 64, 7), (s[0], s[2], s[1] + s[3]))  # 'ijkj' -> (i, k, j)
    spec = _spec("ikj", view.shape, tuple(v // 8 for v in view.strides))
    in_order = np.add.accumulate(view, axis=2)[:, :, -1]
    for plan in kernel_plans(ReductionProblem(spec, _out(spec, "ik"))):
        d = np.full((64, 64), np.nan)
        plan.execute((view,), d, Scalars(), None)
        assert d.tobytes() == in_order.tobytes(), plan.route
    y = rng.standard_normal((4096, 7, 7))
    diagonal = np.einsum("bii->bi", y)  # a summed inner axis 8 elements apart
    spec = _spec("bi", diagonal.shape, tuple(v // 8 for v in diagonal.strides))
    in_order = np.add.accumulate(diagonal, axis=1)[:, -1]
    plans = kernel_plans(ReductionProblem(spec, _out(spec, "b")))
    assert {plan.route for plan in plans} == {"reduce:loops", "reduce:threaded-loops"}
    for plan in plans:
        d = np.full(4096, np.nan)
        plan.execute((diagonal,), d, Scalars(), None)
        assert d.tobytes() == in_order.tobytes(), plan.route


def test_alpha_beta_and_an_addend(rng):
    a = rng.standard_normal((32, 64, 32, 64))
    problem = gpu_tc.prepare("ijkj->ik", a)._plan.program.final
    view = as_strided(a, problem.a.extents, tuple(s * 8 for s in problem.a.strides))
    for plan in strided_sum_plans(problem):
        c = rng.standard_normal((32, 32))
        d = np.empty((32, 32))
        plan.execute((view,), d, Scalars(2.0, -3.0), c)
        np.testing.assert_allclose(d, 2 * np.einsum("ijkj->ik", a) - 3 * c,
                                   rtol=1e-12, atol=1e-12)
        before = c.copy()
        plan.execute((view,), c, Scalars(1.0, 1.0), c)  # the addend is the output itself
        np.testing.assert_allclose(c, before + np.einsum("ijkj->ik", a),
                                   rtol=1e-12, atol=1e-12)


def _partial_trace(rng, d_strides=None):
    """'ijkj->ik' of a 32 x 64 x 32 x 64 array: the array, its diagonal view (i, k, j)
    and the problem of summing j into D ("ik", C-ordered unless ``d_strides``)."""
    a = rng.standard_normal((32, 64, 32, 64))
    s = a.strides
    view = as_strided(a, (32, 32, 64), (s[0], s[2], s[1] + s[3]))
    spec = _spec("ikj", view.shape, tuple(x // 8 for x in view.strides))
    d = _out(spec, "ik") if d_strides is None else _spec("ik", (32, 32), d_strides)
    return a, view, ReductionProblem(spec, d)


def test_the_fresh_call_returns_a_new_sum_with_executes_bits(rng):
    """A warm call into a new result runs the kernel straight into a new C-ordered array
    of D's extents, its arguments gathered at plan time: execute()'s bits, a new array
    each call, for every variant (one thread, threaded, rows or columns)."""
    a, view, problem = _partial_trace(rng)
    plans = kernel_plans(problem)
    assert len(plans) == 5
    for plan in plans:
        d = np.full((32, 32), np.nan)
        plan.execute((view,), d, Scalars(), None)
        np.testing.assert_allclose(d, reference.einsum("ijkj->ik", a), rtol=1e-12, atol=1e-10)
        first, second = plan.fresh(view), plan.fresh(view)
        for result in (first, second):
            assert type(result) is np.ndarray and result.dtype == np.float64
            assert result.shape == (32, 32) and result.flags.c_contiguous
            assert result.tobytes() == d.tobytes(), plan.route
        assert not np.shares_memory(first, second)


def test_no_kernel_fresh_call_where_d_is_not_c_ordered(rng):
    """A D in another axis order is written by execute() only."""
    a, view, problem = _partial_trace(rng, d_strides=(1, 32))
    for plan in kernel_plans(problem):
        assert plan.fresh is None
        d = np.full((32, 32), np.nan).T
        plan.execute((view,), d, Scalars(), None)
        np.testing.assert_allclose(d, reference.einsum("ijkj->ik", a), rtol=1e-12, atol=1e-10)


def test_warm_einsum_calls_run_the_kernels_fresh_call(monkeypatch, rng):
    """gpu_tc.einsum of a partial trace into a new result runs its kernel variants through
    their fresh calls (the measurement's lead-in calls at least), a right sum in a new
    array each call."""
    fresh_calls = count_fresh_calls(monkeypatch, KernelSumPlan, lambda plan, a: plan.route)
    gpu_tc.plan_cache().clear()
    a, _, _ = _partial_trace(rng)
    expected = reference.einsum("ijkj->ik", a)
    routes = {"reduce:loops", "reduce:threaded-loops", "reduce:column-loops",
              "reduce:threaded-column-loops", "reduce:threaded-column-loops-by-fours"}
    results = []
    for _ in range(14 * RUN):  # seven variants, each led in then timed; more where held
        results.append(gpu_tc.einsum("ijkj->ik", a))
        np.testing.assert_allclose(results[-1], expected, rtol=1e-12, atol=1e-10)
        if routes <= set(fresh_calls):
            break
    assert not np.shares_memory(results[-1], results[-2])
    assert routes <= set(fresh_calls)


def test_einsum_measures_the_seven_routes_and_every_result_is_right(rng):
    """Seven routes of a strided sum; not the pairwise threads: the diagonal j makes rows
    of 64 elements 64^2 + 1 apart, but neighbouring rows (k) interleave."""
    a = rng.standard_normal((64, 64, 64, 64))
    expected = np.einsum("ijkj->ik", a)
    plan = gpu_tc.prepare("ijkj->ik", a)
    for _ in range(7 * RUN):  # each route led in, then timed three times
        np.testing.assert_allclose(plan.execute(a), expected, rtol=1e-12, atol=1e-10)
    assert "measured:" in plan.reason and "pairwise" not in plan.reason
    for route in ("reduce ", "reduce:einsum ", "reduce:loops ", "reduce:threaded-loops ",
                  "reduce:column-loops ", "reduce:threaded-column-loops ",
                  "reduce:threaded-column-loops-by-fours "):
        assert route in plan.reason


@pytest.mark.parametrize(("expr", "split"), [("abcd->ad", "'a'"), ("abcd->d", "'a'")])
def test_numpy_einsums_sum_is_split_over_threads_like_the_ufuncs(
    rng, monkeypatch, expr, split
):
    """64^4 float64 (16 MiB of traffic), as on a 2-core host: cut along the outermost
    label, kept ('ad': each thread writes its own rows) or summed ('d': partial results
    added)."""
    monkeypatch.setattr(workers, "threads", lambda: 2)
    a = rng.standard_normal((64, 64, 64, 64))
    problem = gpu_tc.prepare(expr, a)._plan.program.final
    [plan] = [p for p in strided_sum_plans(problem) if p.route == "reduce:einsum"]
    assert f"split over 2 threads along label {split}" in plan.reason
    d = np.empty(problem.d.extents)
    plan.execute((a,), d, Scalars(), None)
    np.testing.assert_allclose(d, np.einsum(expr, a), rtol=1e-12, atol=1e-10)


def test_a_contiguous_summed_inner_axis_keeps_the_ufuncs_pairwise_sum(rng):
    a = _spec("ab", (512, 512), (512, 1))
    assert strided_sum_plans(ReductionProblem(a, _out(a, "a"))) == ()
    assert strided_sum_plans(ReductionProblem(a, _out(a, ""))) == ()


def test_numpy_einsum_sums_only_into_the_operands_dtype():
    a = _spec("ikj", (64, 64, 64), (64**3, 64, 64**2 + 1), "b")
    wider = ReductionProblem(a, contiguous_spec("ik", (64, 64), "q"))
    assert "reduce:einsum" not in [plan.route for plan in strided_sum_plans(wider)]
    with pytest.raises(ValueError, match="numpy.einsum sums"):
        CpuReductionPlan(wider, by_einsum=True)




@pytest.mark.parametrize(("source", "target"), [
    ("int8", "int64"), ("uint8", "uint64"), ("int16", "uint64"), ("uint32", "int64"),
    ("int64", "uint64"), ("uint64", "int64"), ("float32", "float64"), ("complex64", "complex128"),
])
def test_the_kernel_sums_into_a_wider_dtype(rng, source, target):
    """Every integer into a 64-bit one (modulo 2^64, as NumPy's casts and sums are),
    float32 into float64, complex64 into complex128: each element widened, then added."""
    if np.dtype(source).kind in "iu":
        info = np.iinfo(source)
        x = rng.integers(info.min, info.max, size=(16, 64, 64), dtype=source, endpoint=True)
    else:
        x = (rng.standard_normal((16, 64, 64)) + 1j * rng.standard_normal((16, 64, 64)))
        x = (x if np.dtype(source).kind == "c" else x.real).astype(source)
    view = x.transpose(0, 2, 1)  # 'ikj': the inner axis j summed at stride 64
    spec = _spec("ikj", view.shape, tuple(s // x.itemsize for s in view.strides),
                 np.dtype(source).char)
    problem = ReductionProblem(spec, contiguous_spec("ik", (16, 64), np.dtype(target).char))
    plans = kernel_plans(problem)
    assert {plan.route for plan in plans} >= {"reduce:loops", "reduce:threaded-loops"}
    expected = view.astype(target).sum(axis=2, dtype=target)
    for plan in plans:
        d = np.empty((16, 64), target)
        plan.execute((view,), d, Scalars(), None)
        if np.dtype(source).kind in "iu":
            np.testing.assert_array_equal(d, expected)
        else:
            np.testing.assert_allclose(d, expected, rtol=1e-12, atol=1e-12)


def test_integer_sums_wrap_in_their_own_dtype_as_numpys_do():
    x = np.full((16, 64, 64), 100, np.int8)  # 64 x 100 = 6400, 0 modulo 256
    x[:, 0, :] = 101  # one more in each sum
    view = x.transpose(0, 2, 1)
    spec = _spec("ikj", view.shape, tuple(view.strides), "b")
    for plan in kernel_plans(ReductionProblem(spec, contiguous_spec("ik", (16, 64), "b"))):
        d = np.empty((16, 64), np.int8)
        plan.execute((view,), d, Scalars(), None)
        np.testing.assert_array_equal(d, np.einsum("ikj->ik", view))
        assert (d == 1).all()


def test_narrowing_and_mixed_kinds_get_no_kernel_plan():
    a = _spec("ikj", (64, 64, 64), (64**3, 64, 64**2 + 1), "d")
    for target in ("f", "q", "F"):
        assert kernel_plans(ReductionProblem(a, contiguous_spec("ik", (64, 64), target))) == ()
    b = _spec("ikj", (64, 64, 64), (64**3, 64, 64**2 + 1), "q")
    assert kernel_plans(ReductionProblem(b, contiguous_spec("ik", (64, 64), "d"))) == ()


def test_the_kernel_refuses_a_nest_that_reaches_outside_its_buffers():
    """The kernel checks the reach of its tables and strides against the buffers'
    lengths, and the pair of types, before it sums."""
    from cpu_fallback import _sums, sum_kernel

    src, dst = np.zeros(100), np.zeros(10)
    one, zero = np.zeros(1, np.int64), np.zeros(1, np.int64)
    kind = sum_kernel.UNIT_ROWS
    _sums.strided(src, dst, "f8", "f8", kind, one, zero, zero, 10, 10, 1, 0)  # fits
    with pytest.raises(ValueError, match="outside the buffers"):
        _sums.strided(src, dst, "f8", "f8", kind, one, zero, zero, 10, 12, 1, 0)
    with pytest.raises(ValueError, match="outside the buffers"):
        _sums.strided(src, dst, "f8", "f8", kind, one, zero, zero, 11, 1, 1, 0)
    with pytest.raises(ValueError, match="outside the buffers"):
        _sums.strided(src, dst, "f8", "f8", kind, one, zero, np.array([-1]), 10, 1, 1, 0)
    with pytest.raises(ValueError, match="no sum kernel sums f8 into f4"):
        _sums.strided(src, dst, "f8", "f4", kind, one, zero, zero, 10, 1, 1, 0)
    with pytest.raises(ValueError, match="int64 entries"):
        _sums.strided(src, dst, "f8", "f8", kind, one, zero, np.zeros(2, np.int32), 10, 1, 1, 0)


def test_the_kernels_buffer_is_the_array_or_the_dense_array_it_spans():
    """sum_kernel.memory hands the kernel a C-ordered array that fills its span, or the
    dense array a view spans whole (a diagonal), as it is; a read-only array asked for
    writing, a strided part of an array and a Fortran-ordered owner's view get a flat
    view of the span."""
    dense = np.arange(16.0).reshape(4, 4).copy()  # owns its memory
    assert sum_kernel.memory(dense, 0, 16, writeable=True) is dense
    diagonal = dense.diagonal()
    assert sum_kernel.memory(diagonal, 0, 16, writeable=False) is dense
    frozen = dense.copy()
    frozen.flags.writeable = False
    assert sum_kernel.memory(frozen, 0, 16, writeable=True) is not frozen
    assert sum_kernel.memory(frozen, 0, 16, writeable=False) is frozen
    rows = dense[1:3]  # C-ordered, filling its own span: as it is
    assert sum_kernel.memory(rows, 0, 8, writeable=False) is rows
    flat = sum_kernel.memory(dense[:, :2], 0, 14, writeable=False)
    assert flat.tolist() == list(range(14))
    fortran = np.asfortranarray(dense)
    flat = sum_kernel.memory(fortran.diagonal(), 0, 16, writeable=False)
    assert flat.shape == (16,) and flat[::5].tolist() == [0.0, 5.0, 10.0, 15.0]
