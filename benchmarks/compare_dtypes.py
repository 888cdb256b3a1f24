"""gpu_tc.einsum against numpy.einsum(optimize=True) on bool, integer and float16 data,
side by side in one process (CPU backend).

numpy computes these dtypes with its own loops (no BLAS has them), and so do gpu_tc's
CPU plans (numpy.matmul and ufunc reductions on views); this measures what that costs
against numpy's own einsum at two sizes per case. Per case: median seconds per call
over rounds (each round times both, alternating), the spread (min-max of per-round
ratios), and the peak of NumPy memory allocated during one call (tracemalloc: NumPy
reports its array buffers to it), after checking both give the same values.

    python benchmarks/compare_dtypes.py --rounds 5 > benchmarks/results/cpu-dtypes.md
"""

from __future__ import annotations

import argparse
import statistics
import timeit
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

import gpu_tc
from gpu_tc.bench.environment import host

# name -> (subscripts, shapes at size n)
CASES: dict[str, tuple[str, Callable[[int], list[tuple[int, ...]]]]] = {
    "gemm ij,jk->ik": ("ij,jk->ik", lambda n: [(n, n), (n, n)]),
    "batched bij,bjk->bik": ("bij,bjk->bik", lambda n: [(8, n // 2, n // 2)] * 2),
    "abcd,dbea->ec": ("abcd,dbea->ec", lambda n: [(n // 8,) * 4] * 2),
    "sum ij->i": ("ij->i", lambda n: [(4 * n, 4 * n)]),
    "trace ii->": ("ii->", lambda n: [(4 * n, 4 * n)]),
}
DTYPES = ["int64", "int32", "int8", "bool", "float16", "float32"]
SIZES = [64, 256]


def _operands(shapes: list[tuple[int, ...]], dtype: str, rng: np.random.Generator) -> list[Any]:
    return [rng.integers(0, 3, size=s).astype(dtype) for s in shapes]


def _seconds(call: Callable[[], Any]) -> float:
    call()
    number, elapsed = 1, 0.0
    while elapsed < 0.05:
        elapsed = timeit.timeit(call, number=number)
        number *= 2
    return min(timeit.repeat(call, number=max(1, number // 2), repeat=3)) / max(1, number // 2)


def _peak_bytes(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    result = call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    facts = host()
    print("# gpu_tc.einsum vs numpy.einsum(optimize=True): bool, integer and float16 data\n")
    print(f"Host: {facts['cpu']}, {facts['cpu_count']} cores; NumPy {facts['numpy']}, "
          f"BLAS {facts['blas']}. Made by `python benchmarks/compare_dtypes.py "
          f"--rounds {args.rounds}`.\n")
    print("| case | n | dtype | gpu_tc ms | numpy ms | numpy/gpu_tc (min-max) | "
          "gpu_tc peak MiB | numpy peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (subscripts, shapes_at) in CASES.items():
        for n in SIZES:
            for dtype in DTYPES:
                operands = _operands(shapes_at(n), dtype, rng)

                def ours(operands: list[Any] = operands, subscripts: str = subscripts) -> Any:
                    return gpu_tc.einsum(subscripts, *operands)

                def theirs(operands: list[Any] = operands, subscripts: str = subscripts) -> Any:
                    return np.einsum(subscripts, *operands, optimize=True)

                got, expected = ours(), theirs()
                if dtype == "float16":
                    np.testing.assert_allclose(np.float64(got), np.float64(expected), rtol=1e-2)
                else:
                    np.testing.assert_array_equal(got, expected)
                ratios, mine, numpy_times = [], [], []
                for _ in range(args.rounds):
                    t_ours, t_theirs = _seconds(ours), _seconds(theirs)
                    mine.append(t_ours)
                    numpy_times.append(t_theirs)
                    ratios.append(t_theirs / t_ours)
                print(f"| {name} | {n} | {dtype} | {statistics.median(mine) * 1e3:.3f} | "
                      f"{statistics.median(numpy_times) * 1e3:.3f} | "
                      f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
                      f"{_peak_bytes(ours) / 2**20:.2f} | {_peak_bytes(theirs) / 2**20:.2f} |")


if __name__ == "__main__":
    main()
