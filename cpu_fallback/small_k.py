"""The GEMM of a small inner extent (cpu_fallback._small_k, built from small_k.c):
``D = alpha * A @ B`` made for a small K, each tile of D written once from registers;
:func:`gemm` on strided matrices, :func:`gathered` on operands of any layout, every
element found by offset tables (cpu_fallback.gathered).

A plan offers it beside the BLAS GEMM of the same lowering (cpu_fallback.contraction)
and the faster is kept by measurement; imported through cpu_fallback.kernels by the
first such plan. Importing it loads OpenMP's library (cpu_fallback.openmp).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import openmp

with openmp.spin_environment():
    import cpu_fallback._small_k as _small_k

from .raw_memory import flat, memory_extent

# With a few terms per element of D the kernel writes D once where BLAS writes it twice;
# with a hundred or more it still keeps pace with BLAS (2 AVX-512 threads, dense
# 23088 x 156 x 148 and 4096 x 512 x 100, two runs: 125-133 and 161-168 GFLOP/s in
# float64 against OpenBLAS's 78-88 and 129 and MKL's 135-146 and 157-160; 289-308 and
# 323-329 in float32 against 261-270 and 285-299, and 279-288 and 334-344) and reads the
# operands where they lie, where BLAS needs them packed. A larger K is summed in blocks
# of at most 512 terms (small_k.c's K_BLOCK), so any K is served: plans measure it
# against BLAS and keep the faster.
_TYPES = {np.dtype(np.float32): "f4", np.dtype(np.float64): "f8"}


def serves(dtype: Any, k: int) -> bool:
    """Whether the kernel computes products of ``dtype`` over an inner extent ``k``."""
    return np.dtype(dtype) in _TYPES and k >= 1


def max_threads() -> int:
    """OpenMP's thread count: the threads a product runs on, each with its own panel."""
    return int(_small_k.max_threads())


def isa() -> str:
    """The build of the kernel's loops this CPU runs ('avx512f', 'avx2', 'baseline')."""
    return str(_small_k.isa())


def narrower_builds() -> tuple[str, ...]:
    """The builds :func:`gemm` may name besides the widest (('avx2',) on an AVX-512 CPU):
    which is faster depends on the CPU and the shape, so plans time them (a Zen 4 runs
    AVX-512 as two AVX2 halves, and the AVX2 build's smaller tiles waste fewer lanes)."""
    return tuple(_small_k.narrower())


def gemm(a: np.ndarray, b: np.ndarray, d: np.ndarray, alpha: complex,
         build: str | None = None) -> bool:
    """``d = alpha * a @ b`` for 2-D arrays of one dtype the kernel serves, by the
    widest build of its loops, or the one of :func:`narrower_builds` that ``build`` names.

    Returns:
        False (nothing written) where ``d`` has no unit stride, the dtypes differ or are
        not served, or ``alpha`` is complex; True when ``d`` holds the product. Shares
        the work among OpenMP's threads (one launch at a time; on the calling thread in
        a forked child) and releases the GIL while it runs.
    """
    if d.dtype not in _TYPES or not a.dtype == b.dtype == d.dtype or np.imag(alpha) != 0:
        return False
    name = _kernel_type(d.dtype, build)
    if not serves(d.dtype, a.shape[1]):
        return False
    if d.shape[1] > 1 and d.strides[1] != d.itemsize:
        if d.shape[0] > 1 and d.strides[0] != d.itemsize:
            return False
        a, b, d = b.T, a.T, d.T  # D^T = B^T A^T: D's columns then have the unit stride
    if d.size == 0:
        return True
    (a_row, a_col), (b_row, b_col), (d_row, _) = _elements(a), _elements(b), _elements(d)
    (a_mem, a0), (b_mem, b0), (d_mem, d0) = _memory(a), _memory(b), _memory(d, writeable=True)
    scale = float(np.real(alpha))
    threads = 0 if openmp.forked() else int(_small_k.max_threads())
    with openmp.LOCK:
        _small_k.gemm(a_mem, b_mem, d_mem, name, d.shape[0], d.shape[1], a.shape[1],
                      a0, a_row, a_col, b0, b_row, b_col, d0, d_row, scale, threads)
    return True


def gathered(
    a: np.ndarray, b: np.ndarray, d: np.ndarray, counts: tuple[int, int, int, int],
    offsets: np.ndarray, alpha: float, build: str | None = None,
) -> None:
    """For each batch t, ``D[i, j] = alpha * sum_p A[i, p] * B[p, j]``, every element
    found by the offset tables (see ``_small_k.gathered``): operands of any layout,
    read and written where they lie, by the widest build or the one ``build`` names
    (as :func:`gemm`'s).

    Args:
        a, b, d: The operands (one served dtype; ``d`` writable), any strides.
        counts: (m, n, k, batches).
        offsets: int64 offsets in elements, the batch offsets from each operand's
            lowest address: a_rows and d_rows (m each), b_cols and d_cols (n each), a_k
            and b_k (k each), then a_batch, b_batch, d_batch (batches each).
        alpha: A real scale.
    """
    a_mem, b_mem, d_mem = _memory(a)[0], _memory(b)[0], _memory(d, writeable=True)[0]
    name = _kernel_type(d.dtype, build)
    m, n, k, batches = counts
    threads = 0 if openmp.forked() else int(_small_k.max_threads())
    with openmp.LOCK:
        _small_k.gathered(a_mem, b_mem, d_mem, name, m, n, k, batches, offsets,
                          alpha, threads)


def _kernel_type(dtype: np.dtype, build: str | None) -> str:
    """The kernel's type for ``dtype`` ('f4', 'f8'), ':avx2' added where ``build`` names
    that narrower build."""
    return _TYPES[dtype] + (f":{build}" if build else "")


def _elements(x: np.ndarray) -> tuple[int, int]:
    """The strides of a 2-D array in elements."""
    return x.strides[0] // x.itemsize, x.strides[1] // x.itemsize


def _memory(x: np.ndarray, writeable: bool = False) -> tuple[np.ndarray, int]:
    """The memory under ``x`` as a flat array of its dtype from its lowest address, and
    the offset of its element 0 in it."""
    if x.flags.c_contiguous or x.flags.f_contiguous:  # element 0 lies lowest
        return x.ravel(order="K"), 0  # a view, in ~1 us (memory_extent and flat: 9)
    base, span = memory_extent(x.shape, tuple(s // x.itemsize for s in x.strides))
    if base == 0 and span == x.size:  # dense in another axis order: a view as well
        dense = x.ravel(order="K")
        if dense.base is not None:  # a view (a copy has no base)
            return dense, 0
    return flat(x, x.dtype.str, base, span, writeable=writeable), base
