"""The benchmark machinery: suites, peers, timing arithmetic, checking and reports.

No test asserts a timing: only what is computed from timings given to it.
"""

from __future__ import annotations

import io
import json
import math
import re
import statistics
import time
from pathlib import Path

import numpy as np
import pytest

import gpu_tc
from gpu_tc import cli
from gpu_tc.bench import (
    blas_env,
    cli_args,
    heap,
    peers,
    report,
    rounds,
    runner,
    session,
    suites,
    timing,
    warmup,
)
from gpu_tc.bench.peers import PEERS, Peer, Runner
from gpu_tc.bench.settings import Settings
from gpu_tc.host import blas_variables

ROOT = Path(__file__).resolve().parents[1]
FAST = Settings(quick=True, repeat=2, min_run_time=0.0, settle=0.0)


@pytest.mark.parametrize("dtype, key", [("float64", "sizes"), ("float32", "sizes_float32_variant")])
def test_tccg_cases_use_rowmajor_expressions_and_dtype_sizes(dtype, key):
    table = suites.tccg_table()
    cases = suites.cases("tccg", dtype)
    assert [c.id for c in cases] == list(range(1, 49))
    for case, entry in zip(cases, table):
        assert case.expr == entry["expr_rowmajor"]
        assert case.sizes == entry[key]
        assert case.name == entry["tccg"]
        flops = 2 * math.prod(entry[key].values())
        assert case.work == flops
        if dtype == "float64":
            assert case.work == entry["flops"]


def test_quick_cases_are_small_and_keep_their_expressions():
    full = suites.cases("tccg", "float64")
    quick = suites.cases("tccg", "float64", quick=True)
    for big, small in zip(full, quick):
        assert small.expr == big.expr
        assert small.work <= suites.QUICK_FLOPS
        assert all(n >= 2 for n in small.sizes.values())
    for suite in ("permute", "trace", "reduce"):
        for case in suites.cases(suite, "float32", quick=True):
            assert max(math.prod(s) for s in case.shapes) <= suites.QUICK_ELEMENTS


def test_memory_suite_work_counts_bytes_read_and_written():
    permute = suites.cases("permute", "float64")[0]
    assert permute.expr == "abcd->dcba" and permute.work == 2 * 64**4 * 8
    trace = suites.cases("trace", "float32")[0]
    assert trace.expr == "ii->" and trace.work == (4096 + 1) * 4
    reduce = suites.cases("reduce", "float64")[0]
    assert reduce.expr == "abcd->ad" and reduce.work == (64**4 + 64**2) * 8


def test_complex_flops_count_real_operations():
    [real] = [c for c in suites.cases("overhead", "float64") if c.id == 1]
    [cplx] = [c for c in suites.cases("overhead", "complex128") if c.id == 1]
    assert real.work == 2 * 4**3 and cplx.work == 4 * real.work


def test_metric_values():
    assert suites.GFLOPS.value(0.5, 2e9) == 4.0
    assert suites.MICROSECONDS.value(2e-6, 123.0) == pytest.approx(2.0)
    assert suites.metric("tccg") is suites.GFLOPS and suites.metric("trace") is suites.GBPS


@pytest.mark.parametrize(
    "text, ids", [("1-3,7", {1, 2, 3, 7}), ("5", {5}), (" 2 , 4-5 ", {2, 4, 5})]
)
def test_parse_case_ids(text, ids):
    assert cli_args.parse_case_ids(text) == ids


@pytest.mark.parametrize("text", ["3-1", "0", "a", "1-b", "", ","])
def test_parse_case_ids_rejects(text):
    with pytest.raises(ValueError):
        cli_args.parse_case_ids(text)


def test_timing_of_samples_and_calibration(monkeypatch):
    assert timing.Timing.of([3.0, 1.0, 2.0], 4) == timing.Timing(2.0, 1.0, 3, 4)
    assert timing.calibrate(lambda: None, last=1.0, min_run_time=0.5) == 1
    # A call of exactly 1 ms needs 100 calls for a 0.1 s run.
    monkeypatch.setattr(timing, "run", lambda call, number, sync=None: 1e-3)
    assert timing.calibrate(lambda: None, last=1e-3, min_run_time=0.1) == 100


def test_measure_counts_calls():
    calls = []
    result = timing.measure(lambda: calls.append(1), repeat=3)
    assert result.runs == 3 and result.calls_per_run == 1 and len(calls) == 4
    with pytest.raises(ValueError, match="repeat"):
        timing.measure(lambda: None, repeat=0)


