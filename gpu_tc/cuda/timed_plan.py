"""A primitive plan that times competing routes of one problem on its first calls
(between CUDA events, :mod:`.event_timing`) and then runs the fastest.

Used where no rule says which of two correct routes runs faster on a GPU: a contraction
that maps onto one cuBLAS GEMM (in place, or after copying A and/or B) against
cuTENSOR's kernel for it, and a float reduction (a trace, a partial trace, a sum) on
cuTENSOR against CuPy's reduction kernel (on an H200, CuPy's kernel summed the
diagonals of 4096 64x64 matrices in about 11 us where cuTENSOR's took about 45, as
inferred from visit 3's cupy.einsum and gpu_tc figures). A route that fails in its
library (out of memory for a staged copy, a refused status) leaves the call to the
next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_tc.backend import PlanDefaults, PrimitivePlan, Scalars
from gpu_tc.problem import TensorSpec

from .event_timing import EventTimings
from .operands import new_result_call


class TimedPlan(PlanDefaults):
    """Routes of one problem, each writing the same layout, timed on the first calls.

    Args:
        plans: The competing plans, the one a rule would pick first (it runs until
            timings are in).
        d: Their D, for a warm call into a new result (``fresh``); None: no such call.
    """

    def __init__(self, plans: Sequence[PrimitivePlan], d: TensorSpec | None = None) -> None:
        self.plans = tuple(plans)
        self._timings = EventTimings([plan.route for plan in self.plans])
        self._every = tuple(range(len(self.plans)))
        # The most any of the plans takes: each runs while they are timed.
        self.temporary_bytes = max(plan.temporary_bytes for plan in self.plans)
        # A warm call into a new result: laid out at plan time, then execute(), whose
        # timings run the chosen route (the next where it fails in its library).
        self.fresh = None if d is None else new_result_call(self, d)

    @property
    def chosen(self) -> PrimitivePlan:
        """The plan chosen, or while timing, the fastest so far."""
        return self.plans[self._timings.leader()]

    @property
    def route(self) -> str:
        """The route of the plan chosen (so far)."""
        return self.chosen.route

    @property
    def reason(self) -> str:
        """The chosen plan's reason, then the timings between the routes."""
        return f"{self.chosen.reason}; routes {self._timings.describe('routes')}"

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Run the next plan to time, or the one chosen; where a route fails in its
        library, the next (the last failure raised when every route failed)."""
        self._timings.execute(self._every,
                              lambda i: self.plans[i].execute(inputs, d, scalars, c))

    def autotune(self, iterations: int) -> bool:
        """Let every plan that can tune its kernels do so, and time the routes again:
        a tuning route's next ``iterations`` calls try kernel candidates, untimed."""
        tuned = [plan.autotune(iterations) for plan in self.plans]
        self._timings = self._timings.retuned(tuned, iterations)
        return any(tuned)

