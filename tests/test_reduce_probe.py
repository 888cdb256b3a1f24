"""benchmarks/reduce_probe.py: each GPU route of the reduce suite's sums alone, checked
against NumPy's sum (marker ``gpu``: on CI on the gpu_double emulation, at small extents)."""

from __future__ import annotations

import re

import pytest
from helpers import benchmark_script

pytestmark = pytest.mark.gpu


def test_every_route_is_timed_and_matches_numpys_sum(monkeypatch):
    probe = benchmark_script("reduce_probe")
    monkeypatch.setattr(probe, "CASES", {"middle": ("abcd", (8, 9, 10, 11), "ad"),
                                         "all": ("ab", (64, 80), "")})
    monkeypatch.setattr(probe, "SINGLE_CALLS", 2)
    monkeypatch.setattr(probe, "LOOP_CALLS", 3)
    text = probe.report(passes=1)
    rows = re.findall(r"^\| (\w+) `(\w+->\w*)` \| ([^|]+) \| ([0-9.]+) \| ([0-9.]+) \| "
                      r"([0-9.]+) \| ([0-9.e+-]+|nan) \|$", text, re.M)
    routes = {(name, route) for name, _, route, *_ in rows}
    for name in ("middle", "all"):
        for route in ("cutensor", "cutensor, least workspace", "cupy", "cupy.sum", "copy of A"):
            assert (name, route) in routes
    assert ("middle", "kernel") in routes  # the strided-sum kernel: 90 summed elements
    for *_, single, loop, host, error in rows:
        assert float(single) >= 0 and float(loop) >= 0 and float(host) > 0
        assert float(error) < 1e-9
