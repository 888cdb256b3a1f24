"""gpu_tc's own CUDA kernel for a float sum over strided axes: traces, partial traces,
the diagonals of a batch, any SUM of A's view into D.

One block per element of D (the grid strides over D when it has more): the block's
threads share the summed elements, each thread adding every blockDim-th one, then add
their sums in shared memory as a tree; thread 0 writes ``alpha * sum + beta * C``. The
layout travels as one small int64 array made at plan time (extents and strides of D's
labels in A and in D, then of the summed labels in A), so a call is one launch with
plain arguments (cupy.RawKernel: arrays as pointers, NumPy scalars by value), where
CuPy's reduction kernel spends tens of microseconds of host time per call (visit 5 on
an H200: 43-47 us for a trace). It competes with cuTENSOR and CuPy's kernel on the
first calls (gpu_tc.cuda.timed_plan); the sums' order is its own (a tree over the
threads), within float rounding of NumPy's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.options import ReduceOp, UnaryOp
from gpu_tc.problem import ReductionProblem

from .operands import check_device, new_result_call
from .raw_kernels import built

# Threads of a block: the least power of two, at least a warp, that gives each thread
# one summed element, at most MAX_THREADS (the shared array's length).
MAX_THREADS = 256
# Blocks of a launch (more elements of D: each block takes every MAX_BLOCKS-th).
MAX_BLOCKS = 65535
# The most elements one block sums: a longer sum (a 4096^2 matrix into one number) wants
# many blocks per element of D, as cuTENSOR's and CUB's reductions have.
MAX_SUMMED = 1 << 16

SOURCE = r"""
#define GPU_TC_STRIDED_SUM(T, NAME)                                                    \
extern "C" __global__ void NAME(const T *__restrict__ a, T *d, const T *c,             \
                                const long long *__restrict__ meta, int kept,          \
                                int summed, long long n_out, long long n_summed,       \
                                T alpha, T beta)                                       \
{                                                                                      \
    __shared__ T partial[MAX_THREADS];                                                 \
    const long long *kept_extent = meta, *kept_a = meta + kept;                        \
    const long long *kept_d = meta + 2 * kept, *summed_extent = meta + 3 * kept;       \
    const long long *summed_a = summed_extent + summed;                                \
    for (long long out = blockIdx.x; out < n_out; out += gridDim.x) {                  \
        long long rest = out, a_base = 0, d_at = 0;                                    \
        for (int i = kept - 1; i >= 0; i--) {                                          \
            const long long index = rest % kept_extent[i];                             \
            rest /= kept_extent[i];                                                    \
            a_base += index * kept_a[i];                                               \
            d_at += index * kept_d[i];                                                 \
        }                                                                              \
        T sum = 0;                                                                     \
        for (long long r = threadIdx.x; r < n_summed; r += blockDim.x) {               \
            long long left = r, at = a_base;                                           \
            for (int i = summed - 1; i >= 0; i--) {                                    \
                at += (left % summed_extent[i]) * summed_a[i];                         \
                left /= summed_extent[i];                                              \
            }                                                                          \
            sum += a[at];                                                              \
        }                                                                              \
        partial[threadIdx.x] = sum;                                                    \
        __syncthreads();                                                               \
        for (unsigned int width = blockDim.x / 2; width > 0; width /= 2) {             \
            if (threadIdx.x < width)                                                   \
                partial[threadIdx.x] += partial[threadIdx.x + width];                  \
            __syncthreads();                                                           \
        }                                                                              \
        if (threadIdx.x == 0) {                                                        \
            T value = alpha * partial[0];                                              \
            if (beta != (T)0)                                                          \
                value += beta * c[d_at];                                               \
            d[d_at] = value;                                                           \
        }                                                                              \
        __syncthreads(); /* partial[] is the next element's */                         \
    }                                                                                  \
}
GPU_TC_STRIDED_SUM(float, gpu_tc_strided_sum_f4)
GPU_TC_STRIDED_SUM(double, gpu_tc_strided_sum_f8)
""".replace("MAX_THREADS", str(MAX_THREADS))
KERNELS = {"f": "gpu_tc_strided_sum_f4", "d": "gpu_tc_strided_sum_f8"}
_SCALAR = {"f": np.float32, "d": np.float64}


def applies(problem: ReductionProblem) -> bool:
    """Whether the kernel computes ``problem``: a SUM of A as it is, in A's float type,
    over at least one label and at most MAX_SUMMED elements per element of D."""
    a = problem.a
    return (problem.op_reduce is ReduceOp.SUM and problem.op_a is UnaryOp.IDENTITY
            and problem.d.dtype == a.dtype and a.dtype in KERNELS and bool(problem.reduced)
            and math.prod(a.extent(x) for x in problem.reduced) <= MAX_SUMMED)


def layout_table(problem: ReductionProblem) -> np.ndarray:
    """The kernel's ``meta``: D's extents, their strides in A, their strides in D, then
    the summed labels' extents and strides in A (int64, in elements)."""
    a, d, summed = problem.a, problem.d, problem.reduced
    return np.array([*d.extents, *(a.stride(x) for x in d.labels), *d.strides,
                     *(a.extent(x) for x in summed), *(a.stride(x) for x in summed)],
                    dtype=np.int64)


