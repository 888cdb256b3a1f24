"""numpy.einsum's and numpy.trace's signatures on CuPy arrays (marker ``gpu``): each
keyword, bool and integer data (CuPy's kernels: cuTENSOR has none), float16, judged
against numpy on the same values."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

import gpu_tc

pytestmark = pytest.mark.gpu


@pytest.fixture
def cp() -> Any:
    """CuPy, imported only once a GPU test runs."""
    return importlib.import_module("cupy")


def _values(rng, shape, dtype):
    x = rng.integers(0, 4, size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.integers(0, 4, size=shape)
    return x.astype(dtype)


def _same(cp, got, expected, exact=True):
    assert isinstance(got, cp.ndarray)
    host = cp.asnumpy(got)
    assert host.dtype == np.asarray(expected).dtype
    assert host.shape == np.shape(expected)
    if exact:
        np.testing.assert_array_equal(host, expected)
    else:
        np.testing.assert_allclose(host.astype(np.complex128), np.asarray(expected, np.complex128),
                                   rtol=2e-3, atol=1e-6)


INTEGRAL = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint64]


@pytest.mark.parametrize("dtype", INTEGRAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "subscripts, shapes",
    [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
     ("ij->j", [(3, 4)]), ("ij->ji", [(3, 4)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
     ("abc,cd,db->a", [(2, 3, 4), (4, 5), (5, 3)])],
)
def test_bool_and_integers_as_numpy(cp, rng, dtype, subscripts, shapes):
    host = [_values(rng, s, dtype) for s in shapes]
    got = gpu_tc.einsum(subscripts, *[cp.asarray(x) for x in host])
    _same(cp, got, np.einsum(subscripts, *host))


def test_integer_route_says_why(cp):
    a = cp.asarray(np.arange(12, dtype=np.int64).reshape(3, 4))
    plan = gpu_tc.prepare("ij,jk->ik", a, a.T)
    assert plan.route == "cupy" and "cuTENSOR has no integer" in plan.reason
    _same(cp, plan.execute(a, a.T), np.arange(12).reshape(3, 4) @ np.arange(12).reshape(3, 4).T)


def test_integers_exact_past_2_to_the_53(cp):
    big = np.array([[2**62 + 1, 3], [5, 2**61 + 7]], dtype=np.int64)
    got = gpu_tc.einsum("ij,jk->ik", cp.asarray(big), cp.asarray(np.eye(2, dtype=np.int64)))
    _same(cp, got, big)
    _same(cp, gpu_tc.trace(cp.asarray(big)), np.trace(big))


def test_integer_contract_with_alpha_and_beta(cp, rng):
    a, b, c = (_values(rng, s, np.int32) for s in [(3, 4), (4, 2), (3, 2)])
    got = gpu_tc.contract("ij,jk->ik", cp.asarray(a), cp.asarray(b), alpha=3, beta=-2,
                          c=cp.asarray(c))
    _same(cp, got, 3 * (a @ b) - 2 * c)


def test_float16_as_numpy(cp, rng):
    a, b = (rng.standard_normal(s).astype(np.float16) for s in [(8, 64), (64, 5)])
    got = gpu_tc.einsum("ij,jk", cp.asarray(a), cp.asarray(b))
    _same(cp, got, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16), exact=False)


@pytest.mark.parametrize("casting", ["no", "safe", "same_kind", "unsafe"])
@pytest.mark.parametrize("dtype", [None, np.float32, np.float64, np.complex128, np.int64])
def test_dtype_and_casting_as_numpy(cp, rng, dtype, casting):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2))
    kwargs = {"dtype": dtype, "casting": casting}
    try:
        expected = np.einsum("ij,jk->ik", a, b, **kwargs)
    except TypeError:
        with pytest.raises(TypeError):
            gpu_tc.einsum("ij,jk->ik", cp.asarray(a), cp.asarray(b), **kwargs)
        return
    got = gpu_tc.einsum("ij,jk->ik", cp.asarray(a), cp.asarray(b), **kwargs)
    _same(cp, got, expected, exact=False)


@pytest.mark.parametrize("out_dtype", [np.float64, np.complex64, np.complex128])
def test_out_of_another_dtype(cp, rng, out_dtype):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4, 2)])
    out = cp.zeros((3, 2), out_dtype)
    assert gpu_tc.einsum("ij,jk->ik", cp.asarray(a), cp.asarray(b), out=out) is out
    _same(cp, out, np.einsum("ij,jk->ik", a, b, out=np.zeros((3, 2), out_dtype)), exact=False)
    with pytest.raises(TypeError, match="rule 'safe'"):
        gpu_tc.einsum("ij,jk->ik", cp.asarray(a), cp.asarray(b), out=cp.zeros((3, 2), np.int32))


@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
def test_order_as_numpy(cp, rng, order):
    a, b = rng.standard_normal((2, 3, 5)), rng.standard_normal((4, 3))
    da, db = cp.asfortranarray(cp.asarray(a)), cp.asfortranarray(cp.asarray(b))
    got = gpu_tc.einsum("...ft,mf->...mt", da, db, order=order)
    _same(cp, got, np.einsum("...ft,mf->...mt", a, b), exact=False)
    if order in "CF":
        assert getattr(got.flags, f"{order.lower()}_contiguous")
    if order == "A":
        assert got.flags.f_contiguous


@pytest.mark.parametrize(
    "optimize",
    [False, True, "optimal", ("greedy", 10**6), ["einsum_path", (2, 3), (0, 2), (0, 1)],
     ["einsum_path", (0, 1, 2, 3)]],
    ids=str,
)
def test_optimize_as_numpy(cp, rng, optimize):
    host = [rng.standard_normal(s) for s in [(4, 5), (5, 6), (6, 3), (3, 7)]]
    got = gpu_tc.einsum("ab,bc,cd,de->ae", *[cp.asarray(x) for x in host], optimize=optimize)
    _same(cp, got, np.einsum("ab,bc,cd,de->ae", *host), exact=False)


def test_sublists_of_numpy_integers(cp, rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    got = gpu_tc.einsum(cp.asarray(a), np.array([0, 1]), cp.asarray(b), [np.int64(1), 2], [0, 2])
    _same(cp, got, a @ b, exact=False)


def test_one_operand_reorder_is_a_view(cp):
    a = cp.arange(12.0).reshape(3, 4)
    view = gpu_tc.einsum("ij->ji", a)
    assert cp.shares_memory(view, a)
    view[0, 0] = -1.0
    assert float(a[0, 0]) == -1.0


@pytest.mark.parametrize("offset", [-4, -1, 0, 1, 2, 5])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_trace_offsets_and_dtypes_as_numpy(cp, rng, offset, dtype):
    a = _values(rng, (3, 4, 5), dtype)
    got = gpu_tc.trace(cp.asarray(a), offset, 0, 2)
    _same(cp, got, np.trace(a, offset, 0, 2))
    got = gpu_tc.trace(cp.asarray(a), offset, axis1=2, axis2=1, dtype=np.float32)
    _same(cp, got, np.trace(a, offset, axis1=2, axis2=1, dtype=np.float32), exact=False)


def test_trace_out_of_another_dtype(cp):
    a = np.arange(18.0).reshape(3, 3, 2)
    out = cp.zeros(2, np.int64)
    assert gpu_tc.trace(cp.asarray(a), out=out) is out
    _same(cp, out, np.trace(a, out=np.zeros(2, np.int64)))


def test_tensordot_and_transpose_on_integers(cp):
    a, b = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    _same(cp, gpu_tc.tensordot(cp.asarray(a), cp.asarray(b), axes=1), np.tensordot(a, b, axes=1))
    _same(cp, gpu_tc.transpose(cp.asarray(a)), a.T)
