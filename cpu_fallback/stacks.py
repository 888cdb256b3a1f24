"""An operand of a GEMM lowering as its matrix stack, worked out once per plan.

A plan calls with the same layouts every time, so the order of a packed buffer's
axes, the shape it is stored in and the view that unmerges its label groups are
fixed when the plan is made; a call only takes a pooled buffer and makes views.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_tc.gemm import MatrixOperand

from .permute import copy_permuted
from .pool import HOST_POOL


class Stack:
    """How ``spec``'s operand becomes its matrix stack: a view, or a packed copy."""

    __slots__ = ("perm", "shape", "pack", "_memory", "_unmerge", "_stored", "_transposed")

    def __init__(self, spec: MatrixOperand) -> None:
        self.perm, self.shape, self.pack = spec.perm, spec.shape, spec.pack
        axes = spec.memory_axes()
        self._memory = tuple(spec.grouped[i] for i in axes)
        self._unmerge = tuple(int(i) for i in np.argsort(axes))
        batch = spec.shape[:-2]
        self._transposed = spec.transposed
        self._stored = (batch + (spec.shape[-1], spec.shape[-2]) if spec.transposed
                        else spec.shape)

    def buffer(self, dtype: Any) -> tuple[Any, Any]:
        """A new matrix stack of ``shape`` laid out as the lowering asks.

        Returns:
            The stack (batch..., rows, cols), and the same memory with every label of
            ``perm`` as its own axis, in ``perm`` order (for packing or unpacking).
        """
        memory = HOST_POOL.empty(self._memory, dtype)
        stack = memory.reshape(self._stored)
        if self._transposed:
            stack = stack.swapaxes(-1, -2)
        return stack, memory.transpose(self._unmerge)

    def of(self, x: Any) -> Any:
        """``x`` as a matrix stack: a view, or a packed copy when the lowering says so."""
        grouped = x.transpose(self.perm)
        if not self.pack:
            return grouped.reshape(self.shape)
        stack, unmerged = self.buffer(x.dtype)
        copy_permuted(grouped, unmerged)
        return stack
