"""The runner's pinning of the C heap's thresholds (gpu_tc.bench.heap)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from gpu_tc.bench import heap

GLIBC = platform.libc_ver()[0] == "glibc"

# Page faults a call of a fresh 4.8 MB array, touched and freed, in a new process: with
# glibc's mmap threshold held at its initial 128 KiB, then after heap.pin().
_FAULTS = textwrap.dedent("""
    import ctypes, ctypes.util, resource, sys
    import numpy as np
    from gpu_tc.bench import heap

    def faults():
        np.ones(600_000)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(40):
            np.ones(600_000)
        return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 40

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    assert libc.mallopt(heap.M_MMAP_THRESHOLD, 128 << 10)
    low = faults()
    print(heap.pin())
    print(low, faults())
""")


@pytest.mark.skipif(not GLIBC, reason="mallopt's thresholds are glibc's")
def test_pinned_thresholds_serve_a_fresh_result_without_page_faults():
    """Below the mmap threshold a freed block is reused: no page faults. The 128 KiB
    start gives each 4.8 MB array fresh pages (hundreds of faults, fewer with huge
    pages), the pinned 32 MiB none after the first."""
    env = {k: v for k, v in os.environ.items() if k not in heap.VARIABLES}
    done = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    said, counts = done.stdout.splitlines()
    low, pinned = map(float, counts.split())
    assert said.endswith("mmap threshold 32 MiB, trim threshold 64 MiB (pinned by the runner)")
    assert low >= 2 and pinned < 1, (low, pinned)


@pytest.mark.parametrize("name", heap.VARIABLES)
def test_a_threshold_the_user_set_stands(monkeypatch, name):
    for other in heap.VARIABLES:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "131072")
    monkeypatch.setattr(heap.ctypes, "CDLL", lambda *a: pytest.fail("mallopt called"))
    assert heap.pin() == f"left as {name} sets them"


def test_another_c_library_is_left_as_it_is(monkeypatch):
    for name in heap.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert heap.pin() == "left as it is (the C library is not glibc)"