def test_relative_error():
    assert rounds.relative_error(np.array([1.0, 2.0]), np.array([1.0, 2.5])) == pytest.approx(0.2)
    assert rounds.relative_error(np.zeros(3), np.zeros(2)) == math.inf
    assert rounds.relative_error(np.zeros(0), np.zeros(0)) == 0.0


def test_default_peers():
    assert peers.default_peers("cpu", "tccg") == ["numpy", "opt_einsum", "torch", "pytblis"]
    assert "numpy-noopt" in peers.default_peers("cpu", "overhead")
    assert peers.default_peers("gpu", "tccg") == ["cupy", "nvmath", "torch-cuda"]
    assert "nvmath-fn" in peers.default_peers("gpu", "overhead")
    # Only peers that can do the suite's kind of work: opt_einsum returns views for permute.
    assert peers.default_peers("cpu", "permute") == ["numpy", "torch", "pytblis"]
    assert peers.default_peers("gpu", "reduce") == ["cupy", "torch-cuda"]


def test_missing_peer_is_noted_and_dropped(monkeypatch):
    ghost = Peer("ghost", "nothing", "cpu", "no_such_module_for_gpu_tc", peers.ALL_KINDS,
                 lambda case, ops: Runner(lambda: None))
    monkeypatch.setitem(PEERS, "ghost", ghost)
    notes: list[str] = []
    assert session.available_peers(["numpy", "ghost"], notes) == ["numpy"]
    assert notes == ["skipping ghost: module 'no_such_module_for_gpu_tc' is not installed"]


CPU_KINDS = [("overhead", 7), ("overhead", 4), ("permute", 1), ("trace", 3), ("reduce", 1)]


def _cpu_peer_cases():
    """Each CPU peer with each sample case of a kind of work it implements."""
    for suite, case_id in CPU_KINDS:
        [case] = [c for c in suites.cases(suite, "float64", quick=True) if c.id == case_id]
        for name, peer in PEERS.items():
            if peer.device == "cpu" and peers.runs_case(peer, case):
                yield pytest.param(name, case, id=f"{name}-{suite}-{case_id}")


@pytest.mark.parametrize("name, case", list(_cpu_peer_cases()))
def test_each_cpu_peer_agrees_with_gpu_tc(name, case):
    peer = PEERS[name]
    if peer.missing():
        pytest.skip(peer.missing())
    operands = case.operands()
    expected = np.asarray(peers.GPU_TC.build(case, operands).call())
    run = peer.build(case, operands)
    got = run.host(run.call())
    run.close()
    assert rounds.relative_error(np.asarray(got), expected) < 1e-12


def _tiny_plan(extra: list[Peer]) -> runner.SuitePlan:
    cases = [c for c in suites.cases("tccg", "float64", quick=True) if c.id in (1, 12)]
    return runner.SuitePlan("tccg", "float64", cases, [PEERS["numpy"], *extra])


