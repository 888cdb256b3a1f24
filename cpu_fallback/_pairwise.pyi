"""Types of the compiled pairwise sums (built from cpu_fallback/pairwise.c). The buffers
are any objects with the buffer protocol; cpu_fallback.pairwise_kernel passes NumPy
arrays."""

import numpy as np

def pairwise(
    src: np.ndarray, dst: np.ndarray, type: str, row_src: np.ndarray, row_dst: np.ndarray,
    offsets: np.ndarray, lengths: np.ndarray, adds: np.ndarray, entries: np.ndarray,
    chunks: int, threads: int, step: int = 1,
) -> None: ...
def max_threads() -> int: ...
def isa() -> str: ...
