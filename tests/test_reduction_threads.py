"""CPU reductions split over threads: every op, split along kept and reduced labels."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close

import gpu_tc
from cpu_fallback import reduction, workers
from gpu_tc import ReduceOp, UnaryOp, reference
from gpu_tc.problem import ReductionProblem, TensorSpec, contiguous_spec


@pytest.fixture
def threaded(monkeypatch):
    """Every reduction split over 3 threads (uneven slabs), with fresh plans."""
    monkeypatch.setattr(reduction, "THREAD_MIN_BYTES", 1)
    monkeypatch.setattr(workers, "threads", lambda: 3)
    gpu_tc.plan_cache().clear()
    yield
    gpu_tc.plan_cache().clear()


def test_split_axis_is_the_outermost_with_enough_entries():
    assert reduction.split_axis((8, 8, 8), (64, 8, 1), 2) == 0
    assert reduction.split_axis((1, 8, 8), (64, 8, 1), 2) == 1
    assert reduction.split_axis((8, 8), (1, 8), 2) == 1  # F order: the last axis is outermost
    assert reduction.split_axis((8, 8), (-8, 1), 2) == 0  # reversed rows still stride 8
    assert reduction.split_axis((1, 1), (1, 1), 2) is None
    assert reduction.split_axis((8, 8), (8, 1), 1) is None


def test_traffic_counts_a_cache_line_per_element_without_a_unit_stride():
    dense = contiguous_spec("ab", [4, 8], "d")
    assert reduction.traffic(dense) == 4 * 8 * 8
    diagonal = TensorSpec("ab", (4, 8), (4097, 64), "d")  # e.g. a[i, j, k, j] seen as (j, k)
    assert reduction.traffic(diagonal) == 4 * 8 * reduction.CACHE_LINE
    assert reduction.traffic(contiguous_spec("", [], "d")) == 8


def _reason(labels: str, out: str, shape: tuple[int, ...]) -> str:
    a = contiguous_spec(labels, list(shape), "d")
    d = contiguous_spec(out, [a.extent(x) for x in out], "d")
    return reduction.CpuReductionPlan(ReductionProblem(a, d)).reason


def test_reason_names_the_split(threaded):
    assert "split over 3 threads along label 'a'" in _reason("abc", "c", (5, 4, 3))
    assert "one thread" in _reason("abc", "c", (2, 2, 2))  # no axis has 3 entries


CASES = [
    pytest.param("ijk->k", (7, 5, 4), id="split-reduced"),
    pytest.param("ijk->ik", (7, 5, 4), id="split-kept"),
    pytest.param("ijk->ki", (7, 5, 4), id="split-kept-permuted"),
    pytest.param("ijk->", (5, 7, 4), id="all"),
    pytest.param("iij->j", (4, 4, 9), id="diagonal-view"),
]


# MAX and MIN have no order on complex numbers (an error, tested in test_operations).
OPS_DTYPES = [
    (op, dtype)
    for op in ReduceOp
    for dtype in (np.float64, np.float32, np.complex128)
    if not (op in (ReduceOp.MAX, ReduceOp.MIN) and np.dtype(dtype).kind == "c")
]


@pytest.mark.parametrize("op, dtype", OPS_DTYPES)
@pytest.mark.parametrize("subscripts, shape", CASES)
def test_threaded_reduction_matches_the_reference(threaded, subscripts, shape, op, dtype, rng):
    a = (rng.uniform(0.5, 1.5, shape) * np.sign(rng.standard_normal(shape))).astype(dtype)
    got = gpu_tc.reduce(subscripts, a, op=op)
    expected = reference.reduce(subscripts, a, op)
    assert_close(got, expected, dtype, np.max(np.abs(expected)) * a.size)


@pytest.mark.parametrize("subscripts, shape", CASES)
def test_threaded_reduction_with_alpha_beta_and_a_strided_view(threaded, subscripts, shape, rng):
    base = rng.standard_normal(tuple(2 * n for n in shape))
    a = base[tuple(slice(None, None, -2) for _ in shape)]
    expected_shape = np.einsum(subscripts, a).shape
    c = rng.standard_normal(expected_shape)
    got = gpu_tc.reduce(subscripts, a, alpha=2.0, beta=-0.5, c=c, op_a=UnaryOp.ABS)
    expected = reference.reduce(subscripts, a, ReduceOp.SUM, 2.0, -0.5, c, UnaryOp.ABS)
    assert_close(got, expected, np.float64, np.max(np.abs(expected)) * a.size)


def test_threaded_einsum_sum_into_out(threaded, rng):
    a = rng.standard_normal((9, 6, 5))
    out = np.empty((5, 9)).T  # F-ordered (9, 5)
    got = gpu_tc.einsum("ijk->ik", a, out=out)
    assert got is out
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-13)


@pytest.mark.parametrize("threads", [2, 3, 8, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("subscripts, shape", [("ab->", (512, 2048)), ("abc->c", (64, 128, 7)),
                                               ("ab->", (37, 8192))])
def test_a_threaded_sum_of_one_stretch_has_numpys_bits(monkeypatch, threads, dtype, subscripts,
                                                       shape, rng):
    """A float sum whose summed labels are one stretch of memory per result is NumPy's
    pairwise sum: split over any number of threads (a 16-core host failed here with
    equal slabs), its slabs are cut where NumPy's recursion cuts, or it runs on one."""
    monkeypatch.setattr(reduction, "THREAD_MIN_BYTES", 1)
    monkeypatch.setattr(workers, "threads", lambda: threads)
    a = rng.standard_normal(shape).astype(dtype)
    labels, kept = subscripts.split("->")
    problem = ReductionProblem(contiguous_spec(labels, shape, np.dtype(dtype).char),
                               contiguous_spec(kept, [shape[labels.index(x)] for x in kept],
                                               np.dtype(dtype).char), ReduceOp.SUM)
    plan = reduction.CpuReductionPlan(problem)
    if shape == (512, 2048):  # NumPy's recursion cuts between rows: a power of two of slabs
        assert plan.threaded and len(plan._slabs) == 1 << (threads.bit_length() - 1)
    if shape == (37, 8192):  # its first cut falls inside row 18: one thread
        assert not plan.threaded
    d = np.empty([shape[labels.index(x)] for x in kept], dtype)
    plan.execute([a], d, gpu_tc.backend.Scalars(), None)
    axes = tuple(i for i, x in enumerate(labels) if x not in kept)
    if subscripts == "abc->c":  # summed labels lead: not one stretch, no bits promised
        assert_close(d, np.add.reduce(a, axis=axes), np.dtype(dtype), np.abs(a).sum(axis=axes))
    else:
        np.testing.assert_array_equal(d, np.add.reduce(a, axis=axes))
