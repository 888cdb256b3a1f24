"""Peak extra memory and time of gpu_tc's bounded copies on the TCCG cases.

Two parts, both side by side in one run:

* ``--memory``: per case, gpu_tc (default budget) and each peer in a fresh process
  (gpu_tc.bench.memory: resident peak above the inputs, less the result), against the
  bytes of the inputs and the result; and gpu_tc once more in a probe that called it
  four times before its baseline (``gpu_tc_warm``: without a process's one-time costs).
* ``--timing``: per case, gpu_tc with the default budget, unbounded
  (``Options(memory_limit=2**62)``: the same build without tiles) and under
  ``--limit`` bytes (default 16 MiB), interleaved, median of ``--repeat`` warm calls
  after ``--settle`` untimed rounds (the measured routes settle); the bounded result
  is checked against numpy's.

Usage:
    python benchmarks/compare_memory.py --memory --dtype float64 --peers numpy
    python benchmarks/compare_memory.py --timing --dtype float64 --cases 20-30
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import gpu_tc
from gpu_tc import Options
from gpu_tc.bench import memory
from gpu_tc.bench.cli_args import parse_case_ids
from gpu_tc.bench.suites import cases

MIB = 1 << 20


def _inputs_and_result(case) -> tuple[int, int]:
    ops = case.operands()
    inputs = sum(x.nbytes for x in ops)
    out_labels = case.expr.split("->")[1]
    result = int(np.prod([case.sizes[x] for x in out_labels])) * np.dtype(case.dtype).itemsize
    return inputs, result


def memory_rows(selected, peers: list[str]) -> list[dict]:
    rows = []
    for case in selected:
        inputs, result = _inputs_and_result(case)
        row = {"id": case.id, "expr": case.expr, "inputs": inputs, "result": result}
        for name in ["gpu_tc", *peers]:
            found = memory.measure(case, name, "cpu")
            row[name] = found.peak_extra_bytes
            if found.reason:
                row[name + "_reason"] = found.reason
        # The same after four calls in the probe (each measured variant runs once):
        # without gpu_tc's one-time costs (numba's import and kernels), its pool emptied.
        row["gpu_tc_warm"] = memory.measure(case, "gpu_tc", "cpu", warm=True).peak_extra_bytes
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def timing_rows(selected, limit: int, repeat: int, settle: int) -> list[dict]:
    rows = []
    variants = {"default": None, "unbounded": 1 << 62, "limit": limit}
    for case in selected:
        ops = case.operands()
        plans = {k: gpu_tc.prepare(case.expr, *ops, options=Options(memory_limit=v))
                 for k, v in variants.items()}
        for _ in range(settle):  # the measured routes time their variants, then settle
            for plan in plans.values():
                plan.execute(*ops)
        times: dict[str, list[float]] = {k: [] for k in plans}
        for _ in range(repeat):
            for name, plan in plans.items():
                start = time.perf_counter()
                plan.execute(*ops)
                times[name].append(time.perf_counter() - start)
        expected = np.einsum(case.expr, *ops, optimize=True)
        got = plans["limit"].execute(*ops)
        error = float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-300))
        row = {"id": case.id, "expr": case.expr, "error": error,
               **{f"{k}_s": statistics.median(v) for k, v in times.items()},
               **{f"{k}_bytes": p.temporary_bytes for k, p in plans.items()},
               "default_reason": plans["default"].reason}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--cases", default=None)
    parser.add_argument("--peers", default="numpy")
    parser.add_argument("--limit", type=int, default=16 * MIB)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--settle", type=int, default=16,
                        help="untimed rounds before timing (measured routes settle)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    selected = cases("tccg", args.dtype)
    if args.cases:
        wanted = parse_case_ids(args.cases)
        selected = [c for c in selected if c.id in wanted]
    doc: dict = {"dtype": args.dtype}
    if args.memory:
        doc["memory"] = memory_rows(selected, [p for p in args.peers.split(",") if p])
    if args.timing:
        doc["timing"] = timing_rows(selected, args.limit, args.repeat, args.settle)
    if args.output:
        args.output.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
