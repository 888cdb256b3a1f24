"""A new result's GEMM orientation (D = A B or D^T = B^T A^T), chosen by timing."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_tc
from cpu_fallback import measure
from cpu_fallback.measure import MIN_FLOPS, RUN
from cpu_fallback.orientation import OrientationTrial
from gpu_tc import reference
from gpu_tc.backend import Scalars
from gpu_tc.problem import ContractionProblem, TensorSpec, array_layout, contiguous_spec
from gpu_tc.result_layout import natural_outputs

LARGE = "ik,kj->ij"  # 256^3 x 2 flops: above MIN_FLOPS
# Each orientation in turn: a lead-in call, then SAMPLES timed ones.
MEASURED = 2 * RUN
N = 256


def _complex(rng, shape):
    """Complex operands: one GEMM per orientation (the small-K kernel is real only)."""
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _spec(labels: str, extents: tuple[int, ...]):
    return contiguous_spec(labels, list(extents), "d")


def test_natural_outputs_give_both_orientations_preferred_first():
    a, b = _spec("ik", (3, 4)), _spec("kj", (4, 5))
    preferred, flipped = natural_outputs(a, b, _spec("ij", (3, 5)))
    assert preferred.strides == (5, 1) and flipped.strides == (1, 3)
    # The output's last label in M: (N, M) is preferred.
    preferred, flipped = natural_outputs(a, b, _spec("ji", (5, 3)))
    assert preferred.strides == (3, 1) and flipped.strides == (1, 5)


def test_one_orientation_when_a_side_has_no_free_label():
    a, b = _spec("ik", (3, 4)), _spec("k", (4,))
    assert len(natural_outputs(a, b, _spec("i", (3,)))) == 1


def test_a_product_that_sums_nothing_takes_the_order_of_an_operand_with_every_label():
    """No GEMM layout to keep: D in A's memory order where A has every label of D
    (not the shared label outermost, as a batch label is), else in B's."""
    (layout,) = natural_outputs(_spec("ij", (3, 5)), _spec("j", (5,)), _spec("ij", (3, 5)))
    assert layout.strides == (5, 1)
    fortran = TensorSpec("ij", (3, 5), (1, 3), "d")
    (layout,) = natural_outputs(_spec("i", (3,)), fortran, _spec("ij", (3, 5)))
    assert layout.strides == (1, 3)
    # Neither has every label (an outer product): the GEMM's own layout, as before.
    outer = natural_outputs(_spec("i", (3,)), _spec("j", (5,)), _spec("ij", (3, 5)))
    assert outer[0].strides == (5, 1)


def test_flops():
    problem = ContractionProblem(_spec("ik", (3, 4)), _spec("kj", (4, 5)), _spec("ij", (3, 5)))
    assert problem.flops == 2 * 3 * 4 * 5


def _problems() -> tuple[ContractionProblem, ContractionProblem]:
    """ik,kj->ij into a new result laid out (i, j), then (j, i)."""
    a, b = _spec("ik", (3, 4)), _spec("kj", (4, 5))
    return (ContractionProblem(a, b, _spec("ij", (3, 5))),
            ContractionProblem(a, b, _spec("ji", (5, 3)).permuted("ij")))


class _FakePlan:
    route = "_FakePlan"
    temporary_bytes = 0
    fresh = None

    def __init__(self, log: list[int], index: int, seconds: float, clock: list[float]):
        self.log, self.index, self.seconds, self.clock = log, index, seconds, clock

    def execute(self, inputs, out, scalars, addend):
        self.log.append(self.index)
        self.clock[0] += self.seconds


@pytest.mark.parametrize("faster", [0, 1])
def test_trial_alternates_then_keeps_the_faster(monkeypatch, faster):
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    log: list[int] = []
    seconds = (0.001, 0.003) if faster == 0 else (0.003, 0.001)
    problems = _problems()
    outputs = tuple(problem.d for problem in problems)
    plans = (_FakePlan(log, 0, seconds[0], clock), _FakePlan(log, 1, seconds[1], clock))
    trial = OrientationTrial(plans, problems, array_layout)
    for _ in range(MEASURED + 3):
        d = np.empty((3, 5)) if trial.output is outputs[0] else np.empty((5, 3)).T
        trial.execute((None, None), d, Scalars(), None)
    assert log[:MEASURED] == [0] * RUN + [1] * RUN  # each run led in by an untimed call
    assert log[MEASURED:] == [faster] * 3
    assert trial.choice.settled and trial.plan is plans[faster]
    assert trial.problem is problems[faster]
    assert f"{'flipped' if faster else 'preferred'} _FakePlan kept" in trial.reason


