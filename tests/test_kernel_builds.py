"""Every hand-built variant of the compiled kernels (AVX-512, AVX2, baseline) of the
small-K GEMM, the pairwise sums and the copy's register transposes, not only the one
this host picks: their tests run again in a child process whose GPU_TC_KERNEL_ISA names
a narrower build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_fallback import kernels

pytestmark = pytest.mark.skipif(
    not (kernels.built("_small_k") and kernels.built("_pairwise")
         and kernels.built("_tile_copy")),
    reason="cpu_fallback._small_k, _pairwise or _tile_copy was not built (no C compiler)")

TESTS = Path(__file__).parent
VARIABLE = "GPU_TC_KERNEL_ISA"
BUILDS = {"avx512f": 2, "avx2": 1, "baseline": 0}  # widest first
# Each kernel's build, as the child reports it.
ISAS = ("from cpu_fallback import small_k, _pairwise, tiles; "
        "isas = (small_k.isa(), _pairwise.isa(), tiles._tile_copy.isa())")


def _child(code: str, build: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if build is not None:
        env[VARIABLE] = build
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def widest() -> str:
    """The build this CPU runs with no narrowing (asked of a child: this process's may be
    narrowed by the variable); every kernel picks the same one."""
    done = _child(f"{ISAS}; print(*isas)", None)
    assert done.returncode == 0, done.stderr
    small_k_isa, *others = done.stdout.split()
    assert others == [small_k_isa, small_k_isa]
    return small_k_isa


@pytest.mark.parametrize("build", ["avx2", "baseline"])
def test_a_narrower_build_passes_the_kernels_tests(widest, build):
    if BUILDS[build] > BUILDS[widest]:
        pytest.skip(f"this CPU runs the {widest} build at most, not {build}")
    code = (f"import sys, pytest; {ISAS}; "
            f"assert isas == ({build!r}, {build!r}, {build!r}), isas; "
            "sys.exit(pytest.main(sys.argv[1:]))")
    done = _child(code, build, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                  str(TESTS / "test_small_k.py"), str(TESTS / "test_gathered.py"),
                  str(TESTS / "test_pairwise_sum.py"), str(TESTS / "test_permute_transposes.py"),
                  str(TESTS / "test_permute_streamed.py"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert " passed" in done.stdout
