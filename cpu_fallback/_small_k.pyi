"""Types of the compiled small-K GEMM (built from cpu_fallback/small_k.c). The buffers are
any objects with the buffer protocol; cpu_fallback.small_k passes NumPy arrays."""

import numpy as np

def gemm(
    a: np.ndarray, b: np.ndarray, d: np.ndarray, type: str, m: int, n: int, k: int,
    a0: int, a_row: int, a_col: int, b0: int, b_row: int, b_col: int, d0: int,
    d_row: int, alpha: float, threads: int,
) -> None: ...
def gathered(
    a: np.ndarray, b: np.ndarray, d: np.ndarray, type: str, m: int, n: int, k: int,
    batches: int, offsets: np.ndarray, alpha: float, threads: int,
) -> None: ...
def isa() -> str: ...
def narrower() -> tuple[str, ...]: ...
def max_threads() -> int: ...