def test_run_records_mismatches_errors_and_ratios():
    def wrong(case, ops):
        return Runner(lambda: np.einsum(case.expr, *ops) * 1.01)

    def broken(case, ops):
        raise RuntimeError("no such kernel")

    plan = _tiny_plan([
        Peer("wrong", "off by 1%", "cpu", "numpy", peers.ALL_KINDS, wrong),
        Peer("broken", "raises", "cpu", "numpy", peers.ALL_KINDS, broken),
    ])
    from gpu_tc.bench.progress import Progress

    doc = runner.run(plan, FAST, Progress(plan.steps(FAST.repeat), io.StringIO(), bar=False))
    assert doc["implementations"] == ["gpu_tc", "numpy", "wrong", "broken"]
    assert doc["ceiling"]["value"] > 0 and "GEMM" in doc["ceiling"]["name"]
    for case in doc["cases"]:
        results = case["results"]
        assert results["gpu_tc"]["route"]
        assert results["gpu_tc"]["reason"].startswith(results["gpu_tc"]["route"].split("+")[0])
        assert results["numpy"]["reason"] is None
        assert results["numpy"]["rel_error"] < 1e-12 and not results["numpy"]["mismatch"]
        assert results["wrong"]["mismatch"]
        assert results["wrong"]["rel_error"] == pytest.approx(0.01, rel=1e-6)
        assert results["broken"]["error"] == "RuntimeError: no such kernel"
        assert case["best_peer"] == "numpy"  # the mismatching peer is never the best
        assert case["ratio_best"] == pytest.approx(
            results["numpy"]["seconds"] / results["gpu_tc"]["seconds"])
    summary = doc["summary"]
    assert [m["peer"] for m in summary["mismatches"]] == ["wrong", "wrong"]
    assert [e["implementation"] for e in summary["errors"]] == ["broken", "broken"]
    assert len(session.failures(doc)) == 2
    for case in doc["cases"]:
        for name in ("gpu_tc", "numpy", "wrong"):
            entry = case["results"][name]
            # Every timed run is kept, seconds per call; the median and best come from them.
            assert len(entry["samples"]) == FAST.repeat and min(entry["samples"]) > 0
            assert entry["seconds"] == statistics.median(entry["samples"])
            assert entry["best"] == min(entry["samples"])
        assert "samples" not in case["results"]["broken"]
        own, peer = case["results"]["gpu_tc"], case["results"]["numpy"]
        assert case["ratio_best_of_runs"] == pytest.approx(peer["best"] / own["best"])
    assert doc["scale"] == 1.0 and doc["settings"]["scale"] == 1.0
    assert doc["environment"]["blas_variables"] == blas_variables()
    assert doc["environment"]["heap"] == heap.pin()  # the run pinned the thresholds
    assert f"C heap: {heap.pin()}." in report.markdown(doc)
    assert doc["warnings"] == blas_env.inspect().warnings
    json.dumps(doc)  # plain data all the way down


def test_resume_keeps_the_checkpointed_cases(tmp_path):
    from gpu_tc.bench.checkpoint import Checkpoint
    from gpu_tc.bench.progress import Progress

    called: list[int] = []

    def recorded(case, ops):
        called.append(case.id)
        return Runner(lambda: np.einsum(case.expr, *ops))

    spy = Peer("spy", "records its cases", "cpu", "numpy", peers.ALL_KINDS, recorded)
    full = _tiny_plan([spy])
    first = runner.SuitePlan(full.suite, full.dtype, full.cases[:1], full.peers)
    key = runner.checkpoint_key(full, FAST)
    assert key == runner.checkpoint_key(first, FAST)  # the key ignores which cases run
    path = tmp_path / "cpu-tccg-float64.partial.json"
    quiet = io.StringIO()
    interrupted = runner.run(first, FAST, Progress(1, quiet, bar=False), Checkpoint(path, key))
    assert list(Checkpoint(path, key).load()) == [1] and called == [1]
    resumed = runner.run(full, FAST, Progress(1, quiet, bar=False), Checkpoint(path, key),
                         resume=True)
    assert called == [1, 12]  # case 1 came from the checkpoint
    assert resumed["cases"][0]["results"] == interrupted["cases"][0]["results"]
    assert [c["id"] for c in resumed["cases"]] == [1, 12]
    other = dict(key, dtype="float32")
    assert Checkpoint(path, other).load() == {}


def _synthetic_doc() -> dict:
    def entry(seconds, mismatch=False):
        return {"seconds": seconds, "value": 1.0 / seconds, "mismatch": mismatch,
                "rel_error": 0.0, "error": None, "route": None}

    cases = [
        {"id": 1, "name": "one", "kind": "einsum", "expr": "ij,jk->ik", "sizes": {}, "work": 1e9,
         "ceiling": None,
         "results": {"gpu_tc": entry(1.0), "p": entry(2.0), "q": entry(0.5, mismatch=True)}},
        {"id": 2, "name": "two", "kind": "einsum", "expr": "i,i->", "sizes": {}, "work": 1e9,
         "ceiling": None,
         "results": {"gpu_tc": entry(4.0), "p": entry(2.0), "q": entry(1.0)}},
    ]
    return {"schema": 1, "suite": "tccg", "dtype": "float64", "backend": "cpu",
            "metric": {"unit": "GFLOP/s", "higher_is_better": True}, "command": "gpu-tc bench x",
            "created": "now", "environment": {"cpu": "test cpu", "cpu_count": 2},
            "implementations": ["gpu_tc", "p", "q"], "ceiling": {"name": "GEMM", "value": 2.0},
            "tolerance": 1e-9, "cases": cases}


