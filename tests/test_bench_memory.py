"""Peak extra memory in the benchmark reports: the probe, its failures, the runner, the files.

The probes here run real processes on small cases (a second or so each); the values
checked are bytes computed by hand from the cases' extents.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu_tc import cli
from gpu_tc.bench import cli_args, memory, memory_probe, peers, report, runner, session, suites
from gpu_tc.bench.checkpoint import Checkpoint
from gpu_tc.bench.peers import PEERS, Peer, Runner
from gpu_tc.bench.progress import Progress
from gpu_tc.bench.settings import Settings
from gpu_tc.bench.suites import Case

MIB = 1 << 20
LINUX = sys.platform.startswith("linux")
needs_linux = pytest.mark.skipif(not LINUX, reason="the probe reads Linux's /proc/self/status")
FAST = Settings(quick=True, repeat=1, min_run_time=0.0, settle=0.0)

# A is 64 x 512 x 64 float64: 16 MiB; the result 64 x 64 x 16: 0.5 MiB.
SIZES = {"a": 64, "b": 64, "c": 512, "d": 16}
A_BYTES = 64 * 512 * 64 * 8
RESULT_BYTES = 64 * 64 * 16 * 8


def _case(expr: str) -> Case:
    return Case("tccg", 1, "known", "einsum", expr, dict(SIZES), "float64", 1.0)


def _can_reset_peak() -> bool:
    from gpu_tc.bench.memory_probe import reset_peak

    return reset_peak()


def _blas_threads() -> int:
    """The threads NumPy's BLAS runs with (a fresh probe process starts the same way)."""
    from threadpoolctl import threadpool_info

    return max((pool["num_threads"] for pool in threadpool_info()
                if pool.get("user_api") == "blas"), default=1)


@needs_linux
def test_probe_measures_the_copy_numpy_makes_of_a_transposed_operand():
    # numpy.einsum(optimize=True) hands "acb,cd->abd" to tensordot, which copies A into
    # (a, b, c) order before one GEMM: 16 MiB of temporary. "abc,cd->abd" needs no copy.
    copying = memory.measure(_case("acb,cd->abd"), "numpy", "cpu")
    in_place = memory.measure(_case("abc,cd->abd"), "numpy", "cpu")
    for found in (copying, in_place):
        assert found.reason is None
        assert found.result_bytes == RESULT_BYTES
        assert found.baseline_bytes > A_BYTES + 512 * 16 * 8  # the inputs are resident
        assert found.peak_bytes >= found.baseline_bytes + RESULT_BYTES + found.peak_extra_bytes
        assert found.hwm_reset is _can_reset_peak() and found.exact
    # Beside the copy: OpenBLAS's packing buffers, touched per BLAS thread (16 threads
    # of a 16-core GPU host took 4.5 MiB more than the copy, and 4.5 MiB without one).
    assert A_BYTES <= copying.peak_extra_bytes <= A_BYTES + 4 * MIB + _blas_threads() * MIB // 2
    assert in_place.peak_extra_bytes < A_BYTES / 2
    # What both share (the BLAS's buffers, code pages) cancels: the copy is left.
    assert copying.peak_extra_bytes - in_place.peak_extra_bytes == pytest.approx(A_BYTES,
                                                                                 abs=MIB)


