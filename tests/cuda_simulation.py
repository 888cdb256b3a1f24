"""The strided-sum CUDA source (gpu_tc/cuda/strided_sum.py) run on the CPU: every thread
of a block an OS thread, ``__syncthreads()`` a barrier, blocks one after another. The
same source text as NVRTC compiles, so its index math and its tree of partial sums can
be checked against NumPy without a GPU (tests/test_cuda_sources.py), and, on the
emulated device, with the very arguments StridedSumPlan passes
(tests/test_gpu_timed_routes.py)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_SIMULATION = r"""
#include <pthread.h>
#include <vector>
struct gpu_tc_dim { unsigned int x; };
static thread_local gpu_tc_dim threadIdx, blockIdx;
static gpu_tc_dim blockDim, gridDim;
static pthread_barrier_t gpu_tc_barrier;
#define __global__
#define __shared__ static
#define __restrict__ __restrict
static inline void __syncthreads() { pthread_barrier_wait(&gpu_tc_barrier); }
SOURCE
template <typename T> struct Launch {
    void (*kernel)(const T *, T *, const T *, const long long *, int, int, long long,
                   long long, T, T);
    const T *a; T *d; const T *c; const long long *meta;
    int kept, summed; long long n_out, n_summed; T alpha, beta;
    unsigned int block, thread;
};
template <typename T> static void *run_thread(void *p) {
    Launch<T> *l = (Launch<T> *)p;
    blockIdx.x = l->block;
    threadIdx.x = l->thread;
    l->kernel(l->a, l->d, l->c, l->meta, l->kept, l->summed, l->n_out, l->n_summed,
              l->alpha, l->beta);
    return nullptr;
}
template <typename T> static int launch(Launch<T> base, unsigned int grid, unsigned int block) {
    blockDim.x = block;
    gridDim.x = grid;
    pthread_barrier_init(&gpu_tc_barrier, nullptr, block);
    for (unsigned int b = 0; b < grid; b++) {
        std::vector<Launch<T>> each(block, base);
        std::vector<pthread_t> threads(block);
        for (unsigned int t = 0; t < block; t++) {
            each[t].block = b;
            each[t].thread = t;
            if (pthread_create(&threads[t], nullptr, run_thread<T>, &each[t]))
                return 1;
        }
        for (unsigned int t = 0; t < block; t++)
            pthread_join(threads[t], nullptr);
    }
    pthread_barrier_destroy(&gpu_tc_barrier);
    return 0;
}
#define GPU_TC_ENTRY(T, NAME)                                                          \
extern "C" int run_##NAME(unsigned int grid, unsigned int block, const T *a, T *d,     \
                          const T *c, const long long *meta, int kept, int summed,     \
                          long long n_out, long long n_summed, T alpha, T beta) {      \
    Launch<T> l = {NAME, a, d, c, meta, kept, summed, n_out, n_summed, alpha, beta,    \
                   0, 0};                                                              \
    return launch<T>(l, grid, block);                                                  \
}
GPU_TC_ENTRY(float, gpu_tc_strided_sum_f4)
GPU_TC_ENTRY(double, gpu_tc_strided_sum_f8)
"""




def build(folder: Path) -> Any:
    """The simulation as a loaded library (``run_<kernel>(grid, block, <the kernel's
    parameters>)``, 0 on success); skips the test without a C++ compiler."""
    from gpu_tc.cuda import strided_sum

    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the CPU simulation of the CUDA source")
    source = folder / "simulation.cpp"
    source.write_text(_SIMULATION.replace("SOURCE", strided_sum.SOURCE))
    library = folder / "simulation.so"
    subprocess.run([compiler, "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread",
                    str(source), "-o", str(library)], check=True, capture_output=True)
    return ctypes.CDLL(str(library))


_C_TYPES = {np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float32: ctypes.c_float,
            np.float64: ctypes.c_double}


def launcher(library: Any, name: str) -> Any:
    """A stand-in for ``cupy.RawKernel(SOURCE, name)`` on the emulated device, whose
    arrays lie in host memory: each launch runs the simulation with the launch's own
    arguments (arrays as their data pointers, NumPy scalars by value), in order."""

    class Simulated:
        def __init__(self, code: str, kernel: str) -> None:
            assert kernel == name

        def compile(self) -> None:
            pass

        def __call__(self, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
            converted = [ctypes.c_void_p(x.data.ptr) if hasattr(x, "data") and
                         hasattr(x.data, "ptr") else _C_TYPES[type(x)](x) for x in args]
            run = getattr(library, "run_" + name)
            assert run(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), *converted) == 0

    return Simulated