def test_analyse_ratios_best_peer_and_geomeans():
    doc = report.analyse(_synthetic_doc())
    first, second = doc["cases"]
    assert first["ratios"] == {"p": 2.0, "q": 0.5}
    assert first["best_peer"] == "p" and first["ratio_best"] == 2.0
    assert second["best_peer"] == "q" and second["ratio_best"] == 0.25
    summary = doc["summary"]
    assert summary["geomean"]["gpu_tc"] == pytest.approx(0.5)
    assert summary["geomean_ratio"]["p"] == pytest.approx(1.0)
    assert summary["geomean_ratio_best"] == pytest.approx(math.sqrt(0.5))
    assert summary["cases_at_or_above_best"] == 1 and summary["cases_compared"] == 2
    assert summary["fraction_of_ceiling"] == pytest.approx(0.25)


def test_analyse_drops_peers_without_any_case():
    doc = _synthetic_doc()
    doc["implementations"].append("absent")
    assert report.analyse(doc)["implementations"] == ["gpu_tc", "p", "q"]


def test_summary_rows_follow_suite_then_dtype_order():
    def doc(suite, dtype):
        d = report.analyse(_synthetic_doc())
        d.update(suite=suite, dtype=dtype)
        return d

    docs = [doc("reduce", "float32"), doc("tccg", "float64"), doc("tccg", "float32")]
    rows = [line.split(" | ")[:2] for line in report.summary_markdown(docs).splitlines()[2:5]]
    assert rows == [["| tccg", "float32"], ["| tccg", "float64"], ["| reduce", "float32"]]


def test_markdown_and_summary_tables():
    doc = report.analyse(_synthetic_doc())
    text = report.markdown(doc)
    assert "### tccg, float64, cpu: GFLOP/s (higher is better)" in text
    assert "Command: `gpu-tc bench x`" in text
    assert "| 1 | one | `ij,jk->ik` | 1.00 | 1.00 | 0.500 | 2.00 (x) | p | 2.00 |  |" in text
    summary = report.summary_markdown([doc])
    row = "| tccg | float64 | cpu | GFLOP/s | 0.500 | 0.500 | 1.41 | 0.707 | - | 1/2 | 1 | 1 |"
    assert row in summary.splitlines()  # no fastest runs recorded: "-"; case 2 below 0.9x
    assert "- mismatch: case 1 q: relative error 0" in text
    assert "- `gpu-tc bench x`" in summary


