"""The GPU backend's own code on every CI run: the gpu-marked suite, and fault
injection, on the gpu_double emulation (tests/gpu_double).

Each test starts a process whose ``cupy``, ``cupy_backends`` and ``nvmath`` are the
emulation's, so it never sees a real CuPy. What passes here ran on a test double, not
on a GPU: the double checks what cuTENSOR 2.x and cuBLAS document, it cannot prove
the real support matrix, timing, asynchrony or numerics.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import junit
import pytest
from gpu_double import launch

from gpu_tc.cuda.libraries import fix_for

ROOT = Path(__file__).resolve().parent.parent
# The fix named for a libcutensor that does not load: "pip install" where none is
# installed; on a GPU host with one on LD_LIBRARY_PATH, that path (what gpu_tc says there).
CUTENSOR_FIX = fix_for('Failure finding "libcutensor.so.2"')
# The gpu-marked suite has about 2,500 tests; far fewer passing means lost collection.
MIN_PASSED = 2000


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_gpu_suite_passes_on_the_emulated_device(strict, tmp_path):
    """Every gpu test runs (none skipped for want of a GPU) and passes; strict mode also
    refuses what cutensor.h leaves undocumented and demands descC is descD."""
    arguments = ["-m", "gpu", "-p", "no:cacheprovider", "-o", "addopts=", "--strict-markers",
                 "-q"]
    result, outcomes = junit.run_pytest(arguments, tmp_path / "junit.xml", ROOT,
                                        launch.environment(strict=strict))
    assert not outcomes.failures and not outcomes.errors, outcomes.problems()
    assert result.returncode == 0, result.stdout[-3000:]
    for_want_of_a_gpu = [n for n, why in outcomes.skips.items() if "gpu test:" in why]
    assert not for_want_of_a_gpu, "\n".join(for_want_of_a_gpu)
    passed = len(outcomes.passed)
    assert passed >= MIN_PASSED, f"only {passed} gpu tests passed; skipped: {outcomes.skips}"


def test_the_emulated_process_never_sees_a_real_cupy():
    result = _run("import cupy, nvmath.bindings.cutensor as c, cupy_backends.cuda.libs.cublas "
                  "as b; print(cupy.__file__, c.__file__, b.__file__)")
    assert result.returncode == 0, result.stderr
    files = result.stdout.split()
    assert len(files) == 3 and all(str(launch.SITE) in f for f in files), files


def _run(script: str, **faults: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in an emulated process with the given faults injected."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT,
        env=launch.environment(**faults), capture_output=True, text=True, timeout=300,
        check=False,
    )


GEMM = """
    import cupy, numpy as np, gpu_tc
    rng = np.random.default_rng(0)
    n = {n}  # 400: above the size where cuBLAS is timed against cuTENSOR
    a, b = rng.standard_normal((n, n + 1)), rng.standard_normal((n + 1, n - 1))
    plan = gpu_tc.prepare("ij,jk->ik", cupy.asarray(a), cupy.asarray(b))
    got = plan.execute(cupy.asarray(a), cupy.asarray(b)).get()
    assert np.allclose(got, a @ b), got
    print(plan.route, "|", plan.reason)
"""


def test_without_cublas_gemms_take_the_cutensor_route():
    result = _run(GEMM.format(n=4), missing=["cublas"])
    assert result.returncode == 0, result.stderr
    route, reason = result.stdout.strip().split(" | ")
    assert route == "cutensor"
    assert "cuBLAS could not be loaded" in reason and "libcublas.so.13" in reason


def test_without_cutensor_gemms_still_run_and_the_rest_names_the_fix():
    for n in (4, 400):
        result = _run(GEMM.format(n=n), missing=["cutensor"])
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("cublas | ") and "routes timing" not in result.stdout
    permute = _run(
        """
        import cupy, gpu_tc
        try:
            gpu_tc.permute("ij->ji", cupy.ones((3, 4)))
        except gpu_tc.GpuTcError as err:
            print(type(err).__name__, err.status, err)
        """,
        missing=["cutensor"],
    )
    assert permute.returncode == 0, permute.stderr
    assert permute.stdout.startswith("BackendError CUTENSOR_STATUS_NOT_INITIALIZED ")
    assert "libcutensor.so.2" in permute.stdout and CUTENSOR_FIX in permute.stdout


def test_info_names_the_library_that_does_not_load_and_the_fix():
    result = subprocess.run(
        [sys.executable, "-m", "gpu_tc", "info"], cwd=ROOT, capture_output=True, text=True,
        env=launch.environment(missing=["cutensor"]), timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split(": ", 1)[0]: line for line in result.stdout.splitlines()}
    assert "not loadable" in lines["cuTENSOR"] and "libcutensor.so.2" in lines["cuTENSOR"]
    assert f"fix: {CUTENSOR_FIX}" in lines["cuTENSOR"]
    assert lines["cuBLAS"] == "cuBLAS: 13.0.0"
    assert "  gpu: available (CuPy, cuBLAS)" in result.stdout
    assert "gpu_tc test double (emulated, not a GPU)" in result.stdout


def test_a_permutation_operator_cutensor_refuses_runs_as_an_elementwise_operation():
    result = _run(
        """
        import cupy, numpy as np, gpu_tc
        a = np.random.default_rng(0).standard_normal((3, 4, 5))
        got = gpu_tc.permute("abc->cab", cupy.asarray(a), alpha=2, op_a=gpu_tc.UnaryOp.EXP)
        assert np.allclose(got.get(), 2 * np.exp(a).transpose(2, 0, 1))
        from gpu_tc.backend import backend_named
        from gpu_tc.problem import PermutationProblem, contiguous_spec
        problem = PermutationProblem(contiguous_spec("abc", (3, 4, 5), "d"),
                                     contiguous_spec("cab", (5, 3, 4), "d"), gpu_tc.UnaryOp.EXP)
        print(backend_named("gpu").permutation_plan(problem, gpu_tc.Options()).reason)
        """,
        refuse=["permutation:OP_EXP"],
    )
    assert result.returncode == 0, result.stderr
    assert "cuTENSOR refuses EXP in a permutation: run as an element-wise binary" in result.stdout


def test_a_reduction_operator_cutensor_refuses_is_an_error_naming_it():
    result = _run(
        """
        import cupy, gpu_tc
        try:
            gpu_tc.reduce("ij->i", cupy.ones((3, 4), complex), op_a=gpu_tc.UnaryOp.CONJ)
        except gpu_tc.OptionsError as err:
            print(err)
        """,
        refuse=["reduction:OP_CONJ"],
    )
    assert result.returncode == 0, result.stderr
    assert "cuTENSOR does not support op_a=CONJ in the reduction" in result.stdout
    assert "CUTENSOR_STATUS_NOT_SUPPORTED" in result.stdout
