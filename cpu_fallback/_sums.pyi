"""Types of the compiled strided sums (built from cpu_fallback/sums.c). The buffers are
any objects with the buffer protocol; cpu_fallback.sum_kernel passes NumPy arrays."""

import numpy as np

def strided(
    src: np.ndarray, dst: np.ndarray, src_type: str, dst_type: str, kind: int,
    kept_src: np.ndarray, kept_dst: np.ndarray, summed_src: np.ndarray, n: int, ss: int,
    ds: int, threads: int, split: bool = False, step: int = 0,
) -> None: ...
def max_threads() -> int: ...
