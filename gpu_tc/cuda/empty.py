"""Plans of empty results and empty sums: no library call, at most a fill on CuPy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cupy

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.problem import ReductionProblem

from .operands import plain_scalar


class EmptyPlan(PlanDefaults):
    """A result without elements: there is nothing to compute."""

    route = "empty"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"EmptyPlan(reason={self.reason!r})"

    def execute(self, inputs: Sequence[Any], out: Any, scalars: Scalars, addend: Any) -> None:
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


class EmptySumContractionPlan(PlanDefaults):
    """A contracted extent is 0: the sum is empty and D = beta * C."""

    route = "empty"
    reason = "a contracted extent is 0: D = beta * C"

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write beta * c (or zeros) into ``d``."""
        _fill(d, 0, scalars.beta, c)


class EmptySumReductionPlan(PlanDefaults):
    """A reduced extent is 0: D = alpha * (the operator's identity) + beta * C."""

    route = "empty"

    def __init__(self, problem: ReductionProblem) -> None:
        context = f"the reduction {problem.a.labels}->{problem.d.labels}"
        self._identity = problem.empty_fold(context) or 0
        self.reason = f"a reduced extent is 0: D = alpha * {self._identity} + beta * C"

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write alpha * identity + beta * c into ``d``."""
        _fill(d, scalars.alpha * self._identity, scalars.beta, c)