def test_write_files_and_summary(tmp_path):
    doc = report.analyse(_synthetic_doc())
    paths = report.write(doc, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["cpu-tccg-float64.json", "cpu-tccg-float64.md", "cpu-tccg-float64.png",
                     "summary.md"]
    assert (tmp_path / "cpu-tccg-float64.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.load_all(tmp_path)[0]["summary"] == doc["summary"]
    (tmp_path / "unrelated.json").write_text("[1, 2]")
    assert len(report.load_all(tmp_path)) == 1


def test_numpy_compat_is_reachable_from_bench_peers_namespace():
    # The adapters import gpu_tc lazily; the public functions they call exist.
    for name in ("einsum", "permute", "reduce", "prepare"):
        assert callable(getattr(gpu_tc, name))


@pytest.mark.parametrize("cold_calls", [1, 3])
def test_cold_first_calls_do_not_size_the_runs(cold_calls):
    """A measured plan warms each of its variants up once: several cold calls."""
    calls = []

    def cold_then_fast(case, ops):
        def call():
            calls.append(1)
            if len(calls) <= cold_calls:
                time.sleep(0.05)  # plans, page faults: far longer than min_run_time
            return np.einsum(case.expr, *ops)

        return Runner(call)

    [case] = [c for c in suites.cases("overhead", "float64") if c.id == 2]
    settings = Settings(repeat=1, min_run_time=0.01, settle=0.0)
    peer = Peer("cold", "slow first call", "cpu", "numpy", peers.ALL_KINDS, cold_then_fast)
    entry, _, live = rounds._prepare(peer, case, case.operands(), settings)
    assert entry["error"] is None and live is not None
    assert live.number > 1  # sized from a warm call, not from the 50 ms cold ones


def test_warm_up_goes_on_while_the_plan_says_it_is_measuring(monkeypatch):
    """Untimed calls continue until the plan has chosen (its reason stops saying
    "measuring"), for at most MEASURE_SECONDS."""
    calls = []

    def measured(case, ops):
        def call():
            calls.append(1)
            return np.einsum(case.expr, *ops)

        def reason():
            return "measuring 10 variants" if len(calls) < 100 else "measured: x kept"

        return Runner(call, reason=reason)

    [case] = [c for c in suites.cases("overhead", "float64") if c.id == 2]
    settings = Settings(repeat=1, min_run_time=0.0, settle=0.0)
    peer = Peer("measured", "a measured plan", "cpu", "numpy", peers.ALL_KINDS, measured)
    entry, _, live = rounds._prepare(peer, case, case.operands(), settings)
    assert entry["error"] is None and live is not None
    assert len(calls) >= 100  # past warmup.RETIME_CALLS (48): until the choice was made
    calls.clear()
    monkeypatch.setattr(warmup, "MEASURE_SECONDS", 0.0)
    rounds._prepare(peer, case, case.operands(), settings)
    assert len(calls) <= 1 + warmup.RETIME_CALLS + 1  # no calls past the bound


@pytest.mark.parametrize("pending", [200, 10**9])
def test_warm_up_goes_on_until_the_first_recheck_is_done(monkeypatch, pending):
    """After the choice, untimed calls go on while the reason says its first re-check
    is pending or under way, for at most RECHECK_SECONDS of calls (0.05 s of calls of at
    least 2 ms each where the re-check never comes: 25 at most)."""
    calls: list[int] = []
    before_calibration: list[int] = []
    monkeypatch.setattr(rounds.timing, "calibrate",
                        lambda *args: before_calibration.append(len(calls)) or 1)

    def measured(case, ops):
        def call():
            calls.append(1)
            if len(calls) > 60:
                time.sleep(0.002)
            return np.einsum(case.expr, *ops)

        def reason():
            if len(calls) < 60:
                return "measuring 10 variants"
            if len(calls) < pending:
                return "measured: x kept (...; re-checked after 16 calls, the first ...: pending)"
            if len(calls) < pending + 8:
                return "measured: x kept (...; re-checked after 16 calls: re-checking now)"
            return "measured: x kept (...; re-checked after 128 calls)"

        return Runner(call, reason=reason)

    [case] = [c for c in suites.cases("overhead", "float64") if c.id == 2]
    settings = Settings(repeat=1, min_run_time=0.0, settle=0.0)
    peer = Peer("measured", "a measured plan", "cpu", "numpy", peers.ALL_KINDS, measured)
    monkeypatch.setattr(warmup, "RECHECK_SECONDS", 0.05 if pending > 200 else 10.0)
    entry, _, live = rounds._prepare(peer, case, case.operands(), settings)
    assert entry["error"] is None and live is not None
    if pending == 200:
        assert before_calibration == [208]  # through the pending wait and the re-check
    else:
        assert 61 <= before_calibration[0] <= 60 + 26  # stopped by RECHECK_SECONDS


@pytest.mark.parametrize(("reason", "call_seconds", "waits"), [
    ("x kept (...; re-checked after 73 calls, the first ...: pending)", 0.09, True),
    ("x kept (...; re-checked after 73 calls, the first ...: pending)", 0.5, False),
    ("x kept (...; re-checked after 2 calls, ...: pending); y kept (re-checked after 80 calls)",
     0.5, False),  # the most calls of any choice
    ("x kept (...; re-checked after 73 calls: re-checking now)", 5.0, True),
    ("x kept (...; re-checked after 584 calls)", 0.001, False),
])
def test_a_pending_recheck_is_waited_for_only_within_reach(reason, call_seconds, waits):
    """The warm-up waits for a first re-check whose calls fit in RECHECK_SECONDS (30 s:
    73 calls of 90 ms do, of 0.5 s do not), and through one under way however long."""
    assert warmup.RECHECK_SECONDS == 30.0
    assert warmup._rechecking(reason, call_seconds) is waits


def test_each_warm_up_follows_a_pause():
    """An implementation's first calls (where gpu_tc's plans time their variants) come
    a settling pause after the previous implementation's last call."""
    calls: list[tuple[str, float, float]] = []

    def recorded(name):
        def build(case, ops):
            def call():
                start = time.perf_counter()
                result = np.einsum(case.expr, *ops)
                calls.append((name, start, time.perf_counter()))
                return result

            return Runner(call)

        return Peer(name, "recorded", "cpu", "numpy", peers.ALL_KINDS, build)

    plan = _tiny_plan([recorded("first"), recorded("second")])
    plan = runner.SuitePlan(plan.suite, plan.dtype, plan.cases, plan.peers[1:])
    settings = Settings(quick=True, repeat=1, min_run_time=0.0, settle=0.05)
    from gpu_tc.bench.progress import Progress

    runner.run(plan, settings, Progress(plan.steps(1), io.StringIO(), bar=False))
    starts = [i for i in range(1, len(calls)) if calls[i][0] != calls[i - 1][0]]
    assert len(starts) >= 3  # first -> second in each warm-up and in the timed runs
    for i in starts:
        assert calls[i][1] - calls[i - 1][2] >= 0.05, (calls[i - 1], calls[i])


def test_the_first_call_after_each_pause_is_not_timed():
    """A call right after the settling pause (slow on a VM waking its cores) is untimed."""
    last = [0.0]

    def slow_after_a_pause(case, ops):
        def call():
            if time.perf_counter() - last[0] > 0.02:
                time.sleep(0.05)
            result = np.einsum(case.expr, *ops)
            last[0] = time.perf_counter()
            return result

        return Runner(call)

    plan = _tiny_plan([Peer("waking", "slow after a pause", "cpu", "numpy", peers.ALL_KINDS,
                            slow_after_a_pause)])
    plan = runner.SuitePlan(plan.suite, plan.dtype, plan.cases[:1], plan.peers)
    settings = Settings(quick=True, repeat=2, min_run_time=0.0, settle=0.04)
    from gpu_tc.bench.progress import Progress

    doc = runner.run(plan, settings, Progress(plan.steps(2), io.StringIO(), bar=False))
    [case] = doc["cases"]
    assert max(case["results"]["waking"]["samples"]) < 0.04


def _with_samples(doc: dict) -> dict:
    """The synthetic report with three runs per implementation (median as before)."""
    spreads = {"gpu_tc": (0.5, 2.0), "p": (0.75, 2.5), "q": (0.25, 1.0)}
    for case in doc["cases"]:
        for name, entry in case["results"].items():
            low, high = (f * entry["seconds"] for f in spreads[name])
            entry["samples"] = [high, entry["seconds"], low]
            entry["best"] = low
    return doc


def test_markdown_shows_the_runs_spread_of_gpu_tc_and_the_best_peer():
    doc = report.analyse(_with_samples(_synthetic_doc()))
    first, second = doc["cases"]
    # Case 1: gpu_tc runs 2.0, 1.0, 0.5 s of 1 GFLOP; best peer p 5.0, 2.0, 1.5 s;
    # q mismatches and shows its median only.
    assert first["ratio_best_of_runs"] == pytest.approx(1.5 / 0.5)
    # Case 2: fastest runs gpu_tc 2.0 s, p 1.5 s, q 0.25 s.
    assert second["ratio_best_of_runs"] == pytest.approx(0.25 / 2.0)
    assert doc["summary"]["geomean_ratio_best_of_runs"] == pytest.approx(math.sqrt(3.0 * 0.125))
    text = report.markdown(doc)
    assert ("| 1 | one | `ij,jk->ik` | 1.00 | 1.00 (0.500-2.00) | 0.500 (0.200-0.667) | "
            "2.00 (x) | p | 2.00 |  |") in text
    assert ("| 2 | two | `i,i->` | 1.00 | 0.250 (0.125-0.500) | 0.500 | 1.00 (1.00-4.00) | q | "
            "0.250 |  |") in text
    assert "from each implementation's fastest run instead of its median: 0.612." in text
    summary = report.summary_markdown([doc])
    assert "| tccg | float64 | cpu | GFLOP/s | 0.500 | 0.500 | 1.41 | 0.707 | 0.612 | 1/2 | 1 |" \
        in summary


def test_scale_multiplies_every_tccg_extent():
    full = suites.cases("tccg", "float64")
    half = suites.cases("tccg", "float64", scale=0.5)
    assert full[0].sizes == {"a": 312, "b": 312, "c": 24, "d": 312}
    assert half[0].sizes == {"a": 156, "b": 156, "c": 12, "d": 156}
    for big, small in zip(full, half):
        assert small.expr == big.expr
        assert small.sizes == {x: max(1, math.floor(n / 2 + 0.5)) for x, n in big.sizes.items()}
        assert small.work == 2 * math.prod(small.sizes.values())
    assert suites.scaled({"a": 5, "b": 1}, 0.1) == {"a": 1, "b": 1}  # never below 1
    assert suites.cases("tccg", "float64", scale=2.0)[0].sizes["c"] == 48
    with pytest.raises(ValueError, match="tccg suite only"):
        suites.cases("permute", "float64", scale=0.5)


def test_scale_reaches_settings_checkpoint_key_title_and_file_stem(tmp_path):
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "tccg", "overhead", "--scale", "0.5"])
    request = cli_args.resolve(args, parser)
    assert request.scale == 0.5
    assert session.settings_for("tccg", request, "").scale == 0.5
    assert session.settings_for("overhead", request, "").scale == 1.0  # tccg only
    notes: list[str] = []
    [tccg, *_] = session.plans(request, notes)
    assert tccg.cases[0].sizes == suites.cases("tccg", "float64", scale=0.5)[0].sizes
    assert any("--scale 0.5 applies to the tccg suite only" in note for note in notes)
    plan = _tiny_plan([])
    assert runner.checkpoint_key(plan, FAST) != runner.checkpoint_key(
        plan, Settings(quick=True, scale=0.5, repeat=2, min_run_time=0.0, settle=0.0))
    assert report.stem("cpu", "tccg", "float64", 0.5) == "cpu-tccg-float64-x0.5"
    assert report.stem("cpu", "tccg", "float64", 1.0) == "cpu-tccg-float64"
    # A full and a half-extent report side by side: two files, two summary rows.
    for scale in (1.0, 0.5):
        doc = report.analyse(_synthetic_doc())
        doc["scale"] = scale
        report.write(doc, tmp_path, plot=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cpu-tccg-float64-x0.5.json", "cpu-tccg-float64-x0.5.md", "cpu-tccg-float64.json",
        "cpu-tccg-float64.md", "summary.md"]
    assert (tmp_path / "cpu-tccg-float64-x0.5.md").read_text().startswith(
        "### tccg, float64, cpu, extents x0.5: GFLOP/s (higher is better)")
    rows = (tmp_path / "summary.md").read_text().splitlines()[2:4]
    assert [r.split(" | ")[0] for r in rows] == ["| tccg", "| tccg x0.5"]


