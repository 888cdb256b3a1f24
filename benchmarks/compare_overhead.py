"""Warm per-call time of small calls, for two source trees of gpu_tc side by side.

Each round runs one fresh process per tree, alternating (A, B, A, B, ...), each timing
every call below on the same inputs. Per call and tree the table gives the best over
rounds of the best-of-repeats (the least disturbed measurement on a shared host) and
the median over rounds, and B/A of each.

Example (before/after a change, from the repository root):
    git worktree add /tmp/base HEAD~3
    python benchmarks/compare_overhead.py /tmp/base . --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# name -> (setup, statement): the statement is timed warm (after one untimed call).
CALLS = {
    "einsum ij,jk->ik 4x4": ("a = rng.standard_normal((4, 4))", "g.einsum('ij,jk->ik', a, a)"),
    "einsum i,i-> 8": ("v = rng.standard_normal(8)", "g.einsum('i,i->', v, v)"),
    "einsum ij,jk,kl->il 4x4": ("a = rng.standard_normal((4, 4))",
                                "g.einsum('ij,jk,kl->il', a, a, a)"),
    "einsum ii-> 4x4": ("a = rng.standard_normal((4, 4))", "g.einsum('ii->', a)"),
    "einsum abcd,dbea->ec 4^4": ("x = rng.standard_normal((4, 4, 4, 4))",
                                 "g.einsum('abcd,dbea->ec', x, x)"),
    "einsum out= 4x4": ("a = rng.standard_normal((4, 4)); o = np.empty((4, 4))",
                        "g.einsum('ij,jk->ik', a, a, out=o)"),
    "contract alpha,beta,c 4x4": ("a = rng.standard_normal((4, 4))",
                                  "g.contract('ij,jk->ik', a, a, alpha=2.0, beta=1.0, c=a)"),
    "permute ij->ji 4x4": ("a = rng.standard_normal((4, 4))", "g.permute('ij->ji', a)"),
    "reduce ij->i 4x4": ("a = rng.standard_normal((4, 4))", "g.reduce('ij->i', a)"),
    "trace 4x4": ("a = rng.standard_normal((4, 4))", "g.trace(a)"),
    "held plan 4x4": ("a = rng.standard_normal((4, 4)); p = g.prepare('ij,jk->ik', a, a)",
                      "p.execute(a, a)"),
}

CHILD = r"""
import json, sys, timeit
import numpy as np
import gpu_tc as g
rng = np.random.default_rng(0)
calls = json.loads(sys.argv[1])
repeat, number = int(sys.argv[2]), int(sys.argv[3])
out = {}
for name, (setup, statement) in calls.items():
    scope = {"g": g, "np": np, "rng": rng}
    exec(setup, scope)
    exec(statement, scope)
    times = timeit.repeat(statement, globals=scope, repeat=repeat, number=number)
    out[name] = min(times) / number * 1e6
print(json.dumps(out))
"""


def run_tree(tree: Path, repeat: int, number: int) -> dict[str, float]:
    """One process importing gpu_tc from ``tree``: best-of-``repeat`` us per call."""
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(CALLS), str(repeat), str(number)],
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the first tree (e.g. before)")
    parser.add_argument("b", type=Path, help="the second tree (e.g. after)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for _ in range(args.rounds):
        for key, tree in (("a", args.a), ("b", args.b)):
            results[key].append(run_tree(tree, args.repeat, args.number))
    print(f"A = {args.a}, B = {args.b}; {args.rounds} alternating rounds of one process "
          f"each; us per warm call, best of {args.repeat} x {args.number} per round\n")
    print("| call | A best | B best | B/A best | A median | B median | B/A median |")
    print("|---|---|---|---|---|---|---|")
    best, middle = [], []
    for name in CALLS:
        a = [r[name] for r in results["a"]]
        b = [r[name] for r in results["b"]]
        best.append(min(b) / min(a))
        middle.append(statistics.median(b) / statistics.median(a))
        print(f"| {name} | {min(a):.2f} | {min(b):.2f} | {best[-1]:.2f} | "
              f"{statistics.median(a):.2f} | {statistics.median(b):.2f} | {middle[-1]:.2f} |")
    print(f"\ngeomean B/A: best {statistics.geometric_mean(best):.3f}, "
          f"median {statistics.geometric_mean(middle):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