def launch_shape(problem: ReductionProblem) -> tuple[int, int, int, int]:
    """(blocks, threads per block, elements of D, elements summed into each)."""
    n_out = math.prod(problem.d.extents)
    n_summed = math.prod(problem.a.extent(x) for x in problem.reduced)
    threads = min(MAX_THREADS, max(32, 1 << (n_summed - 1).bit_length()))
    return min(n_out, MAX_BLOCKS), threads, n_out, n_summed


class StridedSumPlan(PlanDefaults):
    """D = alpha * sum(A) + beta * C over the labels of A missing from D, by gpu_tc's
    strided-sum kernel (see the module), built when the plan is made.

    Raises:
        BackendError: the kernel could not be built (:func:`.raw_kernels.built`).
    """

    route = "kernel"

    def __init__(self, problem: ReductionProblem, device: int) -> None:
        a, d = problem.a, problem.d
        self.problem = problem
        self.device = device
        self.context = f"reduction {a.labels}->{d.labels}"
        self._scalar = _SCALAR[a.dtype]
        blocks, threads, n_out, n_summed = launch_shape(problem)
        with cupy.cuda.Device(device):
            self._kernel = built(SOURCE, KERNELS[a.dtype])
            self._meta = cupy.asarray(layout_table(problem))
        self.reason = (
            f"gpu_tc's strided-sum kernel ({n_out} element(s) of D, each a block of "
            f"{threads} threads summing {n_summed}), timed against cuTENSOR"
        )
        self.fresh = new_result_call(self, d)
        # What every launch passes alike, made once (a warm trace is tens of microseconds).
        self._grid, self._block = (blocks,), (threads,)
        self._shape = (np.int32(len(d.labels)), np.int32(len(problem.reduced)),
                       np.int64(n_out), np.int64(n_summed))
        self._unscaled = (self._scalar(1), self._scalar(0))

    def __repr__(self) -> str:
        return f"StridedSumPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write the sum into ``d``; ``c`` (D's layout, may be ``d``) is read when
        beta != 0."""
        a = inputs[0]
        check_device(self.device, (a, c, d), self.context)
        read_c = scalars.beta != 0 and c is not None
        if read_c and c is not d and c.strides != d.strides:
            cupy.copyto(d, c)  # the kernel reads C where it writes D
            c = d
        alpha, beta = scalars.alpha, scalars.beta if read_c else 0
        if alpha == 1 and beta == 0:
            factors = self._unscaled
        else:
            t = self._scalar
            factors = (t(complex(alpha).real), t(complex(beta).real))
        self._kernel(self._grid, self._block,
                     (a, d, c if read_c else d, self._meta, *self._shape, *factors))
