"""GPU routes timed against each other on the first calls (gpu_tc/cuda/timed_plan.py):
cuBLAS against cuTENSOR for a large GEMM-like contraction, cuTENSOR against CuPy's
reduction kernel for float reductions (marker ``gpu``: on CI on the gpu_double
emulation)."""

from __future__ import annotations

import importlib
import re
import time
from typing import Any

import numpy as np
import pytest
from helpers import GPU_EMULATED, assert_close, random_array

import gpu_tc
from gpu_tc.backend import Scalars
from gpu_tc.cache import PLAN_CACHE
from gpu_tc.options import Options, ReduceOp, UnaryOp

pytestmark = pytest.mark.gpu


@pytest.fixture
def cp() -> Any:
    return importlib.import_module("cupy")


def _timed_calls(variants: int = 2) -> int:
    from gpu_tc.cuda import event_timing

    return variants * (event_timing.WARM_UPS + event_timing.ROUNDS)


def _last_round_done(cp: Any) -> None:
    """Wait for the last timed round: its end event follows a hold kernel, and a timing
    is read only once its end event has completed (on the emulation, at once)."""
    cp.cuda.get_current_stream().synchronize()


# A float sum's routes: cuTENSOR, CuPy's reduction kernel, gpu_tc's strided-sum kernel.
SUM_ROUTES = 3


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


# Each reduces 4096 elements of its view of A (the least timed: backend.MIN_REDUCED).
@pytest.mark.parametrize("subscripts, shape", [("bii->b", (128, 32, 32)),
                                                ("ijkj->ik", (16, 16, 16, 16)),
                                                ("abc->ac", (16, 16, 16))])
def test_float_sums_time_cutensor_cupy_and_the_strided_kernel_and_every_result_is_right(
        cp, rng, subscripts, shape):
    host = random_array(rng, shape, "d")
    a = cp.asarray(host)
    expected = np.einsum(subscripts, host)
    plan = gpu_tc.prepare(subscripts, a)
    assert plan.route == "cutensor" and "routes timing 3 routes" in plan.reason
    assert "cutensor not yet, cupy not yet, kernel not yet" in plan.reason
    assert plan._plan.fast is not None  # einsum's warm calls: the timed plan's fresh call
    for _ in range(_timed_calls(SUM_ROUTES) + 2):
        assert_close(gpu_tc.einsum(subscripts, a), expected, "d")
        assert_close(plan.execute(a), expected, "d")
    assert " kept (CUDA events" in plan.reason
    assert plan.route in ("cutensor", "cupy", "kernel")


class _RefusablePlan:
    """Writes ``value`` into D (``seconds`` apart on the host); refuses in its library
    (gpu_tc's BackendError) once ``refuse`` is set."""

    temporary_bytes = 0

    def __init__(self, route: str, value: float, seconds: float, log: list[str]) -> None:
        self.route, self.reason = route, f"{route} reason"
        self.value, self.seconds, self.log, self.refuse = value, seconds, log, False

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        self.log.append(self.route)
        if self.refuse:
            raise gpu_tc.BackendError(f"{self.route}: refused")
        time.sleep(self.seconds)
        d.fill(self.value)


def _settled_fresh_plan(cp: Any) -> tuple[Any, list[str]]:
    """A timed plan of a slow and a quick route whose timings chose the quick one, and
    the log of the routes' calls (cleared)."""
    from gpu_tc.cuda.timed_plan import TimedPlan
    from gpu_tc.problem import TensorSpec

    log: list[str] = []
    d = TensorSpec("ab", (2, 3), (1, 2), "float64")  # Fortran order
    # 30 ms apart: with 5 ms, in one clean-clone CI run (the suite on 2 busy cores) the
    # call after the plan settled on the quick route ran the slow one (not traced: a
    # wider gap leaves a busy host less room to reverse the two).
    plan = TimedPlan([_RefusablePlan("slow", 1.0, 0.03, log),
                      _RefusablePlan("quick", 2.0, 0.0, log)], d)
    results = [plan.fresh() for _ in range(_timed_calls())]
    assert all(r.strides == (8, 16) for r in results)  # new arrays laid out as D
    assert sorted(float(r[0, 0]) for r in results) == [1.0] * 4 + [2.0] * 4
    _last_round_done(cp)
    assert plan.route == "quick" and " kept " in plan.reason
    log.clear()
    return plan, log


