"""gpu_tc as an opt_einsum backend: contract(..., backend="gpu_tc") runs through gpu_tc."""

from __future__ import annotations

import numpy as np
import opt_einsum
import pytest

import gpu_tc
from gpu_tc import reference

# (expression, operand shapes): multi-operand networks whose pairwise steps take
# opt_einsum's tensordot (+ transpose) path and its einsum path.
NETWORKS = [
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 3)]),
    ("abc,cd,db->a", [(4, 5, 6), (6, 7), (7, 5)]),
    ("ij,jk,kl,lm->mi", [(3, 4), (4, 5), (5, 6), (6, 2)]),
    ("i,ij,j->", [(6,), (6, 7), (7,)]),
    ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
    ("abcd,dbea,ec->", [(3, 4, 5, 6), (6, 4, 2, 3), (2, 5)]),
    ("ij,ik,il->jkl", [(4, 2), (4, 3), (4, 5)]),
]


@pytest.mark.parametrize("expr, shapes", NETWORKS, ids=[n[0] for n in NETWORKS])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_contract_with_gpu_tc_backend_matches_numpy(rng, expr, shapes, dtype):
    operands = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if np.dtype(dtype).kind == "c":
        operands = [x + 1j * rng.standard_normal(x.shape) for x in operands]
    before = gpu_tc.plan_cache().stats()
    got = opt_einsum.contract(expr, *operands, backend="gpu_tc")
    after = gpu_tc.plan_cache().stats()
    expected = np.einsum(expr, *operands)
    rtol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(got, reference.einsum(expr, *operands), rtol=rtol, atol=rtol)
    assert np.asarray(got).dtype == expected.dtype
    # Every pairwise step went through gpu_tc's plan cache.
    assert after.hits + after.misses > before.hits + before.misses


def test_backend_functions_are_gpu_tc_s():
    from opt_einsum.backends.dispatch import get_func

    assert get_func("tensordot", "gpu_tc") is gpu_tc.tensordot
    assert get_func("transpose", "gpu_tc") is gpu_tc.transpose
    assert get_func("einsum", "gpu_tc") is gpu_tc.einsum


def test_new_shapes_build_new_plans(rng):
    """Shapes no other test uses: the first contraction must miss the cache."""
    operands = [rng.standard_normal(s) for s in [(11, 13), (13, 17), (17, 19)]]
    before = gpu_tc.plan_cache().stats().misses
    got = opt_einsum.contract("ab,bc,cd->da", *operands, backend="gpu_tc")
    assert gpu_tc.plan_cache().stats().misses > before
    np.testing.assert_allclose(got, np.einsum("ab,bc,cd->da", *operands), rtol=1e-12)


def test_contract_expression_reused_with_gpu_tc_backend(rng):
    shapes = [(4, 5), (5, 6), (6, 4)]
    expression = opt_einsum.contract_expression("ij,jk,ki->", *shapes)
    for _ in range(2):
        operands = [rng.standard_normal(s) for s in shapes]
        got = expression(*operands, backend="gpu_tc")
        np.testing.assert_allclose(got, np.einsum("ij,jk,ki->", *operands), rtol=1e-12)
