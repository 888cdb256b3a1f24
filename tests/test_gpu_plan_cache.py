"""cuTENSOR's plan cache kept in GPU_TC_CACHE_DIR (gpu_tc.cuda.plan_cache_file), opted
in with GPU_TC_CUTENSOR_CACHE_FILES=1: a process that autotuned leaves the file, the next
one starts with its plans; a file cuTENSOR refuses is ignored with a warning and written
afresh. On a real GPU that failed (issue #11: 0 plans read back, and a segfault where a
read plan was used), so the restoring tests run on the emulated library only, and by
default no file is read or written, GPU or not.

Each case runs fresh processes (the way a worker restarts). Under tests/gpu_double
they run on the emulated cuTENSOR, whose files follow its own format: a test double,
not a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import needs_emulation

from gpu_tc import disk_cache

OPT_IN = "GPU_TC_CUTENSOR_CACHE_FILES"

pytestmark = pytest.mark.gpu

_TUNED_CALLS = textwrap.dedent("""
    import json, warnings
    import cupy, numpy as np
    import gpu_tc
    from gpu_tc import disk_cache
    from gpu_tc.cuda.cutensor import Handle

    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((6, 7, 8)), rng.standard_normal((8, 5, 7))
    exact = np.einsum("abc,cdb->dab", a, b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = gpu_tc.prepare("abc,cdb->dab", cupy.asarray(a), cupy.asarray(b))
        tuning = plan.autotune(3)
        results = [plan.execute(cupy.asarray(a), cupy.asarray(b)) for _ in range(5)]
        error = max(float(np.abs(cupy.asnumpy(r) - exact).max()) for r in results)
    handle = Handle.for_device(0)
    print(json.dumps({"tuning": tuning, "error": error, "route": plan.route,
                      "restored_plans": handle.restored_plans,
                      "folder": str(handle.cache_folder), "stats": disk_cache.stats(),
                      "warnings": [str(w.message) for w in caught]}))
""")


def _run(cache: Path, opt_in: bool = True) -> dict:
    env = {**os.environ, disk_cache.ENV: str(cache), OPT_IN: "1"}
    if not opt_in:
        del env[OPT_IN]
    done = subprocess.run([sys.executable, "-c", _TUNED_CALLS], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _plan_file(found: dict) -> Path:
    return Path(found["folder"]) / "plan-cache.bin"


@needs_emulation
def test_a_new_process_starts_with_the_plans_an_earlier_one_tuned(tmp_path):
    first = _run(tmp_path)
    assert first["tuning"] >= 1 and first["error"] < 1e-10
    assert first["restored_plans"] == 0 and first["stats"]["saved"] >= 1
    folder = Path(first["folder"])
    assert folder.parent == tmp_path / "cutensor"
    assert (folder / "plan-cache.bin").stat().st_size > 0 and (folder / "kernel-cache.bin").exists()
    second = _run(tmp_path)
    assert second["restored_plans"] >= 1 and second["stats"]["restored"] >= 1
    assert second["error"] < 1e-10 and not second["warnings"]


@needs_emulation
def test_a_file_cutensor_refuses_is_ignored_with_a_warning_then_rewritten(tmp_path):
    first = _run(tmp_path)
    _plan_file(first).write_bytes(b"\x00 not a plan cache \xff" * 10)
    damaged = _run(tmp_path)
    assert damaged["restored_plans"] == 0 and damaged["error"] < 1e-10
    assert any("cuTENSOR refused plan-cache.bin" in w for w in damaged["warnings"])
    assert _run(tmp_path)["restored_plans"] >= 1  # the damaged run wrote a good file


@needs_emulation
def test_a_file_from_another_cutensor_version_is_ignored_with_a_warning(tmp_path):
    first = _run(tmp_path)
    path = _plan_file(first)
    magic, _, content = path.read_bytes().partition(b"\n")
    written = json.loads(content)
    written["origin"]["cutensor"] -= 100  # as if written by an older cuTENSOR
    path.write_bytes(magic + b"\n" + json.dumps(written).encode())
    foreign = _run(tmp_path)
    assert foreign["restored_plans"] == 0 and foreign["error"] < 1e-10
    assert any("INVALID_VALUE" in w for w in foreign["warnings"])


def test_with_the_cache_off_no_file_is_read_or_written(tmp_path, monkeypatch):
    env = {**os.environ, disk_cache.ENV: "", OPT_IN: "1"}  # opted in, the cache off
    done = subprocess.run([sys.executable, "-c", _TUNED_CALLS], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["folder"] == "None" and found["stats"]["saved"] == 0
    assert list(tmp_path.iterdir()) == []


def test_by_default_no_cutensor_file_is_read_or_written(tmp_path):
    """The persistent cache on, the cuTENSOR files not opted in: nothing under cutensor/."""
    found = _run(tmp_path, opt_in=False)
    assert found["folder"] == "None" and found["restored_plans"] == 0
    assert found["error"] < 1e-10 and found["stats"]["saved"] == 0
    assert not (tmp_path / "cutensor").exists()
