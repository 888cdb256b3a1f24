"""The GPU's staged cuBLAS route: A and/or B copied into GEMM order, then one cuBLAS
GEMM, timed against cuTENSOR (the mapping is plain data, tested here without a GPU; the
plan carries the marker ``gpu``: on CI it runs on the gpu_double emulation)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from helpers import assert_close, random_array

import gpu_tc
from gpu_tc.cuda.gemm_route import CUBLAS_OP_T, cublas_gemm, staged_gemm
from gpu_tc.options import Options
from gpu_tc.problem import ContractionProblem, contiguous_spec
from gpu_tc.program import natural_outputs

# TCCG case 31 (float64 extents): A's free labels a, e, d sit around the contracted g.
EXTENTS = {"a": 24, "b": 16, "c": 16, "d": 24, "e": 16, "f": 16, "g": 24}


def _spec(labels: str, extents: dict[str, int] = EXTENTS):
    return contiguous_spec(labels, [extents[x] for x in labels], "d")


def test_case_31_stages_a_for_each_gemm_orientation_of_its_new_result():
    a, b = _spec("aged"), _spec("cbfg")
    preferred, flipped = natural_outputs(a, b, _spec("fedcba"))
    for d, shape in ((preferred, "D = A B, m=9216, n=4096"),
                     (flipped, "D^T = B^T A^T, m=4096, n=9216")):
        problem = ContractionProblem(a, b, d)
        assert cublas_gemm(problem).gemm is None  # A is no matrix in place
        staged = staged_gemm(problem)
        assert staged is not None and staged.staged == (True, False)
        assert staged.reason == ("A copied into GEMM order, then one cuBLAS gemm "
                                 f"({shape}, k=24, batch=1)")
        # A's copy: dense, its labels in the same order, g (contracted) innermost.
        copy = staged.problem.a
        assert copy.labels == "aged" and copy.strides == (16 * 24 * 24, 1, 24 * 24, 24)
        assert staged.problem.b is b and staged.problem.d is d
        assert staged.gemm.k == 24 and staged.gemm.batch == 1


def test_no_staged_route_where_cublas_reads_in_place_or_d_cannot_be_written():
    a, b = _spec("aged"), _spec("cbfg")
    assert staged_gemm(ContractionProblem(a, b, _spec("fedcba"))) is None  # D interleaves
    direct = ContractionProblem(_spec("ag"), _spec("gc"), _spec("ac"))
    assert cublas_gemm(direct).gemm is not None and staged_gemm(direct) is None


def test_both_operands_staged_with_a_batch():
    extents = {"b": 3, "i": 20, "j": 24, "k": 7, "l": 6}  # above gemm.SMALL_FLOPS
    problem = ContractionProblem(_spec("kbil", extents), _spec("ljbk", extents),
                                 _spec("bij", extents))
    staged = staged_gemm(problem)
    assert staged is not None and staged.staged == (True, True)
    assert staged.gemm.batch == 3 and staged.gemm.k == 7 * 6
    assert {staged.gemm.transa, staged.gemm.transb} <= {0, CUBLAS_OP_T}


# On a GPU (or its emulation): a contraction of 2 * 85^4 flops (above the size where
# routes are timed) whose A must be copied for cuBLAS.
N = 85


@pytest.fixture
def cp() -> Any:
    return importlib.import_module("cupy")


@pytest.mark.gpu
def test_staged_cublas_and_cutensor_alternate_and_every_result_is_right(cp, rng):
    from gpu_tc.cuda import event_timing

    host = [random_array(rng, (N, N, N), "d"), random_array(rng, (N, N), "d"),
            random_array(rng, (N, N, N), "d")]
    a, b, c = (cp.asarray(x) for x in host)
    product = np.einsum("akb,kc->abc", host[0], host[1])
    out = cp.empty((N, N, N))
    plan = gpu_tc.prepare("akb,kc->abc", a, b, out=out)
    assert "routes timing 2 routes" in plan.reason
    assert "cutensor not yet, cublas not yet" in plan.reason
    calls = 2 * (event_timing.WARM_UPS + event_timing.ROUNDS)
    for _ in range(calls + 2):
        plan.execute(a, b, out=out)
        assert_close(out, product, "d")
        d = gpu_tc.contract("akb,kc->abc", a, b, alpha=-0.5, beta=2.0, c=c)
        assert_close(d, -0.5 * product + 2.0 * host[2], "d")
    assert " kept (CUDA events" in plan.reason
    if plan.route == "cublas":
        assert "cuBLAS on staged operands: A copied into GEMM order" in plan.reason


@pytest.mark.gpu
def test_a_memory_limit_below_the_copy_leaves_cutensor_alone(cp, rng):
    a = cp.asarray(random_array(rng, (N, N, N), "d"))
    b = cp.asarray(random_array(rng, (N, N), "d"))
    out = cp.empty((N, N, N))
    # A's copy takes 85^3 x 8 bytes (4.9 MB).
    plan = gpu_tc.prepare("akb,kc->abc", a, b, out=out, options=Options(memory_limit=4_000_000))
    assert plan.route == "cutensor" and "routes timing" not in plan.reason
    plan.execute(a, b, out=out)
    assert_close(out, np.einsum("akb,kc->abc", cp.asnumpy(a), cp.asnumpy(b)), "d")
