"""benchmarks/host_profile.py: per-call host times and profiles of warm small calls (run
on the GPU host by gpu_visit.sh; here on the CPU backend, with few calls)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location(
        "host_profile", ROOT / "benchmarks" / "host_profile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_call_gets_its_time_route_and_profile(monkeypatch):
    host_profile = _module()
    calls = {"4x4 matmul": host_profile.CALLS["4x4 matmul"],
             "trace 4x4": host_profile.CALLS["trace 4x4"]}
    monkeypatch.setattr(host_profile, "CALLS", calls)
    monkeypatch.setattr(host_profile, "WARM_UPS", 3)
    text = host_profile.report("cpu", calls=20, top=5)
    sections = text.split("\n== ")[1:]
    assert [s.split(" `")[0] for s in sections] == list(calls)
    for section, (subscripts, _) in zip(sections, calls.values()):
        time = re.search(rf"`{re.escape(subscripts)}`: gpu_tc ([0-9.]+) us a call", section)
        assert time and 0 < float(time.group(1)) < 1e5
        assert "\nroute blas:small: " in section or "\nroute reduce: " in section
        # cProfile saw the 20 calls of gpu_tc.einsum
        assert re.search(r"\n\s+20\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+ \S+api.py", section)
