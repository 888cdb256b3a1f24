"""Shared fixtures: a seed per test from its node id, and the gpu marker's skip.

Under the gpu_double emulation (tests/gpu_double; ``cupy.__gpu_double__``) the gpu
tests run on a host test double of CuPy, cuBLAS and cuTENSOR, never on a GPU: the
report header says so.

The persistent cache (GPU_TC_CACHE_DIR) is off in every test and the processes they
start, so that a decision measured by one test, or by an earlier run, never serves
another; the cache's own tests (tests/test_disk_cache.py) give it a directory.
"""

from __future__ import annotations

import importlib.util
import os
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import GPU_EMULATED

os.environ["GPU_TC_CACHE_DIR"] = ""


def _gpu_available() -> tuple[bool, str]:
    if importlib.util.find_spec("cupy") is None:
        return False, "CuPy is not installed"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False, "no CUDA device"
    except Exception as err:  # noqa: BLE001 - any CUDA failure means no usable GPU
        return False, f"no usable CUDA device ({type(err).__name__}: {err})"
    return True, ""


GPU_AVAILABLE, GPU_REASON = _gpu_available()


def pytest_report_header(config: pytest.Config) -> str:
    if GPU_EMULATED:
        return "gpu: EMULATED by tests/gpu_double (a test double; nothing here runs on a GPU)"
    return "gpu: available" if GPU_AVAILABLE else f"gpu: none ({GPU_REASON})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if GPU_AVAILABLE:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {GPU_REASON}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test's node id: stable across runs and workers."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def without_mkl(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MKL engine (cpu_fallback.mkl) for plans built in the test: for tests that count
    the variants NumPy's BLAS and gpu_tc's kernels offer."""
    from cpu_fallback import mkl

    monkeypatch.setattr(mkl, "engine", lambda: None)


@pytest.fixture(params=["serial", "parallel"])
def small_tiles(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every copy takes the cache-blocked kernel (cpu_fallback.blocked), serial or
    parallel, with tiles of a few elements (many partial tiles)."""
    from cpu_fallback import blocked

    monkeypatch.setattr(blocked, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(blocked, "PARALLEL_BYTES", 0 if request.param == "parallel" else 1 << 62)
    monkeypatch.setattr(blocked, "BUFFER_BYTES", 256)
    blocked._layout.cache_clear()  # layouts memoised under other settings
    yield
    blocked._layout.cache_clear()
