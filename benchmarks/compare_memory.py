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

With ``--output F.json``, the tables are written as markdown to F.md too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import gpu_tc
from gpu_tc import Options
from gpu_tc.bench import environment, memory
from gpu_tc.bench.cli_args import parse_case_ids
from gpu_tc.bench.memory_probe import WARM_CALLS
from gpu_tc.bench.suites import cases
from gpu_tc.host import cpu_name

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
        # The same after WARM_CALLS calls in the probe (a measured plan has timed every
        # variant): without gpu_tc's one-time costs (modules, BLAS buffers), its pool
        # emptied, the variant kept probed.
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
               **{f"{k}_runs": v for k, v in times.items()},
               # Each repeat's default call over the unbounded call beside it: a drift
               # of the host between repeats cancels.
               "paired": [d / u for d, u in zip(times["default"], times["unbounded"])],
               **{f"{k}_bytes": p.temporary_bytes for k, p in plans.items()},
               "default_reason": plans["default"].reason}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def memory_markdown(doc: dict) -> str:
    """The ``--memory`` rows as a markdown table: MiB per implementation, gpu_tc's
    ratios to the inputs + result, the sums, and the cases over issue 19's 0.25x."""
    rows = doc["memory"]
    peers = [k for k in rows[0] if k not in
             ("id", "expr", "inputs", "result", "gpu_tc", "gpu_tc_warm") and
             not k.endswith("_reason")]
    lines = [
        f"# Peak extra memory, TCCG {doc['dtype']} at full extents (CPU)", "",
        "Each implementation alone in a fresh process: resident peak (VmHWM) above the "
        "process once the inputs exist, less the result's bytes, over a cold then a warm "
        "call (`gpu_tc/bench/memory_probe.py`). `gpu_tc warm`: the same probe after "
        f"{WARM_CALLS} gpu_tc calls before the baseline (a measured plan has timed its "
        "variants), its host pool emptied (a process's one-time costs left out).", "",
        f"Host: {doc['host']}. Command: `{doc['command']}` (commit {doc['commit']}).", "",
        "| " + " | ".join(["case", "expression", "inputs + result MiB", "gpu_tc MiB", "x",
                           "gpu_tc warm MiB", "x", *(f"{p} MiB" for p in peers)]) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(peers),
    ]
    sums = dict.fromkeys(["gpu_tc", "gpu_tc_warm", *peers], 0)
    over = {"gpu_tc": 0, "gpu_tc_warm": 0}
    for row in rows:
        whole = row["inputs"] + row["result"]
        cells = [str(row["id"]), f"`{row['expr']}`", f"{whole / MIB:.0f}"]
        for name in ("gpu_tc", "gpu_tc_warm"):
            cells += [f"{row[name] / MIB:.0f}", f"{row[name] / whole:.2f}"]
            over[name] += row[name] > 0.25 * whole
        cells += [f"{row[p] / MIB:.0f}" if row[p] is not None else "failed" for p in peers]
        for name in sums:
            sums[name] += row[name] or 0
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| " + " | ".join(["sum", "", "", f"{sums['gpu_tc'] / MIB:,.0f}", "",
                                     f"{sums['gpu_tc_warm'] / MIB:,.0f}", "",
                                     *(f"{sums[p] / MIB:,.0f}" for p in peers)]) + " |")
    lines += ["", f"Cases above 0.25x (inputs + result): gpu_tc {over['gpu_tc']} of "
              f"{len(rows)} in a fresh process, {over['gpu_tc_warm']} warm."]
    if "numpy" in peers and sums["numpy"]:
        lines.append(f"gpu_tc's sum / numpy.einsum(optimize=True)'s: fresh "
                     f"{sums['gpu_tc'] / sums['numpy']:.2f}, warm "
                     f"{sums['gpu_tc_warm'] / sums['numpy']:.2f}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--cases", default=None)
    parser.add_argument("--peers", default="numpy")
    parser.add_argument("--limit", type=int, default=16 * MIB)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--settle", type=int, default=48,
                        help="untimed rounds before timing (measured routes settle: up "
                             "to twelve variants with MKL's, four calls each)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.output:  # before the runs (tens of minutes), not after them
        args.output.parent.mkdir(parents=True, exist_ok=True)
    selected = cases("tccg", args.dtype)
    if args.cases:
        wanted = parse_case_ids(args.cases)
        selected = [c for c in selected if c.id in wanted]
    doc: dict = {
        "dtype": args.dtype,
        "command": "python benchmarks/compare_memory.py " + " ".join(sys.argv[1:]),
        "commit": _commit(),
        "host": f"{cpu_name()} ({os.cpu_count()} cores), "
                + environment.blas()["text"] + f", NumPy {np.__version__}",
    }
    if args.memory:
        doc["memory"] = memory_rows(selected, [p for p in args.peers.split(",") if p])
    if args.timing:
        doc["timing"] = timing_rows(selected, args.limit, args.repeat, args.settle)
    if args.output:
        args.output.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        parts = ([memory_markdown(doc)] if args.memory else []) + (
            [timing_markdown(doc)] if args.timing else [])
        if parts:
            args.output.with_suffix(".md").write_text("\n".join(parts), encoding="utf-8")


