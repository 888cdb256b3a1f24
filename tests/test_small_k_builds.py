"""Every build of the small-K kernel's loops (AVX-512, AVX2, baseline), not only the one
this host picks: tests/test_small_k.py and tests/test_gathered.py run again in a child
process whose GPU_TC_SMALL_K_ISA names a narrower build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_fallback import kernels

pytestmark = pytest.mark.skipif(not kernels.built("_small_k"),
                                reason="cpu_fallback._small_k was not built (no C compiler)")

TESTS = Path(__file__).parent
BUILDS = {"avx512f": 2, "avx2": 1, "baseline": 0}  # widest first


def _host_build() -> str:
    from cpu_fallback import small_k
    return small_k.isa()


@pytest.mark.parametrize("build", ["avx2", "baseline"])
def test_a_narrower_build_passes_the_kernels_tests(build):
    host = _host_build()
    if BUILDS[build] > BUILDS[host]:
        pytest.skip(f"this CPU runs the {host} build at most, not {build}")
    env = {**os.environ, "GPU_TC_SMALL_K_ISA": build}
    code = ("import sys, pytest; from cpu_fallback import small_k; "
            f"assert small_k.isa() == {build!r}, small_k.isa(); "
            "sys.exit(pytest.main(sys.argv[1:]))")
    done = subprocess.run(
        [sys.executable, "-c", code, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         str(TESTS / "test_small_k.py"), str(TESTS / "test_gathered.py")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
