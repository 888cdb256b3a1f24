"""Types of the compiled copy kernel (built from cpu_fallback/tile_copy.c). The buffers
are any objects with the buffer protocol; cpu_fallback.tiles passes NumPy arrays."""

import numpy as np

def copy(
    src: np.ndarray, dst: np.ndarray, word: int, outer: np.ndarray, row_src: np.ndarray,
    col_dst: np.ndarray, src_off: int, nr: int, dr: int, nc: int, sc: int, ev: int, sv: int,
    dv: int, tr: int, tc: int, chunks: int, threads: int, stream: bool = False,
) -> None: ...

streams: int
def max_threads() -> int: ...
def isa() -> str: ...
