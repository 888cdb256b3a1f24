"""Types of the compiled sum kernels (built from cpu_fallback/sums.c). The buffers are any
objects with the buffer protocol; cpu_fallback.sum_kernel and pairwise_kernel pass NumPy
arrays."""

import numpy as np

def strided(
    src: np.ndarray, dst: np.ndarray, src_type: str, dst_type: str, kind: int,
    kept_src: np.ndarray, kept_dst: np.ndarray, summed_src: np.ndarray, n: int, ss: int,
    ds: int, threads: int, split: bool = False,
) -> None: ...
def pairwise(
    src: np.ndarray, dst: np.ndarray, type: str, row_src: np.ndarray, row_dst: np.ndarray,
    offsets: np.ndarray, lengths: np.ndarray, adds: np.ndarray, entries: np.ndarray,
    chunks: int, threads: int, step: int = 1,
) -> None: ...
def max_threads() -> int: ...
