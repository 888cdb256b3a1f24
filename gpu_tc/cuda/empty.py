"""Plans of empty results and empty sums: no library call, at most a fill on CuPy."""

from __future__ import annotations

from typing import Any

import cupy

from gpu_tc.errors import ShapeError
from gpu_tc.options import ReduceOp
from gpu_tc.problem import ReductionProblem

from .operands import plain_scalar


class EmptyPlan:
    """A result without elements: there is nothing to compute."""

    route = "empty"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"EmptyPlan(reason={self.reason!r})"

    def execute(self, *arrays_and_scalars: Any) -> None:
        """Nothing to write: the result has no elements."""


def _fill(d: Any, value: complex, beta: complex, c: Any) -> None:
    """d = value + beta * c (c read only when beta != 0)."""
    dtype = d.dtype.char
    if beta != 0 and c is not None:
        if c is not d:
            cupy.multiply(c, plain_scalar(beta, dtype), out=d)
        elif beta != 1:
            d *= plain_scalar(beta, dtype)
        if value != 0:
            d += plain_scalar(value, dtype)
    else:
        d.fill(plain_scalar(value, dtype))


class EmptySumContractionPlan:
    """A contracted extent is 0: the sum is empty and D = beta * C."""

    route = "empty"
    reason = "a contracted extent is 0: D = beta * C"

    def execute(
        self, a: Any, b: Any, d: Any, alpha: complex = 1, beta: complex = 0, c: Any = None
    ) -> None:
        """Write beta * c (or zeros) into ``d``."""
        _fill(d, 0, beta, c)


class EmptySumReductionPlan:
    """A reduced extent is 0: D = alpha * (the operator's identity) + beta * C."""

    route = "empty"

    def __init__(self, problem: ReductionProblem) -> None:
        op = problem.op_reduce
        if op not in (ReduceOp.SUM, ReduceOp.PROD):
            raise ShapeError(
                f"the {op.name} reduction {problem.a.labels}->{problem.d.labels} runs over a "
                "zero-size label and has no identity"
            )
        self._identity = 0 if op is ReduceOp.SUM else 1
        self.reason = f"a reduced extent is 0: D = alpha * {self._identity} + beta * C"

    def execute(self, a: Any, d: Any, alpha: complex = 1, beta: complex = 0, c: Any = None) -> None:
        """Write alpha * identity + beta * c into ``d``."""
        _fill(d, alpha * self._identity, beta, c)
