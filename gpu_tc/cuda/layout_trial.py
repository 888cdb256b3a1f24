"""Choosing the layout of a new result on the GPU by timing its first calls.

A final contraction into a new result may write it in the layout gpu_tc's rule prefers
(:func:`gpu_tc.result_layout.natural_outputs`), in the other GEMM orientation, or in the
layout asked for (C order of the output labels, as nvmath and cupy.einsum write it).
Which runs fastest depends on the shape and on the kernels cuTENSOR or cuBLAS pick for
it: on an H200, TCCG case 31 (``aged,cbfg->fedcba``, float64) ran at 12.1 TFLOP/s in
the preferred layout, where nvmath's plan, cuTENSOR writing the layout asked, ran 13.8.
No rule predicts it, so the first calls run each layout in turn, timed between CUDA
events (:mod:`.event_timing`), and the fastest writes every later new result. Every
call computes the full, correct result; only the layout of new results differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpu_tc.backend import PrimitivePlan, Scalars
from gpu_tc.problem import ContractionProblem, TensorSpec, array_layout, contiguous_spec
from gpu_tc.strides import same_layout

from .event_timing import VARIANT_FAILURES, EventTimings
from .timed_plan import TimedPlan

NAMES = ("preferred", "flipped", "asked")


def layouts(problems: Sequence[ContractionProblem]) -> list[tuple[str, ContractionProblem]]:
    """The final contraction into each distinct layout of the new result: the two GEMM
    orientations (preferred first), then the layout asked for where it differs."""
    first = problems[0]
    d = first.d
    asked = ContractionProblem(first.a, first.b,
                               contiguous_spec(d.labels, list(d.extents), d.dtype))
    found: list[tuple[str, ContractionProblem]] = []
    for name, problem in zip(NAMES, (*problems, asked)):
        if not any(same_layout(problem.d, other.d.strides) for _, other in found):
            found.append((name, problem))
    return found


class LayoutTrial:
    """The plans of a final contraction into each layout of its new result, timed on
    their first calls; then the fastest.

    Args:
        candidates: (name, problem) per layout, the preferred first (see :func:`layouts`).
        plan_for: Plans a problem (the backend's plan, with the memory budget applied).
    """

    fresh = None  # every call runs through execute(), which records the timings

    def __init__(self, candidates: Sequence[tuple[str, ContractionProblem]],
                 plan_for: Callable[[ContractionProblem], PrimitivePlan]) -> None:
        names, problems, plans = [], [], []
        for name, problem in candidates:
            try:
                plan = plan_for(problem)
            except VARIANT_FAILURES:  # e.g. its workspace above memory_limit
                if name == candidates[0][0]:
                    raise
                continue
            # Routes timed against each other are timed here, one per layout and route.
            routes = plan.plans if isinstance(plan, TimedPlan) else (plan,)
            for route in routes:
                names.append(f"{name} {route.route}" if len(routes) > 1 else name)
                problems.append(problem)
                plans.append(route)
        self._problems, self.plans = tuple(problems), tuple(plans)
        self._timings = EventTimings(names)
        layouts = len(dict.fromkeys(id(problem) for problem in problems))
        self._noun = "layouts" if len(plans) == layouts else "layouts and routes"
        # The most any of the plans takes: each runs while they are timed.
        self.temporary_bytes = max(plan.temporary_bytes for plan in self.plans)

    @property
    def output(self) -> TensorSpec:
        """The layout the next new result should have."""
        return self._problems[self._timings.next()].d

    @property
    def plan(self) -> PrimitivePlan:
        """The plan chosen, or while timing, the fastest so far."""
        return self.plans[self._timings.leader()]

    @property
    def problem(self) -> ContractionProblem:
        """The final contraction into the layout chosen (so far)."""
        return self._problems[self._timings.leader()]

    def execute(self, inputs: Sequence[Any], out: Any, scalars: Scalars, addend: Any) -> None:
        """Run the plan that writes ``out``'s layout; time it while still timing.

        Raises:
            ValueError: ``out`` has none of the layouts (a caller's error: results are
                allocated as :attr:`output` says).
        """
        strides = array_layout(out).strides
        fits = [i for i, p in enumerate(self._problems) if same_layout(p.d, strides)]
        if not fits:
            raise ValueError(f"a result with strides {out.strides} has none of the layouts "
                             f"timed for {self._problems[0].d.labels}")
        self._timings.execute(fits, lambda i: self.plans[i].execute(inputs, out, scalars, addend))

    def autotune(self, iterations: int) -> bool:
        """Let every plan that can tune its kernels do so, and time the layouts again:
        a tuning plan's next ``iterations`` calls try kernel candidates, untimed."""
        tuned = [plan.autotune(iterations) for plan in self.plans]
        self._timings = self._timings.retuned(tuned, iterations)
        return any(tuned)

    @property
    def reason(self) -> str:
        """Which layout runs, and the timings that chose it."""
        return f"layout of the new result {self._timings.describe(self._noun)}"
