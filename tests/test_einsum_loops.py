"""Batches of dot and matrix-vector products read along an innermost batch
(cpu_fallback.einsum_loops): numpy.einsum's loops where they lie, chosen where BLAS
would walk vectors strided across the batch, results as the reference's, D laid out as
numpy.einsum lays it out."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, call_until_reason, random_array, reference_einsum

import gpu_tc
from cpu_fallback.einsum_loops import MIN_BATCH, EinsumLoopsPlan, einsum_loops_plan
from cpu_fallback.fresh_call import FRESH_MAX_BYTES
from gpu_tc.problem import ContractionProblem, TensorSpec

ALONG_BATCH = [
    ("ij,ij->j", [(300, 300), (300, 300)]),  # a batch of dots, j innermost
    ("ijk,ik->jk", [(24, 8, 40), (24, 40)]),  # matrix-vector products, k innermost
    ("ijk,jk->ik", [(16, 24, 32), (24, 32)]),
    ("ijk,ijk->k", [(12, 10, 32), (12, 10, 32)]),
    ("ij,ij->j", [(40, 4096), (40, 4096)]),
]


def _problem(expr: str, ops: list[np.ndarray]) -> ContractionProblem:
    terms, d_labels = expr.split("->")
    specs = [TensorSpec(t, x.shape, tuple(s // x.itemsize for s in x.strides), x.dtype.char)
             for t, x in zip(terms.split(","), ops)]
    result = np.einsum(expr, *ops)
    d = TensorSpec(d_labels, result.shape,
                   tuple(s // result.itemsize for s in result.strides), result.dtype.char)
    return ContractionProblem(specs[0], specs[1], d)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("expr, shapes", ALONG_BATCH)
def test_a_batch_read_along_it_runs_numpys_loops_and_lays_d_out_as_numpy(expr, shapes,
                                                                         dtype, rng):
    ops = [random_array(rng, s, dtype) for s in shapes]
    plan = gpu_tc.prepare(expr, *ops)
    assert plan.route == "einsum", plan.reason  # below measure.MIN_FLOPS: untimed
    assert "along the batch label(s)" in plan.reason
    exact, scale = reference_einsum(expr, *ops)
    expected = np.einsum(expr, *ops)
    assert_close(plan.execute(*ops), exact, np.dtype(dtype), scale)
    for _ in range(3):
        got = gpu_tc.einsum(expr, *ops)
        assert_close(got, exact, np.dtype(dtype), scale)
        assert (got.shape, got.strides) == (expected.shape, expected.strides)


def test_scaled_calls_and_an_out_of_another_layout(rng):
    a, b = rng.standard_normal((64, 48)), rng.standard_normal((64, 48))
    c = rng.standard_normal(48)
    exact = np.einsum("ij,ij->j", a, b)
    got = gpu_tc.contract("ij,ij->j", a, b, alpha=2.0, beta=-0.5, c=c)
    np.testing.assert_allclose(got, 2.0 * exact - 0.5 * c, rtol=1e-12, atol=1e-12)
    out = np.zeros((96, 2))[:, 0][::2]  # a strided out
    gpu_tc.einsum("ij,ij->j", a, b, out=out)
    np.testing.assert_allclose(out, exact, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("expr, shapes", [
    ("bi,bi->b", [(256, 64), (256, 64)]),  # the batch outermost: a batch of BLAS dots
    ("ij,ij->j", [(300, 8), (300, 8)]),  # a batch shorter than MIN_BATCH
    ("ikb,kjb->ijb", [(32, 32, 64), (32, 32, 64)]),  # GEMMs with work to share
    ("ij,jk->ik", [(64, 64), (64, 64)]),  # no batch
])
def test_no_loops_where_blas_reads_the_batch_well_or_there_is_none(expr, shapes, rng):
    ops = [random_array(rng, s, np.float64) for s in shapes]
    assert einsum_loops_plan(_problem(expr, ops)) is None
    assert "einsum" not in gpu_tc.prepare(expr, *ops).route


def test_no_loops_where_a_scaled_calls_product_would_not_fit_the_budget(rng):
    ops = [random_array(rng, (300, 300), np.float64) for _ in range(2)]
    problem = _problem("ij,ij->j", ops)
    assert isinstance(einsum_loops_plan(problem, budget=300 * 8), EinsumLoopsPlan)
    assert einsum_loops_plan(problem, budget=300 * 8 - 1) is None
    assert MIN_BATCH <= 300


def test_a_large_batch_times_the_loops_against_the_gemms(rng):
    """Above measure.MIN_FLOPS the loops are one more variant, timed with the rest."""
    a, b = rng.standard_normal((128, 128, 128)), rng.standard_normal((128, 128))
    plan = gpu_tc.prepare("ijk,jk->ik", a, b)
    exact, scale = reference_einsum("ijk,jk->ik", a, b)
    call_until_reason(plan, "measured:", lambda: assert_close(plan.execute(a, b), exact,
                                                               np.float64, scale), 400)
    assert "measured:" in plan.reason and "einsum" in plan.reason, plan.reason


def test_the_loops_are_numpys_own_even_where_numpy_einsum_is_gpu_tcs(monkeypatch, rng):
    """A drop-in that puts gpu_tc.einsum in numpy.einsum's place does not send the
    loops' calls back into gpu_tc."""
    ops = [random_array(rng, (64, 32), np.float64) for _ in range(2)]
    expected = np.einsum("ij,ij->j", *ops)
    gpu_tc.plan_cache().clear()
    monkeypatch.setattr(np, "einsum", gpu_tc.einsum)
    assert gpu_tc.prepare("ij,ij->j", *ops).route == "einsum"
    np.testing.assert_allclose(gpu_tc.einsum("ij,ij->j", *ops), expected, rtol=1e-12)