def timing_markdown(doc: dict) -> str:
    """The ``--timing`` rows as a markdown table: each plan's median, the default
    budget's and the limit's ratio to unbounded, their geomeans and the cases within
    issue 19's 5%."""
    rows = doc["timing"]
    lines = [
        f"# Time of bounded copies, TCCG {doc['dtype']} at full extents (CPU)", "",
        "Per case, three held plans of one build side by side, interleaved: the default "
        "budget, unbounded (`memory_limit=2**62`) and the limit; median of the warm "
        "calls after the settling rounds; paired: the median (slowest-fastest) over the "
        "repeats of each default call's time over the unbounded call's beside it. Error: "
        "the limit's result against numpy.einsum, relative to its largest element.", "",
        f"Host: {doc['host']}. Command: `{doc['command']}` (commit {doc['commit']}).", "",
        "| case | expression | unbounded s | default s | x | paired x | default MiB | "
        "limit s | x | limit MiB | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {"default": [], "limit": []}
    paired: list[float] = []
    for row in rows:
        cells = [str(row["id"]), f"`{row['expr']}`", f"{row['unbounded_s']:.3f}"]
        for name in ratios:
            ratio = row[f"{name}_s"] / row["unbounded_s"]
            ratios[name].append(ratio)
            cells += [f"{row[f'{name}_s']:.3f}", f"{ratio:.3f}"]
            if name == "default" and "paired" in row:
                pairs = row["paired"]
                paired.append(statistics.median(pairs))
                cells.append(f"{paired[-1]:.3f} ({min(pairs):.3f}-{max(pairs):.3f})")
            elif name == "default":
                cells.append("")
            cells.append(f"{row[f'{name}_bytes'] / MIB:.1f}")
        cells.append(f"{row['error']:.1e}")
        lines.append("| " + " | ".join(cells) + " |")

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values))

    within = sum(r <= 1.05 for r in ratios["default"])
    lines += ["", f"Default budget / unbounded: geomean {geomean(ratios['default']):.3f}, "
              f"{min(ratios['default']):.3f}-{max(ratios['default']):.3f}, {within} of "
              f"{len(rows)} cases within 5%"
              + (f"; paired {geomean(paired):.3f}, {min(paired):.3f}-{max(paired):.3f}, "
                 f"{sum(r <= 1.05 for r in paired)} of {len(paired)} within 5%" if paired else "")
              + ". Limit / unbounded: geomean "
              f"{geomean(ratios['limit']):.3f}, {min(ratios['limit']):.3f}-"
              f"{max(ratios['limit']):.3f}."]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    """The checkout's short commit, with "+changes" where the working tree differs."""
    def git(*words: str) -> str:
        return subprocess.run(["git", *words], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=False).stdout.strip()
    return (git("rev-parse", "--short", "HEAD") or "unknown") + (
        "+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


if __name__ == "__main__":
    main()
