"""The first calls of a fresh process, with and without the persistent cache.

Each case chosen (TCCG by default, where every case has a measured route on the CPU; or
the trace or reduce suite, whose large sums time their routes too) runs in fresh
processes: ``off`` with ``GPU_TC_CACHE_DIR`` empty, and ``cached`` with a directory an
earlier process of the same case filled (its decision saved; that process is not
counted). The two modes alternate, ``--repeat`` processes each. A process times
``prepare()``, then each of ``--calls`` calls: the first call, the sum of the first 12
(a process without the cache warms up and times both variants there), and the median
of the last 8 (warm), and the peak resident memory it gained over those calls (modules
loaded on first use, kernels, pools). The result of each process is checked against
numpy.einsum, and the route kept is reported: both modes must end on a route of equal
speed.

On the GPU (``--backend gpu --autotune N``) the plan autotunes its cuTENSOR stages
over its first N calls; with the cache, the plan cache an earlier process wrote
already holds the kernels it chose.

Usage:
    python benchmarks/first_call.py --cases 3,7,13,20 --scale 0.5 --repeat 5 \\
        --output benchmarks/results/cpu-first-call.json
    python benchmarks/first_call.py --suite trace --repeat 3 --output F.json
    python benchmarks/first_call.py --backend gpu --autotune 8 --cases 3,13,20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from gpu_tc.bench import environment
from gpu_tc.bench.suites import cases as suite_cases

SETTLING_CALLS = 12
WARM_CALLS = 8

_CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import gpu_tc

    def resident(field):
        with open("/proc/self/status") as status:
            return next(int(x.split()[1]) for x in status if x.startswith(field)) / 1024

    expr, shapes, calls = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    backend, autotune = sys.argv[4], int(sys.argv[5])
    rng = np.random.default_rng(1)
    host = [rng.standard_normal(shape) for shape in shapes]
    baseline = resident("VmRSS")
    if backend == "gpu":
        import cupy
        operands = [cupy.asarray(x) for x in host]
        sync, to_host = cupy.cuda.runtime.deviceSynchronize, cupy.asnumpy
        sync()
    else:
        operands, sync, to_host = host, lambda: None, np.asarray
    start = time.perf_counter()
    plan = gpu_tc.prepare(expr, *operands)
    if autotune:
        plan.autotune(autotune)
    prepared = time.perf_counter() - start
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        result = plan.execute(*operands)
        sync()
        seconds.append(time.perf_counter() - start)
    extra = resident("VmHWM") - baseline
    exact = np.einsum(expr, *host, optimize=True)
    error = float(np.abs(to_host(result) - exact).max() / max(1.0, np.abs(exact).max()))
    print(json.dumps({"prepare": prepared, "seconds": seconds, "reason": plan.reason,
                      "route": plan.route, "error": error, "extra_mib": extra}))
""")


