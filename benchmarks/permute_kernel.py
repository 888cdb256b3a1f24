"""Permutation bandwidth: gpu_tc.permute against a contiguous copy and the CPU peers.

Every candidate runs in the same process, interleaved round by round (so that a noisy
neighbour slows them alike); the table gives the best and the median round, and the
bandwidth of the best round counted as bytes read + bytes written.

Usage:
    python benchmarks/permute_kernel.py [--extent 64] [--rounds 9] [--dtype float64 ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import gpu_tc

PERMUTATIONS = ["abcd->dcba", "abcd->badc", "abcd->acbd", "abcd->bdac", "abcd->dabc"]


def _peers(expr: str, a: np.ndarray, b: np.ndarray) -> dict[str, Callable[[], Any]]:
    """The candidates for one permutation: into ``b`` (preallocated) or a new array."""
    inp, outp = expr.split("->")
    perm = tuple(inp.index(x) for x in outp)
    source = a.transpose(perm)
    peers: dict[str, Callable[[], Any]] = {
        "numpy copyto(out, a.transpose)": lambda: np.copyto(b, source),
        "gpu_tc.permute (new array)": lambda: gpu_tc.permute(expr, a),
        "gpu_tc.permute(out=)": lambda: gpu_tc.permute(expr, a, out=b),
    }
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        peers["torch tb.copy_(ta.permute)"] = lambda: tb.copy_(ta.permute(perm))
    except ImportError:
        pass
    try:
        import pytblis

        peers["pytblis.transpose_add(out=)"] = lambda: pytblis.transpose_add(expr, a, out=b)
    except ImportError:
        pass
    return peers


def _measure(cands: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    for run in cands.values():  # warm up: plans, numba's compilation, thread pools
        run()
    times: dict[str, list[float]] = {name: [] for name in cands}
    for _ in range(rounds):
        for name, run in cands.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extent", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--dtype", nargs="+", default=["float64", "float32"])
    parser.add_argument("--perm", nargs="+", default=PERMUTATIONS)
    args = parser.parse_args()
    n = args.extent
    print(f"{'case':<44} {'best ms':>8} {'median':>8} {'GB/s':>7} {'vs copy':>8}")
    for dtype in args.dtype:
        a = np.random.default_rng(0).standard_normal((n, n, n, n)).astype(dtype)
        b = np.empty_like(a)
        moved = 2 * a.nbytes
        base: dict[str, Callable[[], Any]] = {
            "contiguous np.copyto(out, a)": lambda a=a, b=b: np.copyto(b, a),
            "contiguous a.copy() (new array)": lambda a=a: a.copy(),
        }
        cands = dict(base)
        for expr in args.perm:
            cands.update({f"{expr} {k}": v for k, v in _peers(expr, a, b).items()})
        times = _measure(cands, args.rounds)
        copy_best = min(times["contiguous np.copyto(out, a)"])
        print(f"-- {n}^4 {dtype} ({a.nbytes / 2**20:.0f} MiB), {args.rounds} rounds")
        for name, ts in times.items():
            best = min(ts)
            print(
                f"{name:<44} {best * 1e3:8.1f} {statistics.median(ts) * 1e3:8.1f} "
                f"{moved / best / 1e9:7.1f} {copy_best / best:8.2f}"
            )


if __name__ == "__main__":
    main()
