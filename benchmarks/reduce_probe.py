"""Each GPU route of the reduce suite's sums alone, beside torch's and a device copy.

Visit 8 on an H200 saw cuTENSOR's reductions take 60-100 us by CUDA events where visit 7,
on the same code, saw 41-53 and torch's took 46 both times. This times, per case and
route (gpu_tc's cuTENSOR plan with its default workspace and with the least it takes,
CuPy's reduction kernel, gpu_tc's strided-sum kernel where it applies), torch.sum and a
copy of A:

* ``single``: CUDA events around one call after a synchronisation (median of 20): the
  device's time for one call, launch gaps between its kernels included;
* ``loop``: events around 50 back-to-back calls, per call: the throughput;
* ``host``: the host's time to issue those 50 calls, per call.

Every result (D filled with NaN before the checked call) is checked against NumPy's
sum of the same data; each gpu_tc plan's reason (its workspace) follows the table.
``cupy.sum`` is CuPy's own, through whatever ``CUPY_ACCELERATORS`` names. Two passes,
to show the spread.

    python benchmarks/reduce_probe.py --output reduce-probe.txt
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cupy
import numpy as np

from gpu_tc import MemoryLimitError, Options
from gpu_tc.backend import UNSCALED, backend_named
from gpu_tc.problem import ReductionProblem, contiguous_spec

# name -> (A's labels and extents, D's labels): the reduce suite's four sums.
CASES = {
    "64^4 sum middle": ("abcd", (64, 64, 64, 64), "ad"),
    "64^4 sum trailing": ("abcd", (64, 64, 64, 64), "a"),
    "64^4 sum leading": ("abcd", (64, 64, 64, 64), "d"),
    "4096^2 sum all": ("ab", (4096, 4096), ""),
}
SINGLE_CALLS = 20
LOOP_CALLS = 50


def _times(call: Callable[[], Any]) -> tuple[float, float, float]:
    """(single, loop, host) in microseconds: see the module."""
    stream = cupy.cuda.get_current_stream()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(5):
        call()
    singles = []
    for _ in range(SINGLE_CALLS):
        stream.synchronize()
        start.record()
        call()
        end.record()
        end.synchronize()
        singles.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
    stream.synchronize()
    start.record()
    issued = time.perf_counter()
    for _ in range(LOOP_CALLS):
        call()
    host = (time.perf_counter() - issued) / LOOP_CALLS * 1e6
    end.record()
    end.synchronize()
    loop = cupy.cuda.get_elapsed_time(start, end) * 1e3 / LOOP_CALLS
    return statistics.median(singles), loop, host


def _routes(problem: ReductionProblem) -> dict[str, Any]:
    """gpu_tc's plans of the problem by route, and cuTENSOR's with its least workspace."""
    gpu = backend_named("gpu")
    timed = gpu.reduction_plan(problem, Options())
    plans = {plan.route: plan for plan in getattr(timed, "plans", (timed,))}
    try:  # no workspace at all, where cuTENSOR plans the reduction without
        least = gpu.reduction_plan(problem, Options(memory_limit=0))
    except MemoryLimitError as err:  # else the least it estimates
        least = gpu.reduction_plan(problem, Options(workspace_limit=err.need))
    plans["cutensor, least workspace"] = getattr(least, "plans", (least,))[0]
    return plans


def _torch_sum(a: cupy.ndarray, axes: tuple[int, ...]) -> Callable[[], Any] | None:
    """torch.sum over ``axes`` of the same data (None without torch's CUDA)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    t = torch.as_tensor(a, device="cuda")
    return lambda: torch.sum(t, dim=axes)


def _executing(plan: Any, a: cupy.ndarray, d: cupy.ndarray) -> Callable[[], None]:
    """A call of ``plan`` summing ``a`` into ``d``."""
    return lambda: plan.execute((a,), d, UNSCALED, None)


def _case_rows(name: str, labels: str, extents: tuple[int, ...], kept: str,
               rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """One table row per route of one case, and each gpu_tc plan's reason."""
    host = rng.standard_normal(extents)
    a = cupy.asarray(host)
    axes = tuple(i for i, x in enumerate(labels) if x not in kept)
    expected = host.sum(axis=axes)
    problem = ReductionProblem(
        contiguous_spec(labels, extents, "d"),
        contiguous_spec(kept, [extents[labels.index(x)] for x in kept], "d"))
    d = cupy.empty(expected.shape)
    copy = cupy.empty_like(a)
    plans = _routes(problem)
    calls = {route: _executing(plan, a, d) for route, plan in plans.items()}
    calls["cupy.sum"] = lambda: a.sum(axis=axes, out=d)
    torch_sum = _torch_sum(a, axes)
    checks = dict(calls)  # what writes each route's result into d (or copy)
    if torch_sum is not None:
        calls["torch.sum"] = torch_sum
        checks["torch.sum"] = lambda: cupy.copyto(d, cupy.asarray(torch_sum()))
    calls["copy of A"] = checks["copy of A"] = lambda: cupy.copyto(copy, a)
    rows = []
    for route, call in calls.items():
        single, loop, host_us = _times(call)
        d.fill(float("nan"))  # a route that wrote nothing shows as nan
        copy.fill(float("nan"))
        checks[route]()
        got, want = (copy, host) if route == "copy of A" else (d, expected)
        error = float(np.abs(cupy.asnumpy(got) - want).max())
        rows.append(f"| {name} `{labels}->{kept}` | {route} | {single:.1f} | {loop:.1f} | "
                    f"{host_us:.1f} | {error:.1e} |")
    reasons = [f"- {name}, {route}: {plan.reason}" for route, plan in plans.items()]
    return rows, reasons


def report(passes: int) -> str:
    """The probe's table, one block per pass."""
    rng = np.random.default_rng(0)
    lines = [f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; "
             f"CuPy {cupy.__version__}; us per call: single (events, one call), "
             f"loop (events, {LOOP_CALLS} calls), host (issuing them)", ""]
    for index in range(passes):
        lines += [f"== pass {index + 1}", "| case | route | single | loop | host | max error |",
                  "|---|---|---|---|---|---|"]
        reasons = []
        for name, (labels, extents, kept) in CASES.items():
            rows, why = _case_rows(name, labels, extents, kept, rng)
            lines += rows
            reasons += why
        lines += ["", "gpu_tc's plans (workspace and launch):", *reasons, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--output", type=Path, help="write the report here (default: print it)")
    args = parser.parse_args()
    text = report(args.passes)
    if args.output is None:
        print(text)
        return
    args.output.write_text(text)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
