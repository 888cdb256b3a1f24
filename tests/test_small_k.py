"""The small-K GEMM (cpu_fallback.small_k over the compiled cpu_fallback._small_k): every
layout of A, B and D, tails of tiles, alpha, thread counts, the buffers' bounds, and the
plans that offer it beside BLAS, each result against numpy's float64 product."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_tc
from cpu_fallback import kernels
from cpu_fallback.contraction import CpuContractionPlan
from gpu_tc import reference
from gpu_tc.backend import Scalars
from gpu_tc.gemm import policies

pytestmark = pytest.mark.skipif(not kernels.built("_small_k"),
                                reason="cpu_fallback._small_k was not built (no C compiler)")

TOLERANCE = {np.float64: 1e-13, np.float32: 2e-6}


@pytest.fixture(scope="module")
def small_k():
    from cpu_fallback import small_k as module
    return module


def _check(d: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: float) -> None:
    expected = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.abs(d - expected).max() <= TOLERANCE[d.dtype.type] * scale * a.shape[1]


def _layout(x: np.ndarray, kind: str) -> np.ndarray:
    """``x``'s values laid out as ``kind`` says: C order, Fortran order, every other row
    of a larger array, or reversed (negative strides)."""
    if kind == "C":
        return np.ascontiguousarray(x)
    if kind == "F":
        return np.asfortranarray(x)
    if kind == "strided":
        big = np.zeros((2 * x.shape[0], x.shape[1] + 3), x.dtype)
        big[::2, 1:x.shape[1] + 1] = x
        return big[::2, 1:x.shape[1] + 1]
    return np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (7, 3, 5), (9, 12, 25), (33, 64, 50),
                                     (130, 5, 49), (3, 7, 1000), (500, 2, 3),
                                     (19, 300, 41), (10, 512, 57), (21, 513, 9),
                                     (13, 1500, 30)])
def test_the_product_is_numpys_for_every_shape_and_tile_tail(small_k, rng, dtype, m, k, n):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    d = np.full((m, n), np.nan, dtype)
    assert small_k.gemm(a, b, d, 1.0)
    _check(d, a, b, 1.0)


@pytest.mark.parametrize("a_kind", ["C", "F", "strided", "reversed"])
@pytest.mark.parametrize("b_kind", ["C", "F", "strided", "reversed"])
@pytest.mark.parametrize("d_kind", ["C", "F", "strided"])
def test_any_layout_of_a_and_b_and_a_unit_stride_either_way_in_d(small_k, rng, a_kind,
                                                                 b_kind, d_kind):
    a = _layout(rng.standard_normal((37, 11)), a_kind)
    b = _layout(rng.standard_normal((11, 29)), b_kind)
    d = _layout(np.full((37, 29), np.nan), d_kind)
    assert small_k.gemm(a, b, d, -0.5)
    _check(d, a, b, -0.5)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [9, 600])  # 600: a second block of terms, added into D
def test_nothing_outside_d_is_written(small_k, rng, dtype, k):
    """D's rows end inside a vector (42 columns: 24 + 18 in float64, 42 of 48 in
    float32), which a masked store writes."""
    whole = np.full((40, 60), np.nan, dtype)
    d = whole[3:30:2, 5:47]  # rows 2 apart, columns inside
    a = rng.standard_normal((d.shape[0], k)).astype(dtype)
    b = rng.standard_normal((k, d.shape[1])).astype(dtype)
    assert small_k.gemm(a, b, d, 1.0)
    _check(d, a, b, 1.0)
    outside = np.ones(whole.shape, bool)
    outside[3:30:2, 5:47] = False
    assert np.isnan(whole[outside]).all()


def test_the_thread_count_does_not_change_a_bit(rng):
    from cpu_fallback import _small_k
    a, b = rng.standard_normal((301, 17)), rng.standard_normal((17, 203))
    results = []
    for threads in (0, 1, 2, 3):
        d = np.empty((301, 203))
        _small_k.gemm(a.reshape(-1), b.reshape(-1), d.reshape(-1), "f8", 301, 203, 17,
                      0, 17, 1, 0, 203, 1, 0, 203, 1.0, threads)
        results.append(d)
    for d in results[1:]:
        assert np.array_equal(d, results[0])
    _check(results[0], a, b, 1.0)


@pytest.mark.parametrize("change, message", [
    ({"m": 3}, "outside the buffers"),            # one row past A and D
    ({"a0": 1}, "outside the buffers"),           # A starts one element late
    ({"d_row": -4}, "outside the buffers"),       # D's rows run below its start
    ({"k": 0}, "k, batches >= 1"),
    # a reach of (k - 1) x stride past int64 (it wrapped to 0 and passed): refused
    ({"k": 2**32 + 1, "a_col": 2**32, "b_row": 2**32}, "outside the buffers"),
    ({"m": 2**40, "a_row": 2**40, "d_row": 2**40}, "outside the buffers"),
    ({"threads": -1}, "threads >= 0"),
    ({"type": "c8"}, "runs 'f4' and 'f8'"),
    ({"type": "f"}, "runs 'f4' and 'f8'"),
    ({"type": "f8:avx3"}, "runs 'f4' and 'f8'"),
])
def test_the_kernel_refuses_what_it_cannot_run(rng, change, message):
    from cpu_fallback import _small_k
    args = {"type": "f8", "m": 2, "n": 4, "k": 3, "a0": 0, "a_row": 3, "a_col": 1, "b0": 0,
            "b_row": 4, "b_col": 1, "d0": 0, "d_row": 4, "alpha": 1.0, "threads": 0}
    args.update(change)
    a, b, d = np.ones(6), np.ones(12), np.zeros(8)
    with pytest.raises(ValueError, match=message):
        _small_k.gemm(a, b, d, *args.values())


@pytest.mark.parametrize("dtype, m, k, n", [(np.float64, 301, 36, 36), (np.float32, 77, 13, 45),
                                           (np.float64, 19, 600, 9), (np.float32, 5, 3, 70)])
def test_a_narrower_build_writes_the_widest_builds_bits(small_k, rng, dtype, m, k, n):
    """Each element sums its K terms in order whatever the vector width, so the AVX2
    build, which a plan may time beside the AVX-512 one, writes the same bits."""
    if not small_k.narrower_builds():
        pytest.skip(f"this process runs the {small_k.isa()} build and names no other")
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    widest, narrower = np.full((m, n), np.nan, dtype), np.full((m, n), np.nan, dtype)
    assert small_k.gemm(a, b, widest, -0.5)
    assert small_k.gemm(a, b, narrower, -0.5, "avx2")
    assert np.array_equal(widest, narrower)
    _check(narrower, a, b, -0.5)


def test_the_avx2_build_is_named_only_where_it_is_narrower(small_k):
    """'f8:avx2' runs the AVX2 build where this process runs a wider one (an AVX-512 CPU
    not narrowed by GPU_TC_KERNEL_ISA); elsewhere the name is refused."""
    from cpu_fallback import _small_k
    a, b, d = np.arange(6.0), np.arange(12.0), np.zeros(8)
    args = ("f8:avx2", 2, 4, 3, 0, 3, 1, 0, 4, 1, 0, 4, 1.0, 0)
    if small_k.narrower_builds() == ("avx2",):
        _small_k.gemm(a, b, d, *args)
        np.testing.assert_array_equal(d.reshape(2, 4), a.reshape(2, 3) @ b.reshape(3, 4))
    else:
        with pytest.raises(ValueError, match="names none"):
            _small_k.gemm(a, b, d, *args)
        assert (d == 0).all()


def test_what_it_does_not_serve_is_left_to_blas(small_k, rng):
    a, b = rng.standard_normal((8, 4)), rng.standard_normal((4, 8))
    d = np.zeros((8, 8))
    assert not small_k.gemm(a, b, d, 1 + 1j)  # complex alpha
    assert not small_k.gemm(a.astype(np.float32), b, d, 1.0)  # mixed dtypes
    assert not small_k.gemm(a.astype(complex), b.astype(complex), d.astype(complex), 1.0)
    no_unit = np.zeros((16, 16))[::2, ::2]
    assert not small_k.gemm(a, b, no_unit, 1.0)
    assert (d == 0).all() and (no_unit == 0).all()
    assert small_k.isa() in ("avx512f", "avx2", "baseline")


def _new_result(spec, dtype) -> np.ndarray:
    """An array laid out as the problem's new result (the GEMM's own layout)."""
    memory = np.empty(int(np.prod(spec.extents)), dtype)
    strides = tuple(s * memory.itemsize for s in spec.strides)
    return np.lib.stride_tricks.as_strided(memory, spec.extents, strides)


HALF_TCCG_33 = ("cged,bafg->fedcba", {"a": 12, "b": 8, "c": 8, "d": 12, "e": 8, "f": 8, "g": 12})


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_plan_runs_its_gemm_by_the_kernel_and_says_so(small_k, monkeypatch, rng, dtype):
    """TCCG case 33 at half extents (K = 12): the packed lowering with the small-K
    kernel, beta 0 and alpha 2, against the reference; with beta != 0 BLAS adds."""
    ran = []
    kernel = small_k.gemm
    monkeypatch.setattr(small_k, "gemm", lambda *args: ran.append(kernel(*args)) or ran[-1])
    subscripts, sizes = HALF_TCCG_33
    terms = subscripts.split("->")[0].split(",")
    a, b = (rng.standard_normal([sizes[x] for x in t]).astype(dtype) for t in terms)
    problem = gpu_tc.prepare(subscripts, a, b)._plan.program.final
    plain = CpuContractionPlan(problem, policies(problem)[0])
    assert plain.small_k_serves()
    plan = CpuContractionPlan(problem, policies(problem)[0], small_k=True)
    assert plan.route.startswith("small-k:") and "by the small-K kernel (K = 12)" in plan.reason
    expected = reference.einsum(subscripts, a.astype(np.float64), b.astype(np.float64))
    d = _new_result(problem.d, dtype)
    plan.execute((a, b), d, Scalars(alpha=2.0), None)
    np.testing.assert_allclose(d, 2 * expected, rtol=TOLERANCE[dtype] * 50, atol=1e-5)
    assert ran == [True]
    c = rng.standard_normal(problem.d.extents).astype(dtype)  # C order: another layout
    plan.execute((a, b), d, Scalars(alpha=1.0, beta=0.5), c)
    np.testing.assert_allclose(d, expected + 0.5 * c, rtol=TOLERANCE[dtype] * 50, atol=1e-5)
    assert ran == [True]  # BLAS added the product into D


@pytest.mark.parametrize("subscripts, shapes, dtype", [
    ("ik,kj->ij", [(300, 8), (8, 300)], np.complex128),    # complex: BLAS's
    ("bik,bkj->bij", [(6, 200, 8), (6, 8, 200)], np.float64),  # a batch of GEMMs
])
def test_plans_the_kernel_does_not_serve(rng, subscripts, shapes, dtype):
    operands = [rng.standard_normal(s).astype(dtype) for s in shapes]
    problem = gpu_tc.prepare(subscripts, *operands)._plan.program.final
    assert not any(CpuContractionPlan(problem, p).small_k_serves() for p in policies(problem))


def test_a_plan_may_run_the_narrower_build_and_says_so(small_k, rng):
    """Where the kernel has a narrower build, the plans it is timed in offer it too
    (route "small-k-avx2:..."): TCCG case 9's GEMM at a third of its half extents."""
    if not small_k.narrower_builds():
        pytest.skip(f"this process runs the {small_k.isa()} build and names no other")
    a, b = rng.standard_normal((12, 12)), rng.standard_normal((12, 12, 12, 12))
    problem = gpu_tc.prepare("ae,dcbe->dcba", a, b)._plan.program.final
    plan = CpuContractionPlan(problem, policies(problem)[0], small_k="avx2")
    assert plan.route.startswith("small-k-avx2:") and "its AVX2 build" in plan.reason
    assert [build for p in policies(problem)
            for build in CpuContractionPlan(problem, p).small_k_builds()][:2] == [True, "avx2"]
    d = _new_result(problem.d, np.float64)
    plan.execute((a, b), d, Scalars(), None)
    np.testing.assert_allclose(d, reference.einsum("ae,dcbe->dcba", a, b), atol=1e-12)


def test_a_small_new_result_goes_to_the_kernel_too(small_k, monkeypatch, rng):
    """Below the host pool's size a BLAS plan makes a new result by numpy.matmul alone;
    the kernel's plan runs the kernel instead."""
    ran = []
    kernel = small_k.gemm
    monkeypatch.setattr(small_k, "gemm", lambda *args: ran.append(kernel(*args)) or ran[-1])
    a, b = rng.standard_normal((200, 8)), rng.standard_normal((8, 150))
    problem = gpu_tc.prepare("ik,kj->ij", a, b)._plan.program.final
    assert CpuContractionPlan(problem, policies(problem)[0]).fresh is not None
    plan = CpuContractionPlan(problem, policies(problem)[0], small_k=True)
    assert plan.fresh is None
    d = _new_result(problem.d, np.float64)
    plan.execute((a, b), d, Scalars(), None)
    assert ran == [True]
    _check(d, a, b, 1.0)
