"""The cuBLAS route: a GEMM-like contraction as one (strided-batched) GEMM, reading
its operands in place or, staged, after copying A and/or B into GEMM order.

Runs on CuPy's cuBLAS handle; CuPy's bindings put the handle on the current stream
before each call. Row-major tensors map onto column-major cuBLAS as
:func:`gpu_tc.cuda.gemm_route.cublas_gemm` decided (D = A B, or D^T = B^T A^T).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import cupy
from cupy_backends.cuda.libs import cublas as _cublas

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.errors import BackendError
from gpu_tc.memory import nbytes
from gpu_tc.problem import ContractionProblem, TensorSpec
from gpu_tc.run import dense_allocation

from .gemm_route import CublasGemm, StagedGemm
from .operands import HostScalars, check_device, new_result_call

_PREFIX = {"f": "s", "d": "d", "F": "c", "D": "z"}


def _status_name(err: Exception) -> str:
    found = re.search(r"CUBLAS_STATUS_[A-Z_]+", str(err))
    return found.group(0) if found else "CUBLAS_STATUS_UNKNOWN"


class CublasContractionPlan(PlanDefaults):
    """D = alpha * A * B + beta * C as one cuBLAS gemm / gemmStridedBatched.

    Args:
        problem: The (canonical) contraction.
        gemm: Its cuBLAS mapping.
        reason: Why this route (recorded on the plan).
        device: The CUDA device the plan runs on.
    """

    route = "cublas"

    def __init__(
        self, problem: ContractionProblem, gemm: CublasGemm, reason: str, device: int
    ) -> None:
        self.problem = problem
        self.gemm = gemm
        self.reason = reason
        self.device = device
        self.context = f"contraction {problem.a.labels},{problem.b.labels}->{problem.d.labels}"
        self._function = getattr(_cublas, _PREFIX[problem.d.dtype] + gemm.call)
        self._scalars = HostScalars(problem.d.dtype)
        self.fresh = new_result_call(self, problem.d)

    def __repr__(self) -> str:
        return f"CublasContractionPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write the result into ``d``; ``c`` (D's shape) is read when beta != 0."""
        a, b = inputs
        alpha, beta = scalars.alpha, scalars.beta
        check_device(self.device, (a, b, c, d), self.context)
        g = self.gemm
        read_c = beta != 0 and c is not None
        if read_c and c is not d:
            cupy.copyto(d, c)  # cuBLAS updates its output in place
        first, second = (b, a) if g.swap else (a, b)
        scale, shift = self._scalars(alpha), self._scalars(beta if read_c else 0)
        args: tuple[Any, ...]
        if g.batch > 1:
            args = (
                g.transa, g.transb, g.m, g.n, g.k,
                scale[1], first.data.ptr, g.lda, g.stride_a,
                second.data.ptr, g.ldb, g.stride_b,
                shift[1], d.data.ptr, g.ldc, g.stride_c, g.batch,
            )
        else:
            args = (
                g.transa, g.transb, g.m, g.n, g.k,
                scale[1], first.data.ptr, g.lda, second.data.ptr, g.ldb,
                shift[1], d.data.ptr, g.ldc,
            )
        handle = cupy.cuda.device.get_cublas_handle()
        mode = _cublas.getPointerMode(handle)
        if mode != _cublas.CUBLAS_POINTER_MODE_HOST:
            _cublas.setPointerMode(handle, _cublas.CUBLAS_POINTER_MODE_HOST)
        try:
            self._function(handle, *args)
        except _cublas.CUBLASError as err:
            status = _status_name(err)
            raise BackendError(
                f"cuBLAS {_PREFIX[self.problem.d.dtype]}{g.call} failed with {status} for the "
                f"{self.context}",
                status=status,
            ) from err
        finally:
            if mode != _cublas.CUBLAS_POINTER_MODE_HOST:
                _cublas.setPointerMode(handle, mode)


class StagedCublasPlan(PlanDefaults):
    """D = alpha * A * B + beta * C as one cuBLAS GEMM after copying A and/or B into
    the layout that makes it a matrix (:func:`gpu_tc.cuda.gemm_route.staged_gemm`).

    Args:
        staged: The mapping.
        copies: The permutation plan of each operand into its staged layout (None:
            read in place).
        device: The CUDA device the plan runs on.
    """

    route = "cublas"

    def __init__(self, staged: StagedGemm, copies: tuple[Any, Any], device: int) -> None:
        self.reason = f"cuBLAS on staged operands: {staged.reason}"
        self._gemm = CublasContractionPlan(staged.problem, staged.gemm, self.reason, device)
        self._copies = copies
        self._specs = (staged.problem.a, staged.problem.b)
        copied = [spec for spec, copy in zip(self._specs, copies) if copy is not None]
        self.temporary_bytes = sum(nbytes(spec) for spec in copied) + max(
            (copy.temporary_bytes for copy in copies if copy is not None), default=0)

    def __repr__(self) -> str:
        return f"StagedCublasPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Copy the staged operands (on the current stream), then the GEMM into ``d``."""
        operands = []
        for x, copy, spec in zip(inputs, self._copies, self._specs):
            if copy is None:
                operands.append(x)
                continue
            staged = _dense(spec)
            copy.execute((x,), staged, Scalars(), None)
            operands.append(staged)
        self._gemm.execute(operands, d, scalars, c)


def _dense(spec: TensorSpec) -> Any:
    """A new CuPy array laid out as ``spec`` (a dense layout: a staged operand)."""
    dense = dense_allocation(spec)
    assert dense is not None, spec
    extents, axes = dense
    memory = cupy.empty(extents, spec.dtype)
    return memory if axes is None else memory.transpose(axes)