def test_bench_scale_end_to_end(tmp_path, capsys):
    argv = ["bench", "tccg", "--quick", "--cases", "1-2", "--peers", "numpy", "--scale", "0.5",
            "--dtype", "float64", "--repeat", "2", "--output", str(tmp_path), "--no-plot"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    for warning in blas_env.inspect().warnings:
        assert f"gpu-tc bench: warning: {warning}" in captured.err
    doc = json.loads((tmp_path / "cpu-tccg-float64-x0.5.json").read_text())
    assert doc["scale"] == 0.5 and doc["settings"]["scale"] == 0.5
    expected = suites.cases("tccg", "float64", quick=True, scale=0.5)[:2]
    assert [c["sizes"] for c in doc["cases"]] == [c.sizes for c in expected]
    markdown = (tmp_path / "cpu-tccg-float64-x0.5.md").read_text()
    assert "### tccg, float64, cpu, extents x0.5: GFLOP/s" in markdown
    for case in doc["cases"]:
        entry = case["results"]["gpu_tc"]
        assert len(entry["samples"]) == 2
        values = [case["work"] / s / 1e9 for s in entry["samples"]]
        cell = (f"{report.number(entry['value'])} "
                f"({report.number(min(values))}-{report.number(max(values))})")
        row = next(line for line in markdown.splitlines() if line.startswith(f"| {case['id']} |"))
        assert re.split(r" \| ", row)[4] == cell


@pytest.mark.parametrize("suite", ["reduce", "permute", "trace"])
def test_every_suite_reports_gpu_tcs_route(suite):
    """The route column names the plan gpu_tc ran (asked after the timed calls), for the
    permute and reduce suites too, the JSON its reason, and each result is checked against
    numpy's."""
    from gpu_tc.bench.progress import Progress

    cases = suites.cases(suite, "float64", quick=True)[:2]
    plan = runner.SuitePlan(suite, "float64", cases, [PEERS["numpy"]])
    doc = runner.run(plan, FAST, Progress(plan.steps(FAST.repeat), io.StringIO(), bar=False))
    expected = {"reduce": "reduce", "trace": "reduce", "permute": "permute"}[suite]
    for case in doc["cases"]:
        assert case["results"]["gpu_tc"]["route"].startswith(expected)
        assert case["results"]["gpu_tc"]["reason"]
        assert case["results"]["numpy"]["rel_error"] < 1e-12
