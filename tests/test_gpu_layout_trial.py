"""The GPU's choice of a new result's layout by timing its first calls with CUDA events
(gpu_tc/cuda/layout_trial.py; marker ``gpu``: on CI on the gpu_double emulation)."""

from __future__ import annotations

import importlib
import time
from typing import Any

import numpy as np
import pytest
from helpers import assert_close, random_array

import gpu_tc
from gpu_tc.backend import Scalars
from gpu_tc.problem import ContractionProblem, contiguous_spec
from gpu_tc.result_layout import natural_outputs

pytestmark = pytest.mark.gpu

# m = (a, b), n = (c), the output's last label in m: preferred (c, a, b) in memory,
# flipped (a, b, c), asked (b, c, a). 2 * 85^4 flops: above the trial's MIN_FLOPS.
EXPR = "abk,kc->bca"
N = 85


@pytest.fixture
def cp() -> Any:
    return importlib.import_module("cupy")


def _problems(n: int = 4) -> tuple[ContractionProblem, ContractionProblem]:
    a, b = contiguous_spec("abk", [n] * 3, "d"), contiguous_spec("kc", [n] * 2, "d")
    preferred, flipped = natural_outputs(a, b, contiguous_spec("bca", [n] * 3, "d"))
    return ContractionProblem(a, b, preferred), ContractionProblem(a, b, flipped)


def _memory_order(spec) -> str:
    return "".join(sorted(spec.labels, key=lambda x: -spec.strides[spec.labels.index(x)]))


def test_three_layouts_where_the_one_asked_is_neither_orientation():
    from gpu_tc.cuda.layout_trial import layouts

    found = layouts(_problems())
    assert [name for name, _ in found] == ["preferred", "flipped", "asked"]
    assert [_memory_order(p.d) for _, p in found] == ["cab", "abc", "bca"]
    # "ik,kj->ji": the preferred layout is the one asked.
    a, b = contiguous_spec("ik", [3, 4], "d"), contiguous_spec("kj", [4, 5], "d")
    both = natural_outputs(a, b, contiguous_spec("ji", [5, 3], "d"))
    found = layouts([ContractionProblem(a, b, d) for d in both])
    assert [name for name, _ in found] == ["preferred", "flipped"]


class _SleepingPlan:
    """Sleeps on the host between the events: on an idle stream (and on the emulation)
    the events are that far apart, so the trial sees these seconds."""

    route = "sleeping"
    reason = "sleeps"
    temporary_bytes = 0

    def __init__(self, log: list[int], index: int, seconds: float) -> None:
        self.log, self.index, self.seconds = log, index, seconds

    def execute(self, inputs: Any, out: Any, scalars: Scalars, addend: Any) -> None:
        self.log.append(self.index)
        time.sleep(self.seconds)


class _BrokenPlan(_SleepingPlan):
    """Fails in its library on every call (logged as -1)."""

    route = "broken"

    def execute(self, inputs: Any, out: Any, scalars: Scalars, addend: Any) -> None:
        from gpu_tc.errors import BackendError

        self.log.append(-1)
        raise BackendError("refused", status="CUBLAS_STATUS_NOT_SUPPORTED")


