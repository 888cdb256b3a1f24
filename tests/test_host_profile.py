"""benchmarks/host_profile.py: per-call host times and profiles of warm small calls (run
on the GPU host by gpu_visit.sh; here on the CPU backend, with few calls)."""

from __future__ import annotations

import re

from helpers import benchmark_script


def test_every_call_gets_its_time_route_and_profile(monkeypatch):
    host_profile = benchmark_script("host_profile")
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
        # cProfile saw the 20 calls (gpu_tc.einsum's own frames only where its compiled
        # front did not serve them: theirs is the caller's time)
        assert re.search(r"\n\s+20\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+ "
                         r"\S+host_profile.py:\d+\(call\)", section)
