"""cpu_fallback.cblas: NumPy's own BLAS gemm with beta, found at run time.

Every product is compared with numpy.matmul's; layouts BLAS cannot take must be refused
(False, nothing written), never computed wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, reference_einsum

import gpu_tc
from cpu_fallback import cblas, mkl
from gpu_tc import Options
from gpu_tc.errors import MemoryLimitError

FLOATS = ["float32", "float64", "complex64", "complex128"]


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def test_numpys_blas_is_found_on_linux():
    """NumPy's wheels link OpenBLAS with CBLAS: every float dtype is served here."""
    assert cblas._libraries(), "no BLAS among the mapped files"
    for dtype in FLOATS:
        assert cblas.available(dtype)
    assert not cblas.available("int64") and not cblas.available("float16")


def _mkl_gemm(*args):
    """MKL's gemm (cpu_fallback.mkl), which must take the same arrays as NumPy's."""
    engine = mkl.engine()
    if engine is None:
        pytest.skip("no MKL engine here (pip install 'gpu-tc[mkl]'; Linux x86-64)")
    return engine.gemm(*args)


@pytest.mark.parametrize("gemm", [cblas.gemm, _mkl_gemm], ids=["numpy-blas", "mkl"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("d_order", ["C", "F"])
@pytest.mark.parametrize("a_t", [False, True])
@pytest.mark.parametrize("b_t", [False, True])
def test_gemm_adds_into_a_strided_d_like_matmul(gemm, dtype, d_order, a_t, b_t):
    rng = np.random.default_rng(0)
    a = _random(rng, (23, 17), dtype)
    b = _random(rng, (17, 29), dtype)
    if a_t:
        a = np.ascontiguousarray(a.T).T  # column-major A
    if b_t:
        b = np.ascontiguousarray(b.T).T
    base = np.asarray(_random(rng, (31, 37), dtype), order=d_order)
    d_whole = base.copy(order="K")
    d = d_whole[3:26, 5:34]  # a leading dimension larger than the matrix
    alpha, beta = (1.5 - 0.25j, -0.5 + 2j) if np.dtype(dtype).kind == "c" else (1.5, -0.5)
    assert gemm(a, b, d, alpha, beta)
    expected = alpha * (a @ b) + beta * base[3:26, 5:34]
    assert_close(d, expected, dtype, np.abs(a) @ np.abs(b) + np.abs(base[3:26, 5:34]))
    untouched = np.ones(d_whole.shape, bool)
    untouched[3:26, 5:34] = False
    assert np.array_equal(d_whole[untouched], base[untouched])


def test_a_complex_scalar_with_real_arrays_is_refused():
    rng = np.random.default_rng(7)
    a, b, d = rng.standard_normal((4, 6)), rng.standard_normal((6, 3)), np.zeros((4, 3))
    assert not cblas.gemm(a, b, d, 1.0, 0.5j)
    assert not d.any()


def test_beta_zero_ignores_what_d_held():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((8, 5)), rng.standard_normal((5, 6))
    d = np.full((8, 6), np.nan)
    assert cblas.gemm(a, b, d, 1.0, 0.0)
    assert_close(d, a @ b, "float64", np.abs(a) @ np.abs(b))


@pytest.mark.parametrize("make", [
    lambda a, b, d: (a[:, ::2], b[::2], d),  # A without a unit stride
    lambda a, b, d: (a, b, d[:, ::2][:, :3]),  # D without one
    lambda a, b, d: (a, b, d[:, ::-1][:, :3]),  # a negative stride
    lambda a, b, d: (a.astype(np.int64), b.astype(np.int64), d.astype(np.int64)),
    lambda a, b, d: (a.astype(np.float32), b, d),  # mixed dtypes
])
@pytest.mark.parametrize("alpha", [1.0, 1j])  # a complex scalar with real arrays
def test_layouts_blas_cannot_take_are_refused_untouched(make, alpha):
    rng = np.random.default_rng(2)
    a, b, d = make(rng.standard_normal((4, 6)), rng.standard_normal((6, 3)),
                   rng.standard_normal((4, 6)))
    before = d.copy()
    assert not cblas.gemm(a, b, d, alpha, 1.0)
    assert np.array_equal(d, before)


@pytest.mark.parametrize("shape, strides, expected", [
    ((4, 6), (6, 1), (cblas.NO_TRANS, 6)),
    ((4, 6), (10, 1), (cblas.NO_TRANS, 10)),
    ((4, 6), (1, 4), (cblas.TRANS, 4)),
    ((1, 6), (0, 1), (cblas.NO_TRANS, 6)),  # one row: any row stride
    ((4, 1), (1, 0), (cblas.NO_TRANS, 1)),  # one column: rows of one element
    ((4, 6), (2, 1), None),  # rows overlap: ld below the row length
    ((4, 6), (12, 2), None),  # no unit stride
])
def test_matrix_layout(shape, strides, expected):
    assert cblas.matrix_layout(shape, strides) == expected


def test_empty_products():
    rng = np.random.default_rng(3)
    d = rng.standard_normal((0, 4))
    assert cblas.gemm(np.empty((0, 3)), np.empty((3, 4)), d, 1.0, 1.0)


PACKED = "fbea,ecfd->dcba"  # TCCG case 20's form: A and B packed whole


def _packed_operands(extents: dict[str, int], seed: int) -> list[np.ndarray]:
    """A, B and C (D's shape) of PACKED at ``extents``."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([extents[x] for x in term]) for term in ("fbea", "ecfd", "dcba")]


def test_tiles_that_add_chunks_into_d_are_right():
    """TCCG case 20's form under a quarter of its copies: BLAS adds the chunks of a
    contracted label into D in place; the result is right with and without beta."""
    expr = PACKED
    a, b, c = _packed_operands({"a": 20, "b": 18, "c": 16, "d": 14, "e": 12, "f": 10}, 4)
    exact, scale = reference_einsum(expr, a, b)
    packed = 8 * (a.size + b.size)
    plan = gpu_tc.prepare(expr, a, b, options=Options(memory_limit=packed // 4))
    assert "tiles" in plan.reason and plan.temporary_bytes <= packed // 4
    assert_close(plan.execute(a, b), exact, "d", scale)
    got = gpu_tc.contract(expr, a, b, alpha=2.0, beta=0.5, c=c,
                          options=Options(memory_limit=packed // 4))
    assert_close(got, 2 * exact + 0.5 * c, "d", 2 * scale + np.abs(c))


def test_without_cblas_a_sum_into_d_is_staged_and_still_right(monkeypatch):
    """Where no CBLAS is found (another OS, another BLAS), beta != 0 computes the
    product aside: the plan counts that temporary and the result is the same."""
    monkeypatch.setattr(cblas, "available", lambda dtype: False)
    expr = PACKED
    a, b, c = _packed_operands({"a": 9, "b": 8, "c": 7, "d": 6, "e": 5, "f": 4}, 5)
    exact, scale = reference_einsum(expr, a, b)
    options = Options(memory_limit=1 << 40)
    plan = gpu_tc.prepare(expr, a, b, options=options)
    assert plan.temporary_bytes == 8 * (a.size + b.size + c.size)
    got = gpu_tc.contract(expr, a, b, alpha=1.0, beta=-1.0, c=c, options=options)
    assert_close(got, exact - c, "d", scale + np.abs(c))
    with pytest.raises(MemoryLimitError):
        gpu_tc.contract(expr, a, b, alpha=1.0, beta=-1.0, c=c, options=Options(memory_limit=0))


def test_a_layout_refused_at_run_time_falls_back_to_staging(monkeypatch):
    """Should BLAS refuse the arrays of a call (cblas.gemm returns False), the product
    is computed aside and added: the same result."""
    refused = []
    monkeypatch.setattr(cblas, "gemm", lambda *args: refused.append(args) or False)
    expr = "ij,jk->ik"
    rng = np.random.default_rng(6)
    a, b, c = rng.standard_normal((30, 20)), rng.standard_normal((20, 25)), \
        rng.standard_normal((30, 25))
    got = gpu_tc.contract(expr, a, b, alpha=0.5, beta=2.0, c=c,
                          options=Options(memory_limit=1 << 40))
    assert_close(got, 0.5 * (a @ b) + 2.0 * c, "d", np.abs(a) @ np.abs(b) + np.abs(c))
    assert refused  # the call did ask BLAS first
