"""A first end-to-end check of the public surface against the reference kernel."""

import numpy as np

import gpu_tc
from gpu_tc import reference


def test_gemm_like_matches_reference(rng):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 5))
    expected = reference.einsum("ij,jk->ik", a, b)
    np.testing.assert_allclose(gpu_tc.einsum("ij,jk->ik", a, b), expected)


def test_trace_reads_diagonal(rng):
    a = rng.standard_normal((5, 5))
    assert np.isclose(gpu_tc.trace(a), np.trace(a))