def test_a_result_allocated_in_one_layout_runs_a_plan_of_that_layout(monkeypatch):
    """Whatever the trial wants next, it runs a plan that writes the layout ``out`` has
    (a result allocated by another thread before the choice moved on)."""
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    log: list[int] = []
    plans = (_FakePlan(log, 0, 0.001, clock), _FakePlan(log, 1, 0.001, clock))
    trial = OrientationTrial(plans, _problems(), array_layout)
    for _ in range(5):
        trial.execute((None, None), np.empty((5, 3)).T, Scalars(), None)
    assert log == [1] * 5


def test_a_warm_call_into_a_new_result_runs_the_layout_the_trial_picks(monkeypatch):
    """The trial's fresh call (the einsum's warm path) times the variants as execute()
    does, then keeps the faster, each result new and laid out as its variant writes."""
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    log: list[int] = []
    plans = (_FakePlan(log, 0, 0.003, clock), _FakePlan(log, 1, 0.001, clock))
    trial = OrientationTrial(plans, _problems(), array_layout)
    results = [trial.fresh(None, None) for _ in range(MEASURED + 3)]
    assert log[:MEASURED] == [0] * RUN + [1] * RUN
    assert log[MEASURED:] == [1] * 3
    assert [r.flags.c_contiguous for r in results] == [True] * RUN + [False] * (RUN + 3)
    assert all(r.shape == (3, 5) for r in results)


def test_large_einsum_alternates_layouts_and_every_result_is_right(rng, without_mkl):
    a, b = _complex(rng, (N, N)), _complex(rng, (N, N))
    expected = reference.einsum(LARGE, a, b)
    layouts = []
    for _ in range(MEASURED + 2):
        result = gpu_tc.einsum(LARGE, a, b)
        np.testing.assert_allclose(result, expected, rtol=1e-10, atol=1e-10)
        layouts.append(result.flags.c_contiguous)
    assert layouts[:MEASURED] == [True] * RUN + [False] * RUN
    assert len(set(layouts[MEASURED:])) == 1  # settled
    plan = gpu_tc.prepare(LARGE, a, b)
    assert "GEMM orientation and lowering measuring 2 variants" in plan.reason


def test_out_and_small_problems_are_not_measured(rng):
    a, b = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    out = np.empty((N, N))
    for _ in range(3):
        gpu_tc.einsum(LARGE, a, b, out=out)
    assert "orientation" not in gpu_tc.prepare(LARGE, a, b, out=out).reason
    small = rng.standard_normal((16, 16))
    assert ContractionProblem(
        _spec("ik", (16, 16)), _spec("kj", (16, 16)), _spec("ij", (16, 16))
    ).flops < MIN_FLOPS
    for _ in range(5):
        assert gpu_tc.einsum(LARGE, small, small).flags.c_contiguous
    assert "orientation" not in gpu_tc.prepare(LARGE, small, small).reason


@pytest.mark.parametrize(
    "expr, a_shape, b_shape",
    [
        ("ij,zjk->zik", (64, 64), (1, 64, 512)),  # a batch label of extent 1
        ("...ij,...jk->...ik", (1, 3, 64, 64), (1, 3, 64, 512)),
    ],
)
def test_a_size_one_label_does_not_stop_the_orientation_trial(expr, a_shape, b_shape):
    """A new result allocated for a label of extent 1 has a stride of its own on that
    axis; the trial still recognises the layout (it had found none and failed), on
    every call while it measures and after."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    expected = np.einsum(expr, a, b)
    gpu_tc.plan_cache().clear()
    for _ in range(30):
        np.testing.assert_allclose(gpu_tc.einsum(expr, a, b), expected, rtol=1e-12, atol=1e-12)
