"""Types of the compiled pairwise sums (built from cpu_fallback/pairwise.c). src and dst
are any objects exporting strided buffers (cpu_fallback.pairwise_kernel passes NumPy
arrays as they are), the tables any objects with the buffer protocol."""

import numpy as np

def pairwise(
    src: np.ndarray, dst: np.ndarray, type: str, row_src: np.ndarray, row_dst: np.ndarray,
    offsets: np.ndarray, lengths: np.ndarray, adds: np.ndarray, entries: np.ndarray,
    chunks: int, threads: int, step: int, src_base: int, dst_base: int, ahead: bool,
) -> None: ...
def max_threads() -> int: ...
def isa() -> str: ...