def test_a_large_broadcast_product_times_the_loops_beside_numpys_multiply(rng):
    """A product that sums nothing, past the backend's PRODUCT_MIN_BYTES of D: the loops
    are one of the variants timed, and every call's result is right."""
    a, b = rng.standard_normal((300, 300)), rng.standard_normal(300)
    plan = gpu_tc.prepare("ij,i->ij", a, b)
    expected = a * b[:, None]
    call_until_reason(plan, "measured:", lambda: np.testing.assert_array_equal(
        plan.execute(a, b), expected), 400)
    assert "measured:" in plan.reason and "einsum " in plan.reason, plan.reason
    assert "as they broadcast" in plan.reason or plan.route != "einsum"
    np.testing.assert_array_equal(gpu_tc.einsum("ij,i->ij", a, b), expected)


def _plan(expr: str, ops: list[np.ndarray], d_strides: tuple[int, ...]) -> EinsumLoopsPlan:
    problem = _problem(expr, ops)
    d = problem.d
    return EinsumLoopsPlan(ContractionProblem(problem.a, problem.b,
                                              TensorSpec(d.labels, d.extents, d_strides, d.dtype)))


def test_a_new_result_is_numpys_own_where_numpy_lays_it_out_as_d(rng):
    """Below FRESH_MAX_BYTES numpy.einsum allocates the result itself (no ``out``, no
    pool lookup), as for its own callers, while its layout is D's."""
    a, b = rng.standard_normal((300, 300)), rng.standard_normal(300)
    plan = _plan("ij,j->ij", [a, b], (300, 1))
    for _ in range(3):
        got = plan.fresh(a, b)
        np.testing.assert_array_equal(got, a * b)
        assert got.strides == (2400, 8) and got.flags.owndata  # numpy's allocation


def test_a_new_result_numpy_lays_out_otherwise_gets_d_s_layout(rng):
    """F-ordered operands make numpy.einsum's result F-ordered; a plan whose D is
    C-ordered allocates D's layout itself, from the first such call on."""
    a, b = np.asfortranarray(rng.standard_normal((300, 200))), rng.standard_normal(200)
    plan = _plan("ij,j->ij", [a, b], (200, 1))
    for _ in range(3):
        got = plan.fresh(a, b)
        np.testing.assert_array_equal(got, a * b)
        assert got.strides == (1600, 8)


def test_a_0d_result_or_a_large_one_keeps_d_s_own_allocation(rng):
    """A D of FRESH_MAX_BYTES or more comes from the pool (page faults only once); a
    0-d D stays a 0-d array (numpy.einsum returns a scalar), as the plan's callers
    expect."""
    n = 1024
    assert n * n * 8 >= FRESH_MAX_BYTES
    a, b = rng.standard_normal((n, n)), rng.standard_normal(n)
    got = _plan("ij,j->ij", [a, b], (n, 1)).fresh(a, b)
    np.testing.assert_array_equal(got, a * b)
    assert not got.flags.owndata and got.strides == (8 * n, 8)  # a pooled buffer's view
    dot = _plan("i,i->", [a[0], a[0]], ()).fresh(a[0], a[0])
    assert isinstance(dot, np.ndarray) and dot.shape == ()
    np.testing.assert_allclose(dot, a[0] @ a[0], rtol=1e-12)