def test_a_timed_plan_s_warm_call_into_a_new_result_runs_the_chosen_route(cp):
    plan, log = _settled_fresh_plan(cp)
    got = plan.fresh()
    assert got.strides == (8, 16) and log == ["quick"]
    assert_close(got, np.full((2, 3), 2.0), "d")


def test_a_chosen_route_refused_on_a_warm_call_leaves_the_call_to_the_next(cp):
    plan, log = _settled_fresh_plan(cp)
    plan.plans[1].refuse = True
    assert_close(plan.fresh(), np.full((2, 3), 1.0), "d")
    assert log == ["quick", "slow"]
    assert plan.route == "slow" and "quick failed" in plan.reason


def test_no_memory_for_a_warm_call_s_result_is_the_caller_s_and_keeps_the_route(
        cp, monkeypatch):
    """Out of memory allocating the new result is not the route's failure: it reaches
    the caller, and the chosen route stays."""
    from gpu_tc.cuda import operands

    plan, log = _settled_fresh_plan(cp)

    def no_memory(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError("out of memory allocating 48 bytes")

    monkeypatch.setattr(operands.cupy, "empty", no_memory)
    with pytest.raises(MemoryError):
        plan.fresh()
    monkeypatch.undo()
    assert log == [] and plan.route == "quick" and "failed" not in plan.reason
    assert_close(plan.fresh(), np.full((2, 3), 2.0), "d")


def test_small_reductions_stay_on_cutensor_untimed(cp, rng):
    host = random_array(rng, (63, 64), "d")
    plan = gpu_tc.prepare("ab->a", cp.asarray(host))  # 4032 elements
    assert plan.route == "cutensor" and "routes timing" not in plan.reason
    assert_close(plan.execute(cp.asarray(host)), host.sum(axis=1), "d")
    square = cp.asarray(random_array(rng, (64, 64), "d"))
    assert "routes timing" not in gpu_tc.prepare("ii->", square).reason  # a 64-long diagonal


def test_cupy_reductions_with_alpha_beta_and_other_operators(cp, rng):
    """Each call alternates the routes while timing: CuPy's kernel writes D straight
    (alpha 1, no C) or folds, scales and adds C."""
    host, c_host = random_array(rng, (16, 20, 16), "d"), random_array(rng, (16, 16), "d")
    a, c = cp.asarray(host), cp.asarray(c_host)
    for _ in range(_timed_calls(SUM_ROUTES) + 1):
        assert_close(gpu_tc.reduce("abc->ac", a), host.sum(axis=1), "d")
        assert_close(gpu_tc.reduce("abc->ac", a, alpha=2.0, beta=-1.0, c=c),
                     2 * host.sum(axis=1) - c_host, "d")
        assert_close(gpu_tc.reduce("abc->ac", a, op=ReduceOp.MAX), host.max(axis=1), "d")
        for op, f in ((UnaryOp.SIGMOID, lambda x: 1 / (1 + np.exp(-x))),
                      (UnaryOp.CEIL, np.ceil), (UnaryOp.FLOOR, np.floor)):
            assert_close(gpu_tc.reduce("abc->ac", a, op_a=op), f(host).sum(axis=1), "d")


def test_a_memory_limit_too_small_for_cupys_kernel_leaves_cutensor_alone(cp, rng):
    """CuPy's kernel takes op(A) whole (2 MiB here) and twice the result; cuTENSOR's
    reduction fits its workspace into the limit (it took 128 KiB on an H200)."""
    from gpu_tc.backend import backend_named
    from gpu_tc.problem import ReductionProblem, contiguous_spec

    host = random_array(rng, (64, 64, 64), "d")
    problem = ReductionProblem(contiguous_spec("abc", [64] * 3, "d"),
                               contiguous_spec("ac", [64] * 2, "d"), op_a=UnaryOp.SIGMOID)
    plan = backend_named("gpu").reduction_plan(problem, Options(memory_limit=1 << 20))
    assert plan.route == "cutensor" and "routes timing" not in plan.reason
    assert plan.temporary_bytes <= 1 << 20
    d = cp.empty((64, 64))
    plan.execute((cp.asarray(host),), d, Scalars(), None)
    assert_close(d, (1 / (1 + np.exp(-host))).sum(axis=1), "d")


class _FailingPlan(_SleepingPlan):
    """Fails in its library on every call (as cuBLAS returning a status would)."""

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        from gpu_tc.errors import BackendError

        self.log.append(self.route)
        raise BackendError("refused", status="CUBLAS_STATUS_NOT_SUPPORTED")


def test_a_route_that_fails_leaves_the_call_to_the_other(cp):
    from gpu_tc.cuda.timed_plan import TimedPlan
    from gpu_tc.errors import BackendError

    log: list[str] = []
    plan = TimedPlan([_FailingPlan("broken", 0.0, log), _SleepingPlan("working", 0.0, log)])
    for _ in range(_timed_calls()):
        plan.execute((None,), None, Scalars(), None)
    _last_round_done(cp)
    assert log == ["broken"] + ["working"] * _timed_calls()
    assert plan.route == "working" and "broken failed" in plan.reason
    assert "working kept" in plan.reason
    alone = TimedPlan([_FailingPlan("broken", 0.0, log), _FailingPlan("also", 0.0, log)])
    with pytest.raises(BackendError, match="refused"):
        alone.execute((None,), None, Scalars(), None)


def test_user_errors_are_not_route_failures_and_use_up_no_timing(cp):
    from gpu_tc.cuda.timed_plan import TimedPlan

    class _WrongOnce(_SleepingPlan):
        """Its second call (its first timed one) raises the caller's error."""

        def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
            self.log.append("called")
            if len(self.log) == 2:
                raise gpu_tc.OperandError("operands on another device")

    plan = TimedPlan([_WrongOnce("first", 0.0, []), _SleepingPlan("second", 0.0, [])])
    plan.execute((None,), None, Scalars(), None)  # first's warm-up
    plan.execute((None,), None, Scalars(), None)  # second's warm-up
    with pytest.raises(gpu_tc.OperandError):
        plan.execute((None,), None, Scalars(), None)
    assert "failed" not in plan.reason
    for _ in range(_timed_calls() - 2):
        plan.execute((None,), None, Scalars(), None)
    _last_round_done(cp)
    assert " kept " in plan.reason  # the raising call took no timing round


def test_autotuning_times_the_routes_again_after_the_tuning_calls(cp):
    from gpu_tc.cuda import event_timing
    from gpu_tc.cuda.timed_plan import TimedPlan

    log: list[str] = []
    plan = TimedPlan([_SleepingPlan("tunable", 0.0, log), _SleepingPlan("plain", 0.0, log)])
    for _ in range(_timed_calls()):
        plan.execute((None,), None, Scalars(), None)
    _last_round_done(cp)
    assert " kept " in plan.reason
    assert plan.autotune(5)
    assert "timing 2 routes" in plan.reason and "not yet" in plan.reason
    calls = 2 * (event_timing.WARM_UPS + event_timing.ROUNDS) + 5
    log.clear()
    for _ in range(calls):
        plan.execute((None,), None, Scalars(), None)
    assert log.count("tunable") == event_timing.WARM_UPS + 5 + event_timing.ROUNDS
    _last_round_done(cp)
    assert " kept " in plan.reason


def test_a_stream_being_captured_is_not_timed():
    from gpu_tc.cuda.event_timing import _capturing

    class _Stream:
        def __init__(self, answer: Any) -> None:
            self.answer = answer

        def is_capturing(self) -> bool:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    assert not _capturing(_Stream(False)) and _capturing(_Stream(True))
    assert _capturing(_Stream(RuntimeError("cudaErrorStreamCaptureImplicit")))


@pytest.mark.parametrize("subscripts", ["ijk->ji", "ijk->ij", "ijk->k"])
def test_sums_into_results_in_any_order_are_right_on_each_route(cp, rng, subscripts):
    """CuPy's sum takes D in place only where D is C-ordered (CUB writes its output as
    one); a transposed D gets it through a copy."""
    host = random_array(rng, (8, 16, 64), "d")
    a = cp.asarray(host)
    for _ in range(_timed_calls(SUM_ROUTES) + 1):
        assert_close(gpu_tc.einsum(subscripts, a), np.einsum(subscripts, host), "d")
        out = cp.empty(np.einsum(subscripts, host).shape[::-1]).T
        gpu_tc.einsum(subscripts, a, out=out)
        assert_close(out, np.einsum(subscripts, host), "d")


def test_a_large_gemm_with_no_room_for_temporaries_runs_only_routes_that_take_none(cp, rng):
    """memory_limit=0: cuBLAS in place needs nothing; cuTENSOR joins the timing only
    where it plans with no workspace (2.8.0 on an H200 does; the emulation cannot)."""
    from gpu_tc.backend import backend_named
    from gpu_tc.problem import ContractionProblem, contiguous_spec

    n = 500
    host = [random_array(rng, (n, n), "d"), random_array(rng, (n, n), "d")]
    a, b = (cp.asarray(x) for x in host)
    out = cp.empty((n, n))
    options = Options(memory_limit=0)
    problem = ContractionProblem(*(contiguous_spec(labels, [n, n], "d")
                                   for labels in ("ik", "kj", "ij")))
    primitive = backend_named("gpu").contraction_plan(problem, options)
    routes = [p.route for p in getattr(primitive, "plans", [primitive])]
    assert routes in (["cublas"], ["cublas", "cutensor"])
    assert primitive.temporary_bytes == 0
    plan = gpu_tc.prepare("ik,kj->ij", a, b, out=out, options=options)
    assert plan.temporary_bytes == 0
    for _ in range(12):  # through the timing, when there is one
        plan.execute(a, b, out=out)
    assert_close(out, host[0] @ host[1], "d")


def test_cupys_reduction_checks_the_device(cp, rng):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    from gpu_tc.cuda.cupy_kernels import CupyReductionPlan
    from gpu_tc.problem import ReductionProblem, contiguous_spec

    problem = ReductionProblem(contiguous_spec("ab", [4, 5], "d"), contiguous_spec("a", [4], "d"))
    plan = CupyReductionPlan(problem, "test")
    a, d = cp.asarray(random_array(rng, (4, 5), "d")), cp.empty(4)
    with cp.cuda.Device(1), pytest.raises(gpu_tc.OperandError, match="planned on GPU 0"):
        plan.execute((a,), d, Scalars(), None)


def test_each_timed_round_is_hold_start_event_call_end_event_and_no_other_call(monkeypatch):
    """The order matters: a hold after the start event would be timed, one after the
    call would hold nothing. Warm-ups and calls once settled run plain."""
    from gpu_tc.cuda import event_timing
    from gpu_tc.cuda.timed_plan import TimedPlan

    log: list[str] = []

    class _Event:
        done = True

        def record(self, stream: Any = None) -> None:
            log.append("record")

    class _Hold:
        off, why = False, ""

        def __call__(self) -> None:
            log.append("hold")

    monkeypatch.setattr(event_timing, "HOLD", _Hold())
    monkeypatch.setattr(event_timing.cupy.cuda, "Event", _Event)
    monkeypatch.setattr(event_timing.cupy.cuda, "get_elapsed_time", lambda start, end: 1.0)
    plan = TimedPlan([_SleepingPlan("a", 0.0, log), _SleepingPlan("b", 0.0, log)])
    for _ in range(_timed_calls() + 3):
        plan.execute((None,), None, Scalars(), None)
    assert " kept " in plan.reason
    # The variants take turns: the warm-ups, then the rounds, then the one kept.
    rounds = ["hold", "record", "a", "record", "hold", "record", "b", "record"]
    assert log == (["a", "b"] * event_timing.WARM_UPS + rounds * event_timing.ROUNDS
                   + [plan.route] * 3)


def test_a_round_costs_the_host_time_where_longer_than_the_device_time(monkeypatch):
    """Both variants take 5 ms on the device (as the events say); the first takes
    50 ms to launch, so calls of it could not follow each other faster than that. The
    quick one costs its device time, or a little more where the host stalls in a round."""
    from gpu_tc.cuda import event_timing
    from gpu_tc.cuda.timed_plan import TimedPlan

    monkeypatch.setattr(event_timing.cupy.cuda, "get_elapsed_time", lambda start, end: 5.0)
    log: list[str] = []
    plan = TimedPlan([_SleepingPlan("slow-launch", 0.05, log), _SleepingPlan("quick", 0.0, log)])
    for _ in range(_timed_calls()):
        plan.execute((None,), None, Scalars(), None)
    assert plan.route == "quick", plan.reason
    slow, quick = (float(re.search(rf"{name} ([0-9.]+) ms", plan.reason).group(1))
                   for name in ("slow-launch", "quick"))
    assert slow >= 50 and 5 <= quick < 50, plan.reason


@pytest.mark.parametrize("own_stream", [False, True])
def test_the_hold_kernel_keeps_the_stream_busy(cp, own_stream):
    """The events around it are HOLD_NS apart at least, on the current stream whichever
    it is (the emulation queues the hold as the one thing that takes device time)."""
    import contextlib

    from gpu_double.raw_kernels import RAW_LAUNCHES
    from helpers import GPU_EMULATED

    from gpu_tc.cuda import event_timing

    with cp.cuda.Stream() if own_stream else contextlib.nullcontext():
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        launched = len(RAW_LAUNCHES)
        start.record(stream)
        event_timing.HOLD()
        end.record(stream)
        end.synchronize()
    assert not event_timing.HOLD.off, event_timing.HOLD.why
    if GPU_EMULATED:
        assert RAW_LAUNCHES[launched:] == ["gpu_tc_hold"]
    assert cp.cuda.get_elapsed_time(start, end) >= event_timing.HOLD_NS / 1e6


def test_a_hold_kernel_that_cannot_be_built_is_left_off_and_the_reason_says_so(monkeypatch):
    from gpu_tc.cuda import event_timing, raw_kernels
    from gpu_tc.cuda.timed_plan import TimedPlan

    class _Unbuildable:
        def __init__(self, code: str, name: str) -> None:
            pass

        def compile(self) -> None:
            raise PermissionError("~/.cupy/kernel_cache is read-only")

    hold = event_timing._Hold()
    monkeypatch.setattr(raw_kernels, "_BUILT", {})  # not built before in this process
    monkeypatch.setattr(event_timing.cupy, "RawKernel", _Unbuildable)
    monkeypatch.setattr(event_timing, "HOLD", hold)
    hold()
    assert hold.off and "PermissionError" in hold.why
    hold()  # and not tried again
    log: list[str] = []
    plan = TimedPlan([_SleepingPlan("a", 0.0, log), _SleepingPlan("b", 0.0, log)])
    for _ in range(_timed_calls()):
        plan.execute((None,), None, Scalars(), None)
    assert "no hold kernel (PermissionError: ~/.cupy/kernel_cache is read-only)" in plan.reason


def test_a_hold_kernel_launch_error_is_raised_not_hidden(monkeypatch):
    """A launch fails for a sticky error of earlier work: the call must say so."""
    from gpu_tc.cuda import event_timing, raw_kernels

    class _Broken:
        def __init__(self, code: str, name: str) -> None:
            pass

        def compile(self) -> None:
            pass

        def __call__(self, grid: Any, block: Any, args: Any) -> None:
            raise RuntimeError("cudaErrorIllegalAddress")

    hold = event_timing._Hold()
    monkeypatch.setattr(raw_kernels, "_BUILT", {})
    monkeypatch.setattr(event_timing.cupy, "RawKernel", _Broken)
    with pytest.raises(RuntimeError, match="IllegalAddress"):
        hold()
    assert not hold.off


def _spec(labels: str, x: Any) -> Any:
    from gpu_tc.problem import TensorSpec, dtype_char

    return TensorSpec(labels, tuple(x.shape), tuple(s // x.itemsize for s in x.strides),
                      dtype_char(x.dtype))


@pytest.mark.parametrize("dtype", ["f", "d"])
@pytest.mark.parametrize("case", ["reversed-strided", "batch-diagonals", "all", "wide"])
def test_the_strided_sum_kernel_alone_with_alpha_beta_and_c_as_d(cp, rng, dtype, case):
    """gpu_tc's strided-sum kernel (gpu_tc/cuda/strided_sum.py) on views with negative
    and uneven strides, diagonals, a 0-d result and a transposed D, D = alpha * sum + beta
    * C with C apart and C as D."""
    from cupy.lib.stride_tricks import as_strided

    from gpu_tc.cuda.strided_sum import StridedSumPlan, applies
    from gpu_tc.problem import ReductionProblem

    if case == "reversed-strided":
        base = cp.asarray(random_array(rng, (6, 5, 14), dtype))
        a, labels, out = base[::-1, :, ::2], "abc", "ca"
    elif case == "batch-diagonals":
        base = cp.asarray(random_array(rng, (9, 7, 7), dtype))
        a = as_strided(base, (9, 7), (base.strides[0], base.strides[1] + base.strides[2]))
        labels, out = "bi", "b"
    elif case == "all":
        a, labels, out = cp.asarray(random_array(rng, (33, 65), dtype)), "ab", ""
    else:  # more elements of D than one launch has blocks
        # positive: a float32 sum of two is then within float32 rounding of the exact one
        a, labels, out = cp.asarray(np.abs(random_array(rng, (70000, 2), dtype))), "ab", "a"
    host = cp.asnumpy(a).astype(np.float64)
    want = np.einsum(f"{labels}->{out}", host)
    d = cp.empty(want.shape[::-1], dtype).T  # transposed where D has two axes
    problem = ReductionProblem(_spec(labels, a), _spec(out, d))
    assert applies(problem)
    plan = StridedSumPlan(problem, cp.cuda.runtime.getDevice())
    plan.execute((a,), d, Scalars(), None)
    assert_close(d, want, dtype)
    c = cp.empty(want.shape[::-1], dtype).T  # C has D's layout
    c[...] = cp.asarray(random_array(rng, want.shape, dtype))
    c_host = cp.asnumpy(c).astype(np.float64)
    plan.execute((a,), d, Scalars(alpha=2.0, beta=-1.0), c)
    # each element's error is relative to its terms (the difference may cancel)
    assert_close(d, 2 * want - c_host, dtype, scale=2 * np.abs(want) + np.abs(c_host))
    before = cp.asnumpy(d).astype(np.float64)
    plan.execute((a,), d, Scalars(alpha=0.5, beta=1.0), d)
    assert_close(d, 0.5 * want + before, dtype, scale=0.5 * np.abs(want) + np.abs(before))


def test_the_strided_sum_kernel_takes_float_sums_only():
    from gpu_tc.cuda.strided_sum import applies, layout_table
    from gpu_tc.problem import ReductionProblem, TensorSpec

    a = TensorSpec("abc", (2, 3, 4), (-12, 8, 2), "d")
    d = TensorSpec("ca", (4, 2), (1, 4), "d")
    assert applies(ReductionProblem(a, d))
    # D's labels c, a: extents, strides in A, strides in D; then b: extent, stride in A.
    assert layout_table(ReductionProblem(a, d)).tolist() == [4, 2, 2, -12, 1, 4, 3, 8]
    assert not applies(ReductionProblem(a, d, op_reduce=ReduceOp.MAX))
    assert not applies(ReductionProblem(a, d, op_a=UnaryOp.ABS))
    assert not applies(ReductionProblem(TensorSpec("ab", (2, 3), (3, 1), "l"),
                                        TensorSpec("a", (2,), (1,), "l")))
    assert not applies(ReductionProblem(TensorSpec("ab", (2, 3), (3, 1), "F"),
                                        TensorSpec("a", (2,), (1,), "F")))
    whole = TensorSpec("ab", (4096, 4096), (4096, 1), "d")  # one block would sum 2^24
    assert not applies(ReductionProblem(whole, TensorSpec("", (), (), "d")))
    assert applies(ReductionProblem(whole, TensorSpec("a", (4096,), (1,), "d")))


@pytest.mark.parametrize("c_layout", ["F", "broadcast", "reversed"])
def test_sums_with_c_in_another_layout_than_d_are_right_on_every_route(cp, rng, c_layout):
    """reduce() checks only C's shape: C Fortran-ordered, broadcast or reversed reaches
    each route, which reads it in its own layout (the strided-sum kernel through a copy
    into D)."""
    host = random_array(rng, (16, 20, 16), "d")
    row = random_array(rng, (16,), "d")
    a = cp.asarray(host)
    for _ in range(_timed_calls(SUM_ROUTES) + 2):
        if c_layout == "F":
            c_host = random_array(rng, (16, 16), "d")
            c = cp.asfortranarray(cp.asarray(c_host))
        elif c_layout == "broadcast":
            c_host = np.broadcast_to(row, (16, 16))
            c = cp.broadcast_to(cp.asarray(row), (16, 16))
        else:
            c_host = random_array(rng, (16, 16), "d")
            c = cp.asarray(c_host[::-1, ::-1].copy())[::-1, ::-1]
        got = gpu_tc.reduce("abc->ac", a, alpha=2.0, beta=-1.0, c=c)
        assert_close(got, 2 * host.sum(axis=1) - c_host, "d",
                     scale=2 * np.abs(host).sum(axis=1) + np.abs(c_host))


def test_a_strided_sum_kernel_that_cannot_be_built_is_left_out(cp, rng, monkeypatch):
    from gpu_tc.backend import backend_named
    from gpu_tc.cuda import raw_kernels, strided_sum
    from gpu_tc.problem import ReductionProblem, contiguous_spec

    class _Unbuildable:
        def __init__(self, code: str, name: str) -> None:
            pass

        def compile(self) -> None:
            raise RuntimeError("libnvrtc.so: cannot open shared object file")

    monkeypatch.setattr(strided_sum.cupy, "RawKernel", _Unbuildable)
    monkeypatch.setattr(raw_kernels, "_BUILT", {})
    problem = ReductionProblem(contiguous_spec("abc", [16] * 3, "d"),
                               contiguous_spec("ac", [16] * 2, "d"))
    plan = backend_named("gpu").reduction_plan(problem, Options())
    assert [p.route for p in plan.plans] == ["cutensor", "cupy"]


@pytest.fixture(scope="module")
def simulation(tmp_path_factory: Any) -> Any:
    from cuda_simulation import build

    return build(tmp_path_factory.mktemp("simulation"))


@pytest.mark.skipif(not GPU_EMULATED, reason="runs the CUDA source on the CPU with the "
                    "emulated device's host-memory arrays; a real GPU runs it itself")
# Views of 4096 elements (the least timed), so the kernel is one of the routes timed.
@pytest.mark.parametrize("subscripts, shape", [("bii->b", (128, 32, 32)),
                                                ("abc->ca", (16, 16, 16)),
                                                ("ijkj->ik", (16, 16, 16, 16)),
                                                ("abc->", (16, 16, 16))])
def test_the_strided_sum_source_gets_the_arguments_the_plan_passes(
        cp, rng, monkeypatch, simulation, subscripts, shape):
    """The plan's own launches (argument tuple, grid and block) run the CUDA source,
    simulated on the CPU (tests/cuda_simulation.py), on the views gpu_tc makes (a
    diagonal, a reversed axis, a partial trace, all into one number), into a
    transposed D that is also C."""
    from cuda_simulation import launcher

    from gpu_tc.cuda import event_timing, raw_kernels, strided_sum

    library = simulation
    launches: list[str] = []
    emulated = strided_sum.cupy.RawKernel

    def simulated(code: str, name: str) -> Any:
        if name not in strided_sum.KERNELS.values():  # the timings' hold kernel
            return emulated(code, name)
        kernel = launcher(library, name)(code, name)

        def launch(grid: Any, block: Any, args: Any) -> None:
            launches.append(name)
            kernel(grid, block, args)

        launch.compile = kernel.compile  # type: ignore[attr-defined]
        return launch

    monkeypatch.setattr(raw_kernels, "_BUILT", {})
    monkeypatch.setattr(strided_sum.cupy, "RawKernel", simulated)
    PLAN_CACHE.clear()  # plans timed by earlier tests have settled
    host = random_array(rng, shape, "d")
    reverse = subscripts == "abc->ca"
    a = cp.asarray(host)[..., ::-1] if reverse else cp.asarray(host)
    view = host[..., ::-1] if reverse else host
    want = np.einsum(subscripts, view)
    out = cp.empty(want.shape[::-1]).T
    c_host = random_array(rng, want.shape, "d")
    try:
        for _ in range(_timed_calls(SUM_ROUTES) + 2):
            out[...] = cp.asarray(c_host)
            gpu_tc.reduce(subscripts, a, alpha=2.0, beta=-1.0, c=out, out=out)
            assert_close(out, 2 * want - c_host, "d",
                         scale=2 * np.einsum(subscripts, np.abs(view)) + np.abs(c_host))
    finally:
        PLAN_CACHE.clear()  # the plans made here hold the simulated kernel
    assert len(launches) >= event_timing.WARM_UPS + event_timing.ROUNDS
