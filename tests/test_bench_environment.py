"""What a benchmark report says about its BLAS: library, kernel, threads, the variables
that override them, and the warnings when an override changes the kernel or the threads.

The forced kernel is checked for real where this host allows it (an OpenBLAS built for
every x86-64 core type); elsewhere threadpoolctl and the probe are replaced by stubs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys

import pytest

from gpu_tc.bench import blas_env, environment, report
from gpu_tc.bench.blas_env import Probe
from gpu_tc.host import blas_variables, cpu_name

OPENBLAS = "/opt/lib/libopenblas.so"


def _pool(architecture: str | None, threads: int = 4, api: str = "openblas",
          path: str = OPENBLAS) -> dict:
    return {"user_api": "blas", "internal_api": api, "version": "0.3.27",
            "num_threads": threads, "threading_layer": "pthreads", "architecture": architecture,
            "filepath": path, "prefix": "libopenblas"}


@pytest.fixture
def clean_env(monkeypatch):
    """No BLAS or threading variable set (the host's own ones are put back afterwards)."""
    for name in blas_variables():
        monkeypatch.delenv(name)
    return monkeypatch


def _fake_pools(monkeypatch, *pools: dict) -> None:
    monkeypatch.setattr(blas_env, "threadpool_info", lambda: [dict(p) for p in pools])


def test_variables_keep_every_blas_and_threading_override(clean_env):
    for name, value in [("OMP_NUM_THREADS", "1"), ("OPENBLAS_CORETYPE", "Haswell"),
                        ("GOTO_NUM_THREADS", "2"), ("MKL_CBWR", "AVX2"), ("BLIS_ARCH_TYPE", "zen"),
                        ("KMP_AFFINITY", "compact"), ("VECLIB_MAXIMUM_THREADS", "3"),
                        ("NUMEXPR_NUM_THREADS", "4"), ("OPENBLASX", "no"), ("MY_OMP_X", "no"),
                        ("KMP_DUPLICATE_LIB_OK", "True"), ("NVPL_BLAS_VERBOSE", "1")]:
        clean_env.setenv(name, value)
    assert blas_variables() == {
        "BLIS_ARCH_TYPE": "zen", "GOTO_NUM_THREADS": "2", "KMP_AFFINITY": "compact",
        "MKL_CBWR": "AVX2", "NUMEXPR_NUM_THREADS": "4", "NVPL_BLAS_VERBOSE": "1",
        "OMP_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "Haswell", "VECLIB_MAXIMUM_THREADS": "3",
    }
    assert [n for n in blas_variables() if blas_env.is_thread_variable(n)] == [
        "GOTO_NUM_THREADS", "NUMEXPR_NUM_THREADS", "OMP_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"]


def test_a_forced_kernel_is_warned_about_with_the_kernel_picked_without_it(clean_env):
    _fake_pools(clean_env, _pool("Haswell"))
    seen = []

    def fake_probe(environ):
        seen.append(dict(environ))
        return Probe(pools=(_pool("SkylakeX"),))

    clean_env.setattr(blas_env, "probe", fake_probe)
    clean_env.setenv("OPENBLAS_CORETYPE", "Haswell")
    clean_env.setenv("OPENBLAS_L2_SIZE", "512")
    found = blas_env.inspect(cpu_count=4)
    assert found.warnings == [
        "OPENBLAS_CORETYPE=Haswell forces kernel Haswell; without it OpenBLAS picks SkylakeX"]
    assert found.variables == {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512"}
    # One probe under this environment (which library is NumPy's), and one without the
    # kernel variable but with everything else.
    [numpys, probed] = seen
    assert numpys == dict(os.environ)
    assert "OPENBLAS_CORETYPE" not in probed and probed["OPENBLAS_L2_SIZE"] == "512"
    assert probed["PATH"] == os.environ["PATH"]
    assert found.blas == {
        "library": "OpenBLAS", "version": "0.3.27", "architecture": "Haswell", "threads": 4,
        "threading_layer": "pthreads", "filepath": OPENBLAS, "source": "threadpoolctl",
        "text": "OpenBLAS 0.3.27, kernel Haswell, 4 threads (pthreads)"}


def test_a_kernel_variable_that_changes_nothing_is_recorded_without_warning(clean_env):
    _fake_pools(clean_env, _pool("Haswell"))
    clean_env.setattr(blas_env, "probe", lambda environ: Probe(pools=(_pool("Haswell"),)))
    clean_env.setenv("OPENBLAS_CORETYPE", "Haswell")
    found = blas_env.inspect(cpu_count=4)
    assert found.warnings == [] and found.variables == {"OPENBLAS_CORETYPE": "Haswell"}


def test_the_probe_compares_numpys_blas_not_another_pool(clean_env):
    # torch's MKL loaded too; the probe (NumPy alone) lists only NumPy's OpenBLAS.
    _fake_pools(clean_env, _pool("Haswell"), _pool(None, api="mkl", path="/torch/libmkl_rt.so"))
    clean_env.setattr(blas_env, "probe", lambda environ: Probe(pools=(_pool("Zen"),)))
    clean_env.setenv("BLIS_ARCH_TYPE", "haswell")
    clean_env.setenv("MKL_DEBUG_CPU_TYPE", "5")
    found = blas_env.inspect(cpu_count=4)
    assert found.warnings == ["BLIS_ARCH_TYPE=haswell, MKL_DEBUG_CPU_TYPE=5 force kernel "
                              "Haswell; without them OpenBLAS picks Zen"]
    assert [p["library"] for p in found.pools] == ["OpenBLAS", "MKL"]


def test_mkl_reports_no_kernel_so_the_override_is_said_unchecked(clean_env):
    _fake_pools(clean_env, _pool(None, api="mkl", path="/x/libmkl_rt.so"))
    clean_env.setattr(blas_env, "probe", lambda environ: Probe(
        pools=(_pool(None, api="mkl", path="/x/libmkl_rt.so"),)))
    clean_env.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    found = blas_env.inspect(cpu_count=4)
    assert found.warnings == ["MKL_ENABLE_INSTRUCTIONS=AVX2 set: threadpoolctl reports no kernel "
                              "for MKL, so whether it forces one is not checked"]
    assert found.blas["text"] == "MKL 0.3.27, kernel not reported, 4 threads (pthreads)"


def test_a_failed_probe_is_reported(clean_env):
    _fake_pools(clean_env, _pool("Haswell"))
    clean_env.setattr(blas_env, "probe", lambda environ: Probe(error="the probe exited with "
                                                              "status 1: ImportError: x"))
    clean_env.setenv("OPENBLAS_CORETYPE", "Haswell")
    assert blas_env.inspect(cpu_count=4).warnings == [
        "OPENBLAS_CORETYPE=Haswell set: a process without it could not be asked which kernel "
        "OpenBLAS picks (the probe exited with status 1: ImportError: x)"]


@pytest.mark.parametrize("threads, cpus, warned", [(1, 4, True), (4, 4, False), (2, 2, False)])
def test_thread_overrides_warn_when_blas_runs_fewer_threads_than_cpus(clean_env, threads, cpus,
                                                                      warned):
    _fake_pools(clean_env, _pool("Haswell", threads=threads))
    clean_env.setenv("OMP_NUM_THREADS", str(threads))
    found = blas_env.inspect(cpu_count=cpus)
    expected = [f"OMP_NUM_THREADS={threads} is set and OpenBLAS uses 1 thread on a host of "
                f"{cpus} CPUs"] if warned else []
    assert found.warnings == expected
    assert found.variables == {"OMP_NUM_THREADS": str(threads)}


def test_fewer_threads_without_an_override_is_not_blamed_on_one(clean_env):
    _fake_pools(clean_env, _pool("Haswell", threads=1))
    assert blas_env.inspect(cpu_count=8).warnings == []


def test_without_threadpoolctl_the_report_says_so(clean_env):
    real = importlib.util.find_spec
    clean_env.setattr(importlib.util, "find_spec",
                      lambda name, *args: None if name == "threadpoolctl" else real(name, *args))

    def no_probe(environ):
        raise AssertionError("nothing to compare: no subprocess")

    clean_env.setattr(blas_env, "probe", no_probe)
    clean_env.setenv("OPENBLAS_CORETYPE", "Haswell")
    found = blas_env.inspect(cpu_count=4)
    assert found.blas["source"] == "numpy build info"
    assert found.blas["architecture"] is None and found.blas["threads"] is None
    assert found.blas["note"] == blas_env.NO_THREADPOOLCTL
    assert found.blas["text"].endswith(f"(NumPy's build info; {blas_env.NO_THREADPOOLCTL})")
    assert found.pools == []
    assert found.warnings == [f"OPENBLAS_CORETYPE=Haswell set: whether it forces a kernel is not "
                              f"checked ({blas_env.NO_THREADPOOLCTL})"]


def test_the_report_records_and_shows_the_blas_and_its_warnings(clean_env, tmp_path):
    _fake_pools(clean_env, _pool("Haswell", threads=2))
    clean_env.setattr(blas_env, "probe", lambda environ: Probe(pools=(_pool("SkylakeX"),)))
    clean_env.setenv("OPENBLAS_CORETYPE", "Haswell")
    clean_env.setenv("OMP_NUM_THREADS", "2")
    found = blas_env.inspect(cpu_count=2)
    doc = _report(found)
    env = doc["environment"]
    assert env["blas"]["architecture"] == "Haswell" and env["blas"]["threads"] == 2
    assert env["blas_variables"] == {"OMP_NUM_THREADS": "2", "OPENBLAS_CORETYPE": "Haswell"}
    assert env["cpu"] == cpu_name() and env["cpu"]
    text = report.markdown(doc)
    warning = "OPENBLAS_CORETYPE=Haswell forces kernel Haswell; without it OpenBLAS picks SkylakeX"
    assert ("BLAS: OpenBLAS 0.3.27, kernel Haswell, 2 threads (pthreads); BLAS and threading "
            "variables: OMP_NUM_THREADS=2, OPENBLAS_CORETYPE=Haswell.") in text
    assert text.index(f"**Warning:** {warning}.") < text.index("| id | case |")
    from gpu_tc.bench.plot import _caption

    caption = _caption(doc).splitlines()
    assert caption[1].startswith(f"{env['cpu']}, {env['cpu_count']} cores")
    assert caption[2] == ("BLAS OpenBLAS 0.3.27, kernel Haswell, 2 threads (pthreads); "
                          "variables: OMP_NUM_THREADS=2, OPENBLAS_CORETYPE=Haswell")
    assert caption[3] == f"WARNING: {warning}"
    report.write(doc, tmp_path, plot=False)
    stored = json.loads((tmp_path / "cpu-tccg-float64.json").read_text())
    assert stored["warnings"] == [warning] and stored["environment"]["blas"] == env["blas"]


def test_an_old_report_with_a_blas_string_still_renders():
    doc = _report(blas_env.BlasEnvironment(blas={"text": "unused"}))
    doc["environment"]["blas"] = "openblas 0.3.21"
    del doc["environment"]["blas_variables"]
    assert "BLAS: openblas 0.3.21; BLAS and threading variables: not recorded." in \
        report.markdown(doc)


def test_torchs_own_blas_is_recorded_only_where_a_peer_imported_torch(clean_env):
    class FakeConfig:
        @staticmethod
        def show() -> str:
            return "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl"

    class FakeTorch:
        __config__ = FakeConfig

    clean_env.delitem(sys.modules, "torch", raising=False)
    assert environment.torch_blas() is None
    doc = _report(blas_env.BlasEnvironment(blas={"text": "OpenBLAS 0.3.31"}))
    assert doc["environment"]["torch_blas"] is None
    assert "torch runs its own BLAS" not in report.markdown(doc)
    clean_env.setitem(sys.modules, "torch", FakeTorch)
    assert environment.torch_blas() == "mkl"
    doc = _report(blas_env.BlasEnvironment(blas={"text": "OpenBLAS 0.3.31"}))
    assert ("BLAS: OpenBLAS 0.3.31; BLAS and threading variables: none set. torch runs "
            "its own BLAS (mkl, from its build settings).") in report.markdown(doc)


def _report(found: blas_env.BlasEnvironment) -> dict:
    case = {"id": 1, "name": "one", "kind": "einsum", "expr": "ij,jk->ik", "sizes": {},
            "work": 1e9, "ceiling": None,
            "results": {"gpu_tc": {"seconds": 1.0, "value": 1.0, "mismatch": False,
                                   "rel_error": None, "error": None, "route": None}}}
    doc = {"schema": 1, "suite": "tccg", "dtype": "float64", "backend": "cpu",
           "metric": {"unit": "GFLOP/s", "higher_is_better": True}, "command": "",
           "created": "now", "environment": environment.host(found),
           "warnings": list(found.warnings), "implementations": ["gpu_tc"], "ceiling": None,
           "tolerance": 1e-9, "cases": [case]}
    return report.analyse(doc)


# --- real processes -------------------------------------------------------------------


def _own_environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted(os.environ.items()))


def test_the_probe_sees_this_process_kernel_under_this_process_environment():
    pytest.importorskip("threadpoolctl")
    blas, _ = blas_env.loaded()
    if blas["source"] != "threadpoolctl":
        pytest.skip("threadpoolctl finds no BLAS loaded by NumPy here")
    result = blas_env.probe(_own_environment())
    assert result.error == ""
    [numpys] = [p for p in result.pools if p["filepath"] == blas["filepath"]]
    assert numpys["architecture"] == blas["architecture"]
    assert blas_env.describe(numpys)["library"] == blas["library"]


def test_a_real_forced_openblas_kernel_is_detected(tmp_path):
    pytest.importorskip("threadpoolctl")
    blas, _ = blas_env.loaded()
    if blas["library"] != "OpenBLAS" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"needs OpenBLAS on x86-64, not {blas['library']} on {platform.machine()}")
    clean = {k: v for k, v in os.environ.items() if k not in blas_env.KERNEL_VARIABLES}
    natural = blas_env.probe(tuple(sorted(clean.items())))
    assert natural.error == ""
    picked = natural.pools[0]["architecture"]
    forced = "Prescott" if picked == "Sandybridge" else "Sandybridge"
    script = ("import json\nfrom gpu_tc.bench import blas_env\nfound = blas_env.inspect()\n"
              "print(json.dumps({'kernel': found.blas['architecture'], "
              "'warnings': found.warnings}))")
    done = subprocess.run([sys.executable, "-c", script],
                          env={**clean, "OPENBLAS_CORETYPE": forced},
                          capture_output=True, text=True, timeout=300, check=True)
    seen = json.loads(done.stdout.splitlines()[-1])
    if seen["kernel"] == picked:
        pytest.skip("this OpenBLAS ignores OPENBLAS_CORETYPE (built without DYNAMIC_ARCH)")
    kernel_warnings = [w for w in seen["warnings"] if "kernel" in w]
    assert kernel_warnings == [f"OPENBLAS_CORETYPE={forced} forces kernel {seen['kernel']}; "
                               f"without it OpenBLAS picks {picked}"]


def test_numpys_blas_is_found_by_its_file_when_a_peer_loaded_another_first(clean_env):
    """TBLIS and torch bring BLAS libraries of their own; NumPy's is the one a process
    importing NumPy alone loads, wherever threadpoolctl lists it."""
    peer = _pool("Zen", path="/site-packages/pytblis.libs/libopenblas-peer.so")
    _fake_pools(clean_env, peer, _pool("Haswell"))
    clean_env.setattr(blas_env, "numpy_blas_paths", lambda: frozenset({OPENBLAS}))
    found = blas_env.inspect(cpu_count=4)
    assert found.blas["filepath"] == OPENBLAS and found.blas["architecture"] == "Haswell"
    assert [p["filepath"] for p in found.pools] == [peer["filepath"], OPENBLAS]
