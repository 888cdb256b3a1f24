"""The benchmark machinery: suites, peers, timing arithmetic, checking and reports.

No test asserts a timing: only what is computed from timings given to it.
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

import gpu_tc
from gpu_tc.bench import cli_args, peers, report, runner, session, suites, timing
from gpu_tc.bench.peers import PEERS, Peer, Runner

ROOT = Path(__file__).resolve().parents[1]
FAST = runner.Settings(quick=True, repeat=2, min_run_time=0.0, settle=0.0)


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
    assert runner.relative_error(np.array([1.0, 2.0]), np.array([1.0, 2.5])) == pytest.approx(0.2)
    assert runner.relative_error(np.zeros(3), np.zeros(2)) == math.inf
    assert runner.relative_error(np.zeros(0), np.zeros(0)) == 0.0


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
    assert runner.relative_error(np.asarray(got), expected) < 1e-12


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
    assert "| tccg | float64 | cpu | GFLOP/s | 0.500 | 0.500 | 1.41 | 0.707 | 1/2 | 1 |" in summary
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


def test_a_cold_first_call_does_not_size_the_runs():
    calls = []

    def cold_then_fast(case, ops):
        def call():
            calls.append(1)
            if len(calls) == 1:
                time.sleep(0.05)  # plans, page faults: far longer than min_run_time
            return np.einsum(case.expr, *ops)

        return Runner(call)

    [case] = [c for c in suites.cases("overhead", "float64") if c.id == 2]
    settings = runner.Settings(repeat=1, min_run_time=0.01, settle=0.0)
    peer = Peer("cold", "slow first call", "cpu", "numpy", peers.ALL_KINDS, cold_then_fast)
    entry, _, live = runner._prepare(peer, case, case.operands(), settings)
    assert entry["error"] is None and live is not None
    assert live.number > 1  # sized from a warm call, not from the 50 ms first one
