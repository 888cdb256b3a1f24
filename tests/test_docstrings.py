"""The examples in the docstrings of gpu_tc, gpu_tc.distributed and cpu_fallback run as
written (doctest). gpu_tc.cuda's need a GPU; the command-line modules exit."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import cpu_fallback
import gpu_tc

SKIPPED = ("gpu_tc.cuda", "gpu_tc.__main__", "gpu_tc.distributed.service",
           "gpu_tc.distributed.preload")


def _modules() -> list[str]:
    names = []
    for package in (gpu_tc, cpu_fallback):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.startswith(SKIPPED):
                names.append(info.name)
    return sorted(names)


def test_the_walk_finds_the_modules_with_examples():
    names = _modules()
    assert {"gpu_tc.api", "gpu_tc.numpy_compat", "gpu_tc.distributed.slicing"} <= set(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    if name.startswith("gpu_tc.distributed"):
        pytest.importorskip("distributed", reason="the distributed extra is not installed")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
