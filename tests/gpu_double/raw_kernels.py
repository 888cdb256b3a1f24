"""``cupy.RawKernel`` of the emulation, for the kernels gpu_tc defines (gpu_tc/cuda):
each launch checks its arguments as the kernel's parameter list takes them (CuPy passes
an ndarray as its data pointer, a NumPy scalar by value) and does what the kernel's
source says, with NumPy on the emulated memory, reading and writing only where the
kernel would (an address outside every live allocation is an IllegalAddress). Any other
kernel is refused. ``RAW_LAUNCHES`` notes each launch's kernel name.

NVRTC is not run here; tests/test_cuda_sources.py compiles the same sources.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import memory, runtime
from .array import ndarray

RAW_LAUNCHES: list[str] = []


def _hold(args: tuple[Any, ...]) -> None:
    """gpu_tc_hold(unsigned long long ns): spins on the device for ``ns`` once the work
    before it is done, so events recorded behind it complete ``ns`` later."""
    (ns,) = args
    if type(ns) is not np.uint64:
        raise TypeError("gpu_tc_hold: its one argument is an unsigned long long")
    runtime.hold(int(ns) * 1e-9)


def _strided_sum(dtype: type) -> Callable[[tuple[Any, ...]], None]:
    """gpu_tc_strided_sum_f4/_f8(a, d, c, meta, kept, summed, n_out, n_summed, alpha,
    beta): D (kept extents, strides kept_d) = alpha * the sum of A (kept then summed
    extents, strides kept_a then summed_a, from a) over its summed axes, + beta * C
    (D's layout, from c) where beta != 0; meta as gpu_tc.cuda.strided_sum lays it out."""

    def launch(args: tuple[Any, ...]) -> None:
        a, d, c, meta, kept, summed, n_out, n_summed, alpha, beta = args
        if not all(isinstance(x, ndarray) for x in (a, d, c, meta)):
            raise TypeError("strided sum: a, d, c and meta are device arrays (pointers)")
        types = [type(x) for x in (kept, summed, n_out, n_summed, alpha, beta)]
        if types != [np.int32, np.int32, np.int64, np.int64, dtype, dtype]:
            raise TypeError(f"strided sum: scalar arguments of types {types}")
        if meta.dtype != np.int64 or a.dtype != dtype or d.dtype != dtype or c.dtype != dtype:
            raise TypeError("strided sum: meta is int64, a, d and c the kernel's type")
        table = meta.get().tolist()
        k, s = int(kept), int(summed)
        if len(table) < 3 * k + 2 * s:
            raise memory.IllegalAddress("strided sum: meta is shorter than its counts say")
        kept_extent, kept_a, kept_d = table[:k], table[k:2 * k], table[2 * k:3 * k]
        summed_extent, summed_a = table[3 * k:3 * k + s], table[3 * k + s:3 * k + 2 * s]
        if int(n_out) != int(np.prod(kept_extent)) or int(n_summed) != int(np.prod(summed_extent)):
            raise ValueError("strided sum: n_out and n_summed are not the extents' products")
        device = runtime.current_device()
        item = np.dtype(dtype).itemsize
        source = memory.view(memory.Region(a.data.ptr, item, tuple(kept_extent + summed_extent),
                                           tuple(kept_a + summed_a)), np.dtype(dtype), device,
                             "strided sum: A")
        total = source.sum(axis=tuple(range(k, k + s)), dtype=dtype)
        value = dtype(alpha) * total
        if beta != 0:
            addend = memory.view(memory.Region(c.data.ptr, item, tuple(kept_extent),
                                               tuple(kept_d)), np.dtype(dtype), device,
                                 "strided sum: C")
            value = value + dtype(beta) * addend
        target = memory.view(memory.Region(d.data.ptr, item, tuple(kept_extent), tuple(kept_d)),
                             np.dtype(dtype), device, "strided sum: D")
        target[...] = value

    return launch


_KERNELS: dict[str, tuple[str, Callable[[tuple[Any, ...]], None]]] = {
    "gpu_tc_hold": ("%globaltimer", _hold),
    "gpu_tc_strided_sum_f4": ("GPU_TC_STRIDED_SUM(float, gpu_tc_strided_sum_f4)",
                              _strided_sum(np.float32)),
    "gpu_tc_strided_sum_f8": ("GPU_TC_STRIDED_SUM(double, gpu_tc_strided_sum_f8)",
                              _strided_sum(np.float64)),
}


class RawKernel:
    """``cupy.RawKernel`` (CuPy 14's signature) for the kernels above; as CuPy's, the
    grid and block are tuples, a block at most 1024 threads."""

    def __init__(self, code: str, name: str, options: tuple[str, ...] = (),
                 backend: str = "nvrtc", *, translate_cucomplex: bool = False,
                 enable_cooperative_groups: bool = False, jitify: bool | None = None) -> None:
        known = _KERNELS.get(name)
        if known is None or known[0] not in code:
            raise NotImplementedError(f"the emulation runs no raw kernel {name!r}")
        self.code, self.name, self._launch = code, name, known[1]

    def compile(self, log_stream: Any = None) -> None:
        """Nothing to build: the emulation runs no device code."""

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
                 *, shared_mem: int = 0) -> None:
        if type(grid) is not tuple or type(block) is not tuple:
            raise TypeError(f"{self.name}: grid and block must be tuples")
        if int(np.prod(block)) > 1024 or min(grid + block) < 1:
            raise ValueError(f"{self.name}: a launch of grid {grid}, block {block}")
        self._launch(args)
        RAW_LAUNCHES.append(self.name)
