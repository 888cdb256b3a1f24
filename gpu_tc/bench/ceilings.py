"""Ceilings measured in the same run as the cases: GEMM FLOP/s and copy bandwidth."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .suites import Case
from .timing import measure


@dataclass(frozen=True)
class Ceiling:
    """A reference rate.

    Attributes:
        name: What was measured, e.g. "GEMM 2048^3 float64 (numpy.matmul)".
        value: Its rate in the suite's metric (GFLOP/s or GB/s).
    """

    name: str
    value: float


def gemm_extent(backend: str, quick: bool) -> int:
    """The square GEMM's extent: long enough to reach the BLAS's steady rate."""
    if backend == "gpu":
        return 1024 if quick else 8192
    return 1024 if quick else 2048


def gemm(dtype: str, xp: Any, sync: Callable[[], None], n: int, repeat: int) -> Ceiling:
    """GFLOP/s of ``xp.matmul`` on n x n matrices of ``dtype`` (complex: 8 real ops/FMA)."""
    rng = np.random.default_rng(0)
    a, b = (xp.asarray(rng.uniform(-1, 1, (n, n)).astype(dtype)) for _ in range(2))
    out = xp.empty((n, n), dtype)
    timing = measure(
        lambda: xp.matmul(a, b, out=out), repeat=repeat, min_run_time=0.05, sync=sync
    )
    flops = 2.0 * n**3 * (4 if np.dtype(dtype).kind == "c" else 1)
    return Ceiling(f"GEMM {n}^3 {dtype} ({xp.__name__}.matmul)", flops / timing.median / 1e9)


def copy(case: Case, xp: Any, sync: Callable[[], None], repeat: int) -> float:
    """GB/s of a contiguous copy that reads and writes ``case.work`` bytes in all."""
    itemsize = np.dtype(case.dtype).itemsize
    elements = max(1, int(case.work // (2 * itemsize)))
    source = xp.ones(elements, case.dtype)
    target = xp.empty_like(source)
    timing = measure(
        lambda: xp.copyto(target, source), repeat=repeat, min_run_time=0.01, sync=sync
    )
    return case.work / timing.median / 1e9