def run_process(expr: str, shapes: list[list[int]], args: argparse.Namespace,
                cache: str) -> dict[str, Any]:
    """One fresh process's timings (``cache``: the GPU_TC_CACHE_DIR value)."""
    env = {**os.environ, "GPU_TC_CACHE_DIR": cache}
    command = [sys.executable, "-c", _CHILD, expr, json.dumps(shapes), str(args.calls),
               args.backend, str(args.autotune)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        mode = "cached" if cache else "off"
        raise SystemExit(f"{expr} ({args.backend}, {mode}) failed in its process, exit "
                         f"{done.returncode}:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout)
    seconds = found.pop("seconds")
    found.update(first=seconds[0], settling=sum(seconds[:SETTLING_CALLS]),
                 warm=statistics.median(seconds[-WARM_CALLS:]))
    return found


def measure_case(case: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Alternating off/cached processes of one case."""
    shapes = [[case.sizes[x] for x in term] for term in case.terms]
    with tempfile.TemporaryDirectory() as cache:
        run_process(case.expr, shapes, args, cache)  # fills the cache; not counted
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "cached": []}
        for _ in range(args.repeat):
            runs["off"].append(run_process(case.expr, shapes, args, ""))
            runs["cached"].append(run_process(case.expr, shapes, args, cache))
    summary = {mode: _summary(found) for mode, found in runs.items()}
    return {"id": case.id, "expr": case.expr, "sizes": case.sizes, "work": case.work,
            "modes": summary, "runs": runs}


def _summary(found: list[dict[str, Any]]) -> dict[str, Any]:
    def spread(key: str) -> dict[str, float]:
        values = sorted(r[key] for r in found)
        return {"median": statistics.median(values), "min": values[0], "max": values[-1]}

    return {key: spread(key) for key in ("prepare", "first", "settling", "warm", "extra_mib")} | {
        "max_error": max(r["error"] for r in found),
        "kept": sorted({_kept(r["reason"], r["route"]) for r in found}),
    }


def _kept(reason: str, route: str) -> str:
    """The variant a reason says was kept, or the route where none was measured."""
    for marker in ("measured: ", "(gpu_tc's route cache): "):
        if marker in reason:
            return reason.split(marker, 1)[1].split(" kept", 1)[0]
    return "still measuring" if "measuring" in reason else route


def markdown(doc: dict[str, Any]) -> str:
    """The report as a markdown table (milliseconds: median [min-max])."""
    host = doc["host"]
    where = (f"GPU {', '.join(doc['gpu']['devices'])}, CuPy {doc['gpu'].get('cupy')}, "
             f"cuTENSOR {doc['gpu'].get('cutensor')}; autotune {doc['autotune']}"
             if doc.get("backend") == "gpu" else
             f"{host['cpu']} ({host['cpu_count']} cores), {host['blas'].get('text', '')}")
    lines = [
        f"# First calls in a fresh process, with and without the persistent cache "
        f"({doc.get('backend', 'cpu')}, float64, {doc['suite']}"
        + (f" x{doc['scale']})" if doc["suite"] == "tccg" else ")"),
        "",
        f"Host: {where}; gpu_tc {host['gpu_tc']}, numpy {host['numpy']}.",
        f"Command: `{doc['command']}`",
        "",
        f"{doc['repeat']} processes per mode, alternating; ms as median [min-max]. "
        f"'first 12': the sum of the first {SETTLING_CALLS} calls; 'warm': median of the "
        f"last {WARM_CALLS} of {doc['calls']} calls; 'extra MiB': the process's resident "
        "peak over its calls above its resident memory once the inputs exist (the result "
        "included).",
        "",
        "| case | mode | prepare | first call | first 12 | warm call | extra MiB | kept |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in doc["cases"]:
        for mode, s in case["modes"].items():
            cells = [_ms(s[k]) for k in ("prepare", "first", "settling", "warm")]
            extra = s["extra_mib"]
            cells.append(f"{extra['median']:.0f} [{extra['min']:.0f}-{extra['max']:.0f}]")
            lines.append(f"| {case['id']} `{case['expr']}` | {mode} | "
                         + " | ".join(cells) + f" | {', '.join(s['kept'])} |")
    lines += ["", "Ratio off/cached of the median first-12 sum: " + ", ".join(
        f"case {c['id']} {c['modes']['off']['settling']['median'] / c['modes']['cached']['settling']['median']:.2f}x"  # noqa: E501
        for c in doc["cases"])]
    return "\n".join(lines) + "\n"


def _ms(spread: dict[str, float]) -> str:
    return f"{spread['median'] * 1e3:.3g} [{spread['min'] * 1e3:.3g}-{spread['max'] * 1e3:.3g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=("tccg", "trace", "reduce"), default="tccg",
                        help="the cases' suite")
    parser.add_argument("--cases", help="case ids, comma-separated (TCCG: 3,7,13,20; "
                        "other suites: all)")
    parser.add_argument("--scale", type=float, default=0.5,
                        help="every extent times this (tccg only)")
    parser.add_argument("--repeat", type=int, default=5, help="processes per mode")
    parser.add_argument("--calls", type=int, default=24, help="calls per process (>= 20)")
    parser.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                        help="NumPy (cpu) or CuPy (gpu) operands")
    parser.add_argument("--autotune", type=int, default=0,
                        help="plan.autotune(N) after prepare (cuTENSOR stages on the GPU)")
    parser.add_argument("--output", type=Path, help="write JSON here (and .md beside it)")
    args = parser.parse_args()
    scale = args.scale if args.suite == "tccg" else 1.0
    every = suite_cases(args.suite, "float64", scale=scale)
    listed = args.cases or ("3,7,13,20" if args.suite == "tccg" else "")
    wanted = {int(x) for x in listed.split(",")} if listed else {c.id for c in every}
    chosen = [c for c in every if c.id in wanted]
    doc = {"command": "python " + " ".join(sys.argv), "suite": args.suite, "scale": scale,
           "backend": args.backend, "autotune": args.autotune, "repeat": args.repeat,
           "calls": args.calls, "host": environment.host(), "cases": []}
    if args.backend == "gpu":
        status = environment.gpu_status()
        doc["gpu"] = {"devices": list(status.devices), **status.versions}
    for case in chosen:
        doc["cases"].append(measure_case(case, args))
        print(f"case {case.id}: " + ", ".join(
            f"{mode} first-12 {s['settling']['median'] * 1e3:.3g} ms"
            for mode, s in doc["cases"][-1]["modes"].items()), flush=True)
    text = markdown(doc)
    print(text)
    if args.output:
        args.output.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        args.output.with_suffix(".md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
