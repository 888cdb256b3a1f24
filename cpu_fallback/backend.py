"""CpuBackend: NumPy arrays, plans that run views through numpy.matmul (BLAS)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gpu_tc.options import Options
from gpu_tc.problem import (
    ContractionProblem,
    ElementwiseProblem,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
    array_layout,
)

from .contraction import CpuContractionPlan
from .elementwise import CpuElementwisePlan
from .permute import CpuPermutationPlan
from .pool import HOST_POOL
from .reduction import CpuReductionPlan


class CpuBackend:
    """The NumPy/BLAS backend: every plan executes on host memory."""

    name = "cpu"
    array_type = np.ndarray

    layout = staticmethod(array_layout)
    # Calls are synchronous, so host timings are real: a new result's GEMM orientation
    # is chosen by measurement (gpu_tc.orientation).
    measures_orientation = True

    def key_extra(self, arrays: Sequence[Any], context: str) -> tuple[Any, ...]:
        """Nothing besides the layouts: NumPy copes with any alignment."""
        return ()

    def empty(self, extents: tuple[int, ...], dtype: str) -> np.ndarray:
        """A new C-ordered array; a large one from the host pool (cpu_fallback.pool)."""
        return HOST_POOL.empty(extents, dtype)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        """``array`` itself: the CPU computes on NumPy arrays."""
        return array

    def cast(self, array: np.ndarray, dtype: str) -> np.ndarray:
        """A C-ordered copy of ``array`` in ``dtype``."""
        return np.array(array, dtype=dtype, order="C", copy=True)

    def view(self, array: np.ndarray, spec: TensorSpec, writable: bool = False) -> np.ndarray:
        """A view with the extents and strides (in elements) of ``spec``; read-only
        unless ``writable``."""
        itemsize = array.itemsize
        strides = tuple(s * itemsize for s in spec.strides)
        if writable:
            return as_strided(array, spec.extents, strides)
        if array.flags.c_contiguous or array.flags.f_contiguous:
            # Three times cheaper than as_strided: a warm trace is a few microseconds.
            view = np.ndarray(spec.extents, array.dtype, buffer=array, strides=strides)
            view.flags.writeable = False
            return view
        return as_strided(array, spec.extents, strides, writeable=False)

    def overlaps(self, a: Any, b: Any) -> bool:
        """Whether the memory of ``a`` and ``b`` may overlap (a bounds check)."""
        return bool(np.may_share_memory(a, b))

    def copy_into(self, source: np.ndarray, destination: np.ndarray) -> None:
        """Copy ``source`` into ``destination``."""
        np.copyto(destination, source)

    def finish(self, result: np.ndarray) -> Any:
        """A NumPy scalar for a 0-d result, as numpy.einsum returns."""
        return result[()] if result.ndim == 0 else result

    def contraction_plan(self, problem: ContractionProblem, options: Options) -> CpuContractionPlan:
        """A GEMM lowering of ``problem`` (see gpu_tc.gemm)."""
        return CpuContractionPlan(problem)

    def permutation_plan(self, problem: PermutationProblem, options: Options) -> CpuPermutationPlan:
        """A strided copy into B's layout."""
        return CpuPermutationPlan(problem)

    def reduction_plan(self, problem: ReductionProblem, options: Options) -> CpuReductionPlan:
        """A ufunc reduction on a view, split over threads when large."""
        return CpuReductionPlan(problem)

    def elementwise_plan(self, problem: ElementwiseProblem, options: Options) -> CpuElementwisePlan:
        """NumPy ufuncs on broadcast views."""
        return CpuElementwisePlan(problem)