@needs_linux
def test_a_warm_probe_leaves_out_the_first_call_and_its_result():
    # gpu_tc runs "abc,cd->abd" as one GEMM in place (either orientation): no copy, so
    # a warm call adds (almost) nothing; the first call's result (0.5 MiB) is gone
    # before the baseline.
    case = _case("abc,cd->abd")
    fresh = memory.measure(case, "gpu_tc", "cpu")
    warm = memory.measure(case, "gpu_tc", "cpu", warm=True)
    assert fresh.reason is None and warm.reason is None
    assert warm.result_bytes == RESULT_BYTES
    assert warm.peak_extra_bytes <= min(fresh.peak_extra_bytes + MIB // 4, MIB)


def test_probe_process_answers_one_line(monkeypatch, capsys):
    # The probe's own entry point, in this process: a missing peer is an answer, not a crash.
    case = json.dumps(dataclasses.asdict(_case("abc,cd->abd")))
    assert memory_probe.main(["--peer", "no-such-peer", "--case", case]) == 0
    [line] = capsys.readouterr().out.splitlines()
    found = memory.parse(line, "", 0)
    assert found.peak_extra_bytes is None
    assert found.reason == ("ValueError: unknown implementation 'no-such-peer' "
                            "(not gpu_tc nor a peer of PEERS, nor a twin of one)")
    assert memory_probe.implementation("gpu_tc") is peers.GPU_TC
    assert memory_probe.implementation("numpy") is PEERS["numpy"]


@needs_linux
def test_without_a_reset_the_peak_before_the_calls_makes_an_upper_bound(monkeypatch):
    # Raise this process's VmHWM 64 MiB above its resident memory, then probe a tiny case
    # in this process as if clear_refs were refused: the calls cannot pass that peak.
    spike = np.ones(64 * MIB // 8)
    del spike  # above glibc's largest mmap threshold: unmapped at once
    monkeypatch.setattr(memory_probe, "reset_peak", lambda: False)
    tiny = Case("tccg", 1, "tiny", "einsum", "ab,bc->ac", {"a": 8, "b": 8, "c": 8},
                "float64", 1.0)
    found = memory_probe.probe(tiny, PEERS["numpy"], "cpu")
    assert found.hwm_reset is False and found.exact is False
    assert found.result_bytes == 8 * 8 * 8
    assert found.peak_extra_bytes >= 60 * MIB  # an upper bound: it holds the spike


@needs_linux
def test_failing_probes_are_reported_not_raised():
    case = _case("abc,cd->abd")
    unknown = memory.measure(case, "no-such-peer", "cpu")
    assert unknown.peak_extra_bytes is None and "unknown implementation" in unknown.reason
    slow = memory.measure(case, "numpy", "cpu", timeout=0.001)
    assert slow == memory.Footprint.missing("probe timed out after 0.001 s")
    crashed = memory.parse("", "Traceback (most recent call last):\n  ...\nMemoryError\n", 1)
    assert crashed.reason == "probe failed (exit status 1): MemoryError"
    assert memory.parse("gpu-tc-memory: {not json", "", 0).reason.startswith(
        "probe answered something unreadable")
    assert memory.parse("", "", -9).reason == "probe failed (exit status -9)"


def test_gpu_backend_and_other_systems_are_not_measured(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("no probe process may start")

    monkeypatch.setattr(memory.subprocess, "run", no_process)
    found = memory.measure(_case("abc,cd->abd"), "cupy", "gpu")
    assert found.peak_extra_bytes is None
    assert found.reason == ("not measured on the gpu backend: host resident memory does not "
                            "measure device memory")
    assert memory.unavailable("cpu", "darwin") == (
        "n/a on darwin: the probe reads Linux's /proc/self/status")
    assert memory.unavailable("cpu", "linux") is None
    gpu = Settings(backend="gpu", memory=True)
    assert not runner.probes(gpu) and runner.probes(Settings(memory=True)) is LINUX


def _plan(extra: list[Peer]) -> runner.SuitePlan:
    cases = [c for c in suites.cases("tccg", "float64", quick=True) if c.id == 12]
    return runner.SuitePlan("tccg", "float64", cases, [PEERS["numpy"], *extra])


@needs_linux
def test_run_probes_after_the_timings_and_reports_every_implementation(monkeypatch):
    events: list[str] = []

    def spied(case, ops):
        def call():
            events.append("timed call")
            return np.einsum(case.expr, *ops)

        return Runner(call)

    def broken(case, ops):
        raise RuntimeError("no such kernel")

    real = memory.measure

    def measure(case, name, backend, timeout=memory.PROBE_TIMEOUT):
        events.append(f"probe {name}")
        return real(case, name, backend, timeout)

    monkeypatch.setattr(memory, "measure", measure)
    spy = Peer("spy", "not in PEERS", "cpu", "numpy", peers.ALL_KINDS, spied)
    plan = _plan([spy, Peer("broken", "raises", "cpu", "numpy", peers.ALL_KINDS, broken)])
    settings = Settings(quick=True, repeat=1, min_run_time=0.0, settle=0.0, memory=True)
    steps = io.StringIO()
    doc = runner.run(plan, settings, Progress(plan.steps(1, True), steps, bar=False))
    assert plan.steps(1, True) == plan.steps(1) + 4  # one probe per implementation
    assert steps.getvalue().count(" memory\n") == 4
    # Every probe after every timed call, and none for the implementation that failed.
    assert events[-3:] == ["probe gpu_tc", "probe numpy", "probe spy"]
    assert "probe" not in " ".join(events[:-3])
    [case] = doc["cases"]
    found = case["memory"]
    assert set(found) == {"gpu_tc", "numpy", "spy", "broken"}
    result = case["sizes"]["b"] * case["sizes"]["a"] * 8  # case 12 is "ca,bc->ba"
    assert case["expr"] == "ca,bc->ba"
    assert found["gpu_tc"]["result_bytes"] == found["numpy"]["result_bytes"] == result
    for name in ("gpu_tc", "numpy"):
        assert found[name]["reason"] is None and found[name]["peak_extra_bytes"] >= 0
    assert "unknown implementation 'spy'" in found["spy"]["reason"]
    assert found["broken"]["reason"] == "not measured: it failed in the timing run"
    assert case["least_memory_peer"] == "numpy"
    summary = doc["summary"]
    assert summary["memory"]["gpu_tc"] == {
        "total_extra_bytes": found["gpu_tc"]["peak_extra_bytes"], "cases": 1}
    assert summary["memory"]["spy"] == {"total_extra_bytes": None, "cases": 0}
    assert [f["implementation"] for f in summary["memory_failures"]] == ["spy", "broken"]
    assert doc["memory"] == {"method": memory.METHOD, "unavailable": None}
    assert doc["settings"]["memory"] is True
    text = report.markdown(doc)
    assert "| gpu_tc MiB | least-memory peer MiB | route |" in text
    assert "- memory: case 12 broken: not measured: it failed in the timing run" in text
    json.dumps(doc)


def test_no_memory_flag_skips_the_probes(monkeypatch, tmp_path, capsys):
    parser = cli.build_parser()
    default = cli_args.resolve(parser.parse_args(["bench", "tccg"]), parser)
    skipped = cli_args.resolve(parser.parse_args(["bench", "tccg", "--no-memory"]), parser)
    assert default.memory and not skipped.memory
    assert session.settings_for("tccg", default, "").memory
    assert not session.settings_for("overhead", default, "").memory  # tccg only
    assert not session.settings_for("tccg", skipped, "").memory
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--no-memory" in help_text and "a fresh process per implementation" in help_text

    def no_probe(*args, **kwargs):
        raise AssertionError("--no-memory must not probe")

    monkeypatch.setattr(memory, "measure", no_probe)
    argv = ["bench", "tccg", "--quick", "--cases", "12", "--peers", "numpy", "--repeat", "1",
            "--no-memory", "--output", str(tmp_path), "--no-plot"]
    assert cli.main(argv) == 0
    doc = json.loads((tmp_path / "cpu-tccg-float64.json").read_text())
    assert doc["settings"]["memory"] is False and "memory" not in doc
    assert "memory" not in doc["cases"][0] and "memory" not in doc["summary"]
    text = (tmp_path / "cpu-tccg-float64.md").read_text()
    table = [line for line in text.splitlines()
             if not line.startswith(("C heap: ", "Timed runs: "))]  # lines that say MiB
    assert "MiB" not in "\n".join(table)  # no memory column


def test_checkpoint_key_says_whether_memory_is_measured(tmp_path):
    plan = _plan([])
    timed = runner.checkpoint_key(plan, FAST)
    probed = runner.checkpoint_key(plan, Settings(**{**FAST.__dict__, "memory": True}))
    assert timed != probed and probed["settings"]["memory"] is True
    # A checkpoint made before memory was measured holds no such setting; it still
    # resumes a run without memory, and never one that measures it.
    assert "memory" not in timed["settings"]
    path = tmp_path / "cpu-tccg-float64.partial.json"
    Checkpoint(path, timed).save([{"id": 12}])
    assert list(Checkpoint(path, timed).load()) == [12]
    assert Checkpoint(path, probed).load() == {}


def _doc(memory_of: dict[str, list[int | None]] | None) -> dict:
    """A two-case report; ``memory_of``: each implementation's peak extra bytes per case."""
    def entry(seconds, mismatch=False):
        return {"seconds": seconds, "value": 1.0 / seconds, "mismatch": mismatch,
                "rel_error": 0.0, "error": None, "route": None}

    cases = []
    for index in range(2):
        case = {"id": index + 1, "name": f"c{index}", "kind": "einsum", "expr": "ij,jk->ik",
                "sizes": {}, "work": 1e9, "ceiling": None,
                "results": {"gpu_tc": entry(1.0), "p": entry(2.0),
                            "q": entry(0.5, mismatch=index == 0)}}
        if memory_of is not None:
            case["memory"] = {
                name: (memory.Footprint.of(values[index] + 100, 100, 0, True)
                       if values[index] is not None
                       else memory.Footprint.missing("probe timed out after 300 s")).as_dict()
                for name, values in memory_of.items()}
        cases.append(case)
    doc = {"schema": 1, "suite": "tccg", "dtype": "float64", "backend": "cpu",
           "metric": {"unit": "GFLOP/s", "higher_is_better": True}, "command": "gpu-tc bench x",
           "created": "now", "environment": {"cpu": "test cpu", "cpu_count": 2},
           "implementations": ["gpu_tc", "p", "q"], "ceiling": None, "tolerance": 1e-9,
           "cases": cases}
    if memory_of is not None:
        doc["memory"] = {"method": memory.METHOD, "unavailable": None}
    return report.analyse(doc)


def test_report_columns_sums_plot_and_older_reports(tmp_path):
    measured = _doc({"gpu_tc": [2 * MIB, 3 * MIB], "p": [4 * MIB, None], "q": [MIB, 5 * MIB]})
    first, second = measured["cases"]
    assert first["least_memory_peer"] == "p"  # q uses less, but its result mismatched
    assert second["least_memory_peer"] == "q"  # p's probe failed
    assert measured["summary"]["memory"] == {
        "gpu_tc": {"total_extra_bytes": 5 * MIB, "cases": 2},
        "p": {"total_extra_bytes": 4 * MIB, "cases": 1},
        "q": {"total_extra_bytes": 6 * MIB, "cases": 2}}
    text = report.markdown(measured)
    assert ("| id | case | expr | GFLOP | gpu_tc | p | q | best peer | gpu_tc/best | gpu_tc MiB "
            "| least-memory peer MiB | route |") in text
    assert ("| 1 | c0 | `ij,jk->ik` | 1.00 | 1.00 | 0.500 | 2.00 (x) | p | 2.00 | 2.00 | "
            "4.00 p |  |") in text
    assert ("| 2 | c1 | `ij,jk->ik` | 1.00 | 1.00 | 0.500 | 2.00 | q | 0.500 | 3.00 | "
            "5.00 q |  |") in text
    assert "summed over the cases (" in text
    assert "): gpu_tc 5.00, p 4.00 (1/2 cases), q 6.00." in text
    assert "- memory: case 2 p: probe timed out after 300 s" in text
    older = _doc(None)  # a report from before memory was measured
    assert "memory" not in older["summary"] and "MiB" not in report.markdown(older)
    older["dtype"] = "float32"
    report.write(older, tmp_path, plot=False)
    paths = report.write(measured, tmp_path, plot=True)
    assert (tmp_path / "cpu-tccg-float64.png") in paths
    assert (tmp_path / "cpu-tccg-float64.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(report.load_all(tmp_path)) == 2
    summary = (tmp_path / "summary.md").read_text()
    assert "| tccg | float32 | cpu |" in summary and "| tccg | float64 | cpu |" in summary
    assert "- tccg float64 cpu: gpu_tc 5.00, p 4.00 (1/2 cases), q 6.00" in summary
    assert "tccg float32 cpu:" not in summary  # the older report has no memory line


def test_gpu_report_says_why_memory_is_missing():
    doc = _doc(None)
    doc["memory"] = {"method": memory.METHOD, "unavailable": memory.unavailable("gpu")}
    text = report.markdown(doc)
    assert ("Peak extra memory: not measured on the gpu backend: host resident memory does "
            "not measure device memory.") in text
    assert "gpu_tc MiB" not in text


def test_footprint_arithmetic():
    assert memory.Footprint.of(peak=1000, baseline=600, result=100, reset=True) == \
        memory.Footprint(300, 100, 600, 1000, True, True, None)
    # A result larger than the peak's rise (a view, or pages reused): never below 0.
    assert memory.Footprint.of(peak=1000, baseline=900, result=300, reset=True) \
        .peak_extra_bytes == 0
    # Not reset: exact only where the calls passed the peak of making the inputs.
    assert memory.Footprint.of(1000, 600, 100, reset=False, peak_before=900).exact
    assert not memory.Footprint.of(1000, 600, 100, reset=False, peak_before=1000).exact
    assert memory.mib(3 * MIB) == 3.0 and memory.mib(None) is None
    probe = memory.command(_case("abc,cd->abd"), "numpy", "cpu")
    assert probe[:3] == [sys.executable, "-m", "gpu_tc.bench.memory_probe"]
    assert Case(**json.loads(probe[-1])) == _case("abc,cd->abd")
    assert Path(memory._environment()["PYTHONPATH"].split(os.pathsep)[0]) == Path(
        memory.__file__).resolve().parents[2]


def test_the_probe_measures_this_gpu_tc_whatever_the_working_directory(tmp_path, monkeypatch):
    """``python -m`` puts the working directory first on the import path: a probe started
    beside another checkout must still import this one (it runs in this one's root)."""
    other = tmp_path / "gpu_tc"
    other.mkdir()
    (other / "__init__.py").write_text("raise ImportError('the other checkout')\n")
    monkeypatch.chdir(tmp_path)
    found = memory.measure(_case("abc,cd->abd"), "gpu_tc", "cpu")
    assert found.reason is None, found.reason
    assert found.peak_extra_bytes is not None
