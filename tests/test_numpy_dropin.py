"""numpy's test_einsum.py and opt_einsum's test suite, as shipped in the installed
packages, pass with gpu_tc in numpy's place (the plugin tests/dropin.py swaps it in
before collection; its BY_DESIGN lists the few tests that cannot pass, with reasons).

Each suite runs in its own process: numpy.einsum is replaced there, never here.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import dropin
import junit
import numpy as np
import pytest

import gpu_tc

TESTS = Path(__file__).resolve().parent


def _installed(module: str, *parts: str) -> Path:
    """A path inside an installed package."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.submodule_search_locations, module
    return Path(spec.submodule_search_locations[0]).joinpath(*parts)


# Suite -> (its tests as installed: NumPy 2 keeps them in _core, NumPy 1 in core; the
# fewest that must pass: far fewer means a collection problem, not success).
SUITES = {
    "numpy": ([("numpy", "_core", "tests", "test_einsum.py"),
               ("numpy", "core", "tests", "test_einsum.py")], 60),
    "opt_einsum": ([("opt_einsum", "tests")], 7000),
}


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_shipped_suite_passes_with_gpu_tc(suite, tmp_path):
    locations, fewest = SUITES[suite]
    found = [path for path in (_installed(*x) for x in locations) if path.exists()]
    assert found, f"none of {locations} is installed"
    target = found[0]
    arguments = [str(target), "-p", "dropin", f"--dropin={suite}", "-p", "no:cacheprovider",
                 "-p", "no:benchmark", "-p", "no:randomly", "-o", "addopts=", "-q",
                 "--rootdir", str(target.parent)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    result, outcomes = junit.run_pytest(arguments, tmp_path / "junit.xml", tmp_path, env)
    output = result.stdout[-4000:] + result.stderr[-4000:]
    assert not outcomes.failures and not outcomes.errors, outcomes.problems()
    assert result.returncode == 0, output
    collected = {name.rsplit("::", 1)[-1] for name in outcomes.names()}
    expected_failures = {name.rsplit("::", 1)[-1] for name in outcomes.xfails}
    assert expected_failures == set(dropin.expected_failures(suite)) & collected
    assert len(outcomes.passed) >= fewest, f"{len(outcomes.passed)} passed; {outcomes.skips}"
    served = re.search(r"dropin: gpu_tc served (\d+) calls", result.stdout)
    assert served and int(served.group(1)) >= fewest, output


def test_the_judge_catches_what_numpy_does_otherwise(monkeypatch):
    """numpy's tests that compare two einsum calls see gpu_tc on both sides; the plugin's
    judge compares each call with numpy's own einsum, so a wrong value, dtype or an
    accepted call numpy refuses fails."""
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(dropin.judged_einsum("ij,kj", a, a), a @ a.T)
    out = np.zeros((2, 2))
    assert dropin.judged_einsum("ij,kj", a, a, out=out) is out
    with pytest.raises(TypeError):  # refused by both: gpu_tc's error reaches the test
        dropin.judged_einsum("ij,kj", a, a, out=np.zeros((2, 2), np.int64))
    real = gpu_tc.einsum
    for wrong in (lambda *x, **k: real(*x, **k) * 1.001,
                  lambda *x, **k: real(*x, **k).astype(np.float32)):
        monkeypatch.setattr(gpu_tc, "einsum", wrong)
        with pytest.raises(AssertionError):
            dropin.judged_einsum("ij,kj", a, a)
    monkeypatch.setattr(gpu_tc, "einsum", lambda *x, **k: np.zeros((2, 2), np.int64))
    with pytest.raises(AssertionError, match="numpy raised"):
        dropin.judged_einsum("ij,kj", a, a, out=np.zeros((2, 2), np.int64))