@pytest.mark.parametrize("fastest", [0, 1, 2])
def test_each_layout_in_turn_then_the_fastest(cp, fastest):
    from gpu_tc.cuda import event_timing, layout_trial
    from gpu_tc.cuda.backend import GpuBackend
    from gpu_tc.run import allocate

    log: list[int] = []
    seconds = [0.012, 0.012, 0.012]
    seconds[fastest] = 0.002
    candidates = layout_trial.layouts(_problems())
    plans = iter(_SleepingPlan(log, i, s) for i, s in enumerate(seconds))
    trial = layout_trial.LayoutTrial(candidates, lambda problem: next(plans))
    assert "timing 3 layouts" in trial.reason and "preferred not yet" in trial.reason
    calls = 3 * (event_timing.WARM_UPS + event_timing.ROUNDS)
    for _ in range(calls + 2):
        out = allocate(GpuBackend(), trial.output)
        trial.execute((None, None), out, Scalars(), None)
        cp.cuda.get_current_stream().synchronize()
    assert log[:calls] == [0, 1, 2] * (calls // 3)
    assert log[calls:] == [fastest] * 2
    assert trial.plan is trial.plans[fastest] and trial.problem is candidates[fastest][1]
    assert f"{candidates[fastest][0]} kept" in trial.reason


def test_a_result_in_a_layout_runs_the_plan_of_that_layout(cp):
    from gpu_tc.cuda import layout_trial
    from gpu_tc.cuda.backend import GpuBackend
    from gpu_tc.run import allocate

    log: list[int] = []
    candidates = layout_trial.layouts(_problems())
    plans = iter(_SleepingPlan(log, i, 0.0) for i in range(3))
    trial = layout_trial.LayoutTrial(candidates, lambda problem: next(plans))
    asked = allocate(GpuBackend(), candidates[2][1].d)
    for _ in range(6):
        trial.execute((None, None), asked, Scalars(), None)
    assert log == [2] * 6
    with pytest.raises(ValueError, match="none of the layouts"):
        trial.execute((None, None), cp.empty((4, 4, 4)).transpose(1, 0, 2), Scalars(), None)


def test_large_einsum_tries_each_layout_and_every_result_is_right(cp, rng):
    from gpu_tc.cuda import event_timing

    host = [random_array(rng, (N, N, N), "d"), random_array(rng, (N, N), "d")]
    a, b = (cp.asarray(x) for x in host)
    expected = np.einsum(EXPR, *host)
    # preferred and flipped each on cuBLAS (read in place) and cuTENSOR; asked on cuTENSOR.
    variants = 5
    calls = variants * (event_timing.WARM_UPS + event_timing.ROUNDS)
    plan = gpu_tc.prepare(EXPR, a, b)
    assert "layout of the new result timing 5 layouts and routes" in plan.reason
    assert "preferred cublas not yet, preferred cutensor not yet" in plan.reason
    for run in (lambda: gpu_tc.einsum(EXPR, a, b), lambda: plan.execute(a, b)):
        orders = []
        for _ in range(calls + 3):
            result = run()
            assert_close(result, expected, "d")
            orders.append(tuple(np.argsort([-s for s in result.strides])))
        assert len(set(orders[:variants])) == 3  # the three layouts, each in turn
        assert len(set(orders[calls:])) == 1  # settled
    assert " kept (CUDA events" in plan.reason


def test_small_contractions_and_out_are_not_timed(cp, rng):
    host = [random_array(rng, (8, 8, 8), "d"), random_array(rng, (8, 8), "d")]
    a, b = (cp.asarray(x) for x in host)
    for _ in range(3):
        assert_close(gpu_tc.einsum(EXPR, a, b), np.einsum(EXPR, *host), "d")
    assert "layout of the new result" not in gpu_tc.prepare(EXPR, a, b).reason
    big = [cp.asarray(random_array(rng, shape, "d")) for shape in ((N, N, N), (N, N))]
    out = cp.empty((N, N, N))
    assert "layout of the new result" not in gpu_tc.prepare(EXPR, *big, out=out).reason


def test_a_layout_that_cannot_be_planned_is_left_out(cp):
    from gpu_tc.cuda import layout_trial
    from gpu_tc.errors import MemoryLimitError

    candidates = layout_trial.layouts(_problems())
    log: list[int] = []

    def plan_for(problem: ContractionProblem) -> Any:
        index = [p for _, p in candidates].index(problem)
        if index == 2:
            raise MemoryLimitError("the asked layout's workspace is above memory_limit", 1)
        return _SleepingPlan(log, index, 0.0)

    trial = layout_trial.LayoutTrial(candidates, plan_for)
    assert "preferred not yet, flipped not yet" in trial.reason and "asked" not in trial.reason

    def preferred_fails(problem: ContractionProblem) -> Any:
        raise MemoryLimitError("no layout fits", 1)

    with pytest.raises(MemoryLimitError):
        layout_trial.LayoutTrial(candidates, preferred_fails)


def test_a_layout_whose_route_fails_runs_its_other_route(cp):
    from gpu_tc.cuda import layout_trial
    from gpu_tc.cuda.backend import GpuBackend
    from gpu_tc.cuda.timed_plan import TimedPlan
    from gpu_tc.run import allocate

    log: list[int] = []

    candidates = layout_trial.layouts(_problems())[:1]
    routes = [_BrokenPlan(log, 0, 0.0), _SleepingPlan(log, 1, 0.0)]
    trial = layout_trial.LayoutTrial(candidates, lambda problem: TimedPlan(routes))
    assert "timing 2 layouts and routes" in trial.reason
    for _ in range(5):
        trial.execute((None, None), allocate(GpuBackend(), trial.output), Scalars(), None)
    assert log == [-1, 1, 1, 1, 1, 1] and "preferred broken failed" in trial.reason


def test_a_failed_route_of_one_layout_is_not_run_again(cp):
    from gpu_tc.cuda import layout_trial
    from gpu_tc.cuda.backend import GpuBackend
    from gpu_tc.cuda.timed_plan import TimedPlan
    from gpu_tc.run import allocate

    log: list[int] = []

    candidates = layout_trial.layouts(_problems())[:2]
    plans = iter([TimedPlan([_BrokenPlan(log, 0, 0.0), _SleepingPlan(log, 0, 0.004)]),
                  _SleepingPlan(log, 1, 0.0)])
    trial = layout_trial.LayoutTrial(candidates, lambda problem: next(plans))
    for _ in range(20):
        trial.execute((None, None), allocate(GpuBackend(), trial.output), Scalars(), None)
    assert log.count(-1) == 1 and "flipped kept" in trial.reason
    # A result in the preferred layout (an ``out`` a caller gave): its working route.
    log.clear()
    trial.execute((None, None), allocate(GpuBackend(), candidates[0][1].d), Scalars(), None)
    assert log == [0]


def test_autotuning_a_layout_trial_times_it_again(cp):
    from gpu_tc.cuda import layout_trial
    from gpu_tc.cuda.backend import GpuBackend
    from gpu_tc.run import allocate

    class _Tunable(_SleepingPlan):
        def autotune(self, iterations: int) -> bool:
            return self.index == 0

    log: list[int] = []
    candidates = layout_trial.layouts(_problems())
    plans = iter(_Tunable(log, i, 0.0) for i in range(3))
    trial = layout_trial.LayoutTrial(candidates, lambda problem: next(plans))
    for _ in range(12):
        trial.execute((None, None), allocate(GpuBackend(), trial.output), Scalars(), None)
    cp.cuda.get_current_stream().synchronize()  # the last round's end event done
    assert " kept " in trial.reason
    assert trial.autotune(2) and "timing 3 layouts" in trial.reason
