"""The gpu-tc command: info, selftest, demo, bench, usage errors and python -m gpu_tc."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import gpu_tc
from gpu_tc import cli
from gpu_tc.bench import blas_env, demo, environment, selftest

GPU = environment.gpu_status()


def test_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"gpu_tc {gpu_tc.__version__}" in out
    assert f"NumPy {np.__version__}; BLAS {environment.blas()['text']}\n" in out
    found = blas_env.inspect()
    overrides = ", ".join(f"{k}={v}" for k, v in found.variables.items()) or "none set"
    assert f"BLAS and threading variables: {overrides}\n" in out
    for warning in found.warnings:
        assert f"  warning: {warning}\n" in out
    for heading in ("CuPy:", "cuTENSOR:", "CUDA driver:", "Backends:", "  cpu: available",
                    "  gpu: ", "Devices:", "Plan cache: capacity", "Benchmark peers: numpy (yes)"):
        assert heading in out
    stats = gpu_tc.plan_cache().stats()
    assert f"capacity {stats.capacity}" in out


def test_python_m_gpu_tc_info_in_a_fresh_process():
    result = subprocess.run([sys.executable, "-m", "gpu_tc", "info"], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"gpu_tc {gpu_tc.__version__}\n")
    assert "Traceback" not in result.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpu_tc {gpu_tc.__version__}"


def test_selftest_cpu_passes_every_check(capsys):
    assert cli.main(["selftest", "--backend", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    checks = lines[:-1]
    real_only = sum(c.real_only for c in selftest.CHECKS)
    assert len(checks) == 4 * len(selftest.CHECKS) - 2 * real_only
    assert all(line.startswith("PASS cpu ") for line in checks)
    assert "PASS cpu float64 einsum 'ij,jk->ik'" in checks
    assert "PASS cpu complex64 trace axis1=0 axis2=2" in checks
    assert lines[-1] == f"{len(checks)} checks: {len(checks)} passed, 0 failed"


def test_selftest_fails_with_exit_status_1(monkeypatch, capsys):
    bad = selftest.Check("einsum", "'ij->ji' (broken on purpose)", ((2, 3),),
                         lambda ops: gpu_tc.einsum("ij->ij", *ops),
                         lambda ops: gpu_tc.reference.einsum("ij->ji", *ops))
    monkeypatch.setattr(selftest, "CHECKS", (selftest.CHECKS[0], bad))
    assert cli.main(["selftest", "--backend", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "PASS cpu float32 einsum 'ij,jk->ik'" in out
    failure = "FAIL cpu float64 einsum 'ij->ji' (broken on purpose): shape (2, 3), expected (3, 2)"
    assert failure in out
    assert out.splitlines()[-1] == "8 checks: 4 passed, 4 failed"


@pytest.mark.skipif(GPU.available, reason="checks the message shown without a GPU")
def test_selftest_gpu_without_gpu_fails(capsys):
    assert cli.main(["selftest", "--backend", "gpu"]) == 1
    assert f"FAIL gpu: {GPU.reason}" in capsys.readouterr().out


@pytest.mark.gpu
def test_selftest_gpu(capsys):
    assert cli.main(["selftest", "--backend", "gpu"]) == 0
    assert "PASS gpu float64 einsum 'ij,jk->ik'" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["bench", "nosuch"], "unknown suite 'nosuch'"),
        (["bench", "tccg", "--dtype", "int8"], "unknown dtype 'int8'"),
        (["bench", "--dtype", "float32,float16"], "unknown dtype 'float16'"),
        (["bench", "--peers", "numpy,nosuch"], "unknown peer 'nosuch'"),
        (["bench", "--peers", "cupy"], "peer 'cupy' runs on the gpu, not on --backend cpu"),
        (["bench", "--peers", ","], "--peers needs at least one peer name"),
        (["bench", "--cases", "8-1"], "--cases: '8-1' is not an ascending range"),
        (["bench", "--cases", "x"], "--cases: 'x' is not a case id"),
        (["bench", "--repeat", "0"], "argument --repeat: 0 is not at least 1"),
        (["bench", "--repeat", "two"], "argument --repeat: 'two' is not an integer"),
        (["bench", "--scale", "0"], "argument --scale: 0 is not a positive number"),
        (["bench", "--scale", "half"], "argument --scale: 'half' is not a number"),
        (["bench", "--scale", "nan"], "argument --scale: nan is not a positive number"),
        (["bench", "--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
        (["bench", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["selftest", "--backend", "fpga"], "invalid choice: 'fpga'"),
        (["bench", "--resume"], "--resume needs --output"),
    ],
)
def test_usage_errors_exit_2_without_traceback(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: gpu-tc" in err
    assert message in err
    assert "Traceback" not in err


def test_unknown_suite_in_a_subprocess_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "gpu_tc", "bench", "nosuch"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert "unknown suite 'nosuch'" in result.stderr and "Traceback" not in result.stderr


def test_bench_cases_that_no_suite_has(capsys):
    assert cli.main(["bench", "trace", "--cases", "40", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "trace: no case has the ids asked for; skipped" in err and "nothing to run" in err


@pytest.mark.skipif(GPU.available, reason="checks the message shown without a GPU")
def test_bench_gpu_without_gpu(capsys):
    assert cli.main(["bench", "tccg", "--backend", "gpu", "--quick"]) == 1
    assert "the gpu backend is not usable here" in capsys.readouterr().err


def test_bench_quick_writes_json_markdown_and_png(tmp_path, capsys):
    argv = ["bench", "tccg", "--quick", "--cases", "1,12", "--peers", "numpy", "--repeat", "1",
            "--dtype", "float32", "--dtype", "float64", "--output", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "### tccg, float32, cpu: GFLOP/s (higher is better)" in out
    assert "### tccg, float64, cpu: GFLOP/s (higher is better)" in out
    for dtype in ("float32", "float64"):
        stem = tmp_path / f"cpu-tccg-{dtype}"
        doc = json.loads(stem.with_suffix(".json").read_text())
        assert doc["command"] == "gpu-tc " + " ".join(argv)
        assert [c["id"] for c in doc["cases"]] == [1, 12]
        assert doc["implementations"] == ["gpu_tc", "numpy"]
        for case in doc["cases"]:
            assert case["results"]["gpu_tc"]["value"] > 0
            assert case["results"]["numpy"]["mismatch"] is False
            assert case["ratios"]["numpy"] > 0
        assert "| 12 | ab-ac-cb | `ca,bc->ba` |" in stem.with_suffix(".md").read_text()
        png = stem.with_suffix(".png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
        assert f"wrote {stem.with_suffix('.png')}" in out
    assert not list(tmp_path.glob("*.partial.json"))  # checkpoints go once a report is written
    summary = (tmp_path / "summary.md").read_text()
    assert "| tccg | float32 | cpu | GFLOP/s |" in summary
    assert "| tccg | float64 | cpu | GFLOP/s |" in summary


@pytest.mark.gpu
def test_bench_gpu_quick_against_every_gpu_peer(tmp_path, capsys):
    argv = ["bench", "tccg", "overhead", "permute", "--backend", "gpu", "--quick", "--cases",
            "1", "--repeat", "1", "--output", str(tmp_path)]
    assert cli.main(argv) == 0
    doc = json.loads((tmp_path / "gpu-tccg-float64.json").read_text())
    assert doc["environment"]["devices"]
    assert doc["cases"][0]["results"]["gpu_tc"]["value"] > 0
    assert "### permute, float64, gpu: GB/s" in capsys.readouterr().out


def test_bench_memory_and_overhead_suites_print_tables(capsys):
    argv = ["bench", "overhead", "permute", "--cases", "1", "--peers", "numpy", "--repeat", "1",
            "--quick"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "### overhead, float64, cpu: us/call (lower is better)" in out
    assert "| 1 | 4x4 matmul | `ij,jk->ik` |" in out
    assert "### permute, float64, cpu: GB/s (higher is better)" in out
    assert "| 1 | 64^4 reverse | `abcd->dcba` |" in out


def test_demo_runs_end_to_end(monkeypatch, capsys):
    # The real demo takes about half a minute; the same code on a smaller selection.
    monkeypatch.setattr(demo, "DEMO_CASES", (1, 31))
    monkeypatch.setattr(demo, "DEMO_FLOPS", 2e5)
    monkeypatch.setattr(demo, "default_peers", lambda backend, suite: ["numpy"])
    assert cli.main(["demo", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "== Part 1: contractions" in out
    assert out.count("against gpu_tc.reference: OK") == len(demo.EXAMPLES)
    assert "route:  blas:direct" in out
    assert "| 31 | abcdef-dega-gfbc |" in out
    assert "Ceiling: GEMM" in out
    assert out.rstrip().endswith("demo: all checks passed")


def test_bench_without_matplotlib_writes_no_png(monkeypatch, tmp_path, capsys):
    real = environment.installed
    monkeypatch.setattr(environment, "installed", lambda m: m != "matplotlib" and real(m))
    argv = ["bench", "reduce", "--quick", "--cases", "1", "--peers", "numpy", "--repeat", "1",
            "--output", str(tmp_path)]
    assert cli.main(argv) == 0
    assert "matplotlib is not installed: no PNG plots" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cpu-reduce-float64.json", "cpu-reduce-float64.md", "summary.md"]
