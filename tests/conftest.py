"""Shared fixtures: a seed per test from its node id, and the gpu marker's skip."""

from __future__ import annotations

import importlib.util
import zlib

import numpy as np
import pytest


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
