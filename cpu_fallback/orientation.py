"""Choosing a GEMM's orientation for a new result by measurement.

A new result may be written as D = A B (row-major (M, N)) or as D^T = B^T A^T (the
same values, laid out (N, M)); neither moves more bytes, yet BLAS runs one faster than
the other by up to 1.5x depending on the shape, the dtype and the library. No rule
predicts it across those, so a large final contraction times both, together with each
orientation's competing lowerings, as one :class:`cpu_fallback.measure.Choice`. Every
call computes the full, correct result; only the layout of new results differs.
"""

from __future__ import annotations

from typing import Any

from gpu_tc.backend import PrimitivePlan, Scalars
from gpu_tc.problem import ContractionProblem, TensorSpec
from gpu_tc.strides import same_layout

from .measure import Choice
from .measured_plan import (
    MeasuredPlan,
    choice_key,
    engines,
    fresh_call,
    timed_run,
    variant_names,
)


def candidates(plan: PrimitivePlan) -> tuple[PrimitivePlan, ...]:
    """The plans a (possibly measured) plan chooses among."""
    return plan.plans if isinstance(plan, MeasuredPlan) else (plan,)


class OrientationTrial:
    """The plans of both layouts of one final contraction's new result, timed as one
    choice (the preferred layout's rule-picked plan is the default).

    Args:
        plans: The plans of ``problems[0]`` and ``problems[1]`` (measured plans are
            opened up into their candidates).
        problems: The final contraction into each layout of the new result, preferred
            first.
        layout: ``layout(array)`` (strides in elements), to tell which layout a result
            was allocated with.
        key: The problems as plain text, to keep decisions across processes.
    """

    def __init__(self, plans: tuple[PrimitivePlan, PrimitivePlan],
                 problems: tuple[ContractionProblem, ContractionProblem], layout: Any,
                 key: str | None = None) -> None:
        groups = [candidates(plan) for plan in plans]
        self.plans = groups[0] + groups[1]
        self._flipped = tuple([False] * len(groups[0]) + [True] * len(groups[1]))
        self._problems = tuple(problems[1] if f else problems[0] for f in self._flipped)
        self._outputs = tuple(problem.d for problem in self._problems)
        self._layout = layout
        self._allowed: dict[tuple[int, ...], list[int]] = {}  # the variants per byte strides
        prefixes = ["flipped" if f else "preferred" for f in self._flipped]
        # The preferred layout's rule-picked plan is a guess: the first measurement keeps
        # the fastest variant, later re-checks need the margin to change it.
        self.choice = Choice(variant_names(self.plans, prefixes), choice_key(key, self.plans),
                             engines(self.plans), incumbent=False)
        # The most any of the plans takes: each runs while they are timed.
        self.temporary_bytes = max(plan.temporary_bytes for plan in self.plans)
        # A warm call into a new result, in the layout of the variant the choice picks.
        self.fresh = fresh_call(self.choice, self.plans, self._outputs)

    @property
    def output(self) -> TensorSpec:
        """The layout the next new result should have."""
        return self._outputs[self.choice.peek()]

    @property
    def plan(self) -> PrimitivePlan:
        """The plan chosen (so far)."""
        return self.plans[self.choice.best]

    @property
    def problem(self) -> ContractionProblem:
        """The final contraction into the layout chosen."""
        return self._problems[self.choice.best]

    def execute(self, inputs: Any, out: Any, scalars: Scalars, addend: Any) -> None:
        """Run a plan that writes ``out``'s layout; time it while still measuring."""
        allowed = self._allowed.get(out.strides)
        if allowed is None:
            strides = self._layout(out).strides
            allowed = [i for i, o in enumerate(self._outputs) if same_layout(o, strides)]
            if len(self._allowed) >= 8:  # results come in two layouts; `out` in any
                self._allowed.clear()
            self._allowed[out.strides] = allowed
        timed_run(self.choice, self.plans, inputs, out, scalars, addend, allowed)

    def autotune(self, iterations: int) -> bool:
        """The plans' own autotuning (BLAS has no kernel choice: each says False)."""
        return any([plan.autotune(iterations) for plan in self.plans])

    @property
    def reason(self) -> str:
        """Which orientation and plan run, and the timings that chose them."""
        return "GEMM orientation and lowering " + self.choice.describe()
