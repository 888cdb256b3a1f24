"""Permutation on the CPU: the copy kernel that packing and unpacking share."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_tc.operators import UNARY
from gpu_tc.options import UnaryOp
from gpu_tc.problem import PermutationProblem


def copy_permuted(source: Any, destination: Any) -> None:
    """Copy ``source`` into ``destination``: two views of one shape, any strides."""
    np.copyto(destination, source)


class CpuPermutationPlan:
    """B = alpha * op(A) with B's axes a permutation of A's."""

    route = "permute"

    def __init__(self, problem: PermutationProblem) -> None:
        self.problem = problem
        self._perm = tuple(problem.a.labels.index(x) for x in problem.b.labels)
        self._op = problem.op_a
        self.reason = "strided copy into B's layout" + (
            "" if problem.op_a is UnaryOp.IDENTITY else f", applying {problem.op_a.name}"
        )

    def __repr__(self) -> str:
        return f"CpuPermutationPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, a: Any, b: Any, alpha: complex = 1) -> None:
        """Write alpha * op(a), permuted, into ``b``."""
        source = a.transpose(self._perm)
        if self._op is UnaryOp.IDENTITY:
            copy_permuted(source, b)
        else:
            UNARY[self._op](source, out=b)
        if alpha != 1:
            np.multiply(b, alpha, out=b)
