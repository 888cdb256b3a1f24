"""GPU routes timed against each other on the first calls (gpu_tc/cuda/timed_plan.py):
cuBLAS against cuTENSOR for a large GEMM-like contraction, cuTENSOR against CuPy's
reduction kernel for float reductions (marker ``gpu``: on CI on the gpu_double
emulation)."""

from __future__ import annotations

import importlib
import time
from typing import Any

import numpy as np
import pytest
from helpers import assert_close, random_array

import gpu_tc
from gpu_tc.backend import Scalars
from gpu_tc.options import Options, ReduceOp

pytestmark = pytest.mark.gpu


@pytest.fixture
def cp() -> Any:
    return importlib.import_module("cupy")


def _timed_calls() -> int:
    from gpu_tc.cuda import event_timing

    return 2 * (event_timing.WARM_UPS + event_timing.ROUNDS)


class _SleepingPlan:
    """Sleeps between the events (on an idle stream, and on the emulation, the events
    are that far apart)."""

    temporary_bytes = 0

    def __init__(self, route: str, seconds: float, log: list[str]) -> None:
        self.route, self.seconds, self.log = route, seconds, log
        self.reason = f"{route} reason"

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        self.log.append(self.route)
        time.sleep(self.seconds)

    def autotune(self, iterations: int) -> bool:
        return self.route == "tunable"


@pytest.mark.parametrize("fastest", ["first", "second"])
def test_routes_alternate_then_the_fastest_runs(cp, fastest):
    from gpu_tc.cuda.timed_plan import TimedPlan

    log: list[str] = []
    slow, quick = 0.012, 0.002
    plan = TimedPlan([_SleepingPlan("first", quick if fastest == "first" else slow, log),
                      _SleepingPlan("second", quick if fastest == "second" else slow, log)])
    assert plan.route == "first" and "routes timing 2 routes" in plan.reason
    for _ in range(_timed_calls() + 2):
        plan.execute((None,), None, Scalars(), None)
        cp.cuda.get_current_stream().synchronize()
    assert log[:_timed_calls()] == ["first", "second"] * (_timed_calls() // 2)
    assert log[_timed_calls():] == [fastest] * 2
    assert plan.route == fastest and plan.reason.startswith(f"{fastest} reason")
    assert f"{fastest} kept" in plan.reason


def test_autotune_reaches_every_route():
    from gpu_tc.cuda.timed_plan import TimedPlan

    log: list[str] = []
    assert TimedPlan([_SleepingPlan("a", 0, log), _SleepingPlan("tunable", 0, log)]).autotune(2)
    assert not TimedPlan([_SleepingPlan("a", 0, log), _SleepingPlan("b", 0, log)]).autotune(2)


def test_a_large_gemm_times_cublas_against_cutensor_and_every_result_is_right(cp, rng):
    n = 400  # 2 * 400^3 flops: above MIN_FLOPS
    host = [random_array(rng, (n, n), "d"), random_array(rng, (n, n), "d")]
    a, b = (cp.asarray(x) for x in host)
    expected = host[0] @ host[1]
    plan = gpu_tc.prepare("ik,kj->ij", a, b, out=cp.empty((n, n)))
    assert plan.route == "cublas" and "routes timing 2 routes" in plan.reason
    assert "cublas not yet, cutensor not yet" in plan.reason
    for _ in range(_timed_calls() + 2):
        out = cp.empty((n, n))
        plan.execute(a, b, out=out)
        assert_close(out, expected, "d")
    assert " kept (CUDA events" in plan.reason
    small = [cp.asarray(random_array(rng, (8, 8), "d")) for _ in range(2)]
    assert "routes timing" not in gpu_tc.prepare("ik,kj->ij", *small).reason


@pytest.mark.parametrize("subscripts, shape", [("ii->", (64, 64)), ("bii->b", (16, 8, 8)),
                                                ("ijkj->ik", (6, 5, 4, 5)), ("abc->ac", (7, 6, 5))])
def test_float_reductions_time_cutensor_against_cupy_and_every_result_is_right(
        cp, rng, subscripts, shape):
    host = random_array(rng, shape, "d")
    a = cp.asarray(host)
    expected = np.einsum(subscripts, host)
    plan = gpu_tc.prepare(subscripts, a)
    assert plan.route == "cutensor" and "routes timing 2 routes" in plan.reason
    for _ in range(_timed_calls() + 2):
        assert_close(gpu_tc.einsum(subscripts, a), expected, "d")
        assert_close(plan.execute(a), expected, "d")
    assert " kept (CUDA events" in plan.reason and plan.route in ("cutensor", "cupy")


def test_cupy_reductions_with_alpha_beta_and_other_operators(cp, rng):
    """Each call alternates the routes while timing: CuPy's kernel writes D straight
    (alpha 1, no C) or folds, scales and adds C."""
    host, c_host = random_array(rng, (6, 5, 4), "d"), random_array(rng, (6, 4), "d")
    a, c = cp.asarray(host), cp.asarray(c_host)
    for _ in range(_timed_calls() + 1):
        assert_close(gpu_tc.reduce("abc->ac", a), host.sum(axis=1), "d")
        assert_close(gpu_tc.reduce("abc->ac", a, alpha=2.0, beta=-1.0, c=c),
                     2 * host.sum(axis=1) - c_host, "d")
        assert_close(gpu_tc.reduce("abc->ac", a, op=ReduceOp.MAX), host.max(axis=1), "d")
        assert_close(gpu_tc.trace(a[:, :, :4].transpose(1, 0, 2)[:4]),
                     np.trace(host[:, :, :4].transpose(1, 0, 2)[:4]), "d")


def test_a_memory_limit_too_small_for_cupys_kernel_leaves_cutensor_alone(cp, rng):
    a = cp.asarray(random_array(rng, (64, 64, 64), "d"))
    # CuPy's kernel counts twice the result (64 x 64 float64: 64 KiB) as temporaries.
    plan = gpu_tc.prepare("abc->ac", a, options=Options(memory_limit=40_000))
    assert plan.route == "cutensor" and "routes timing" not in plan.reason
    assert_close(plan.execute(a), cp.asnumpy(a).sum(axis=1), "d")
