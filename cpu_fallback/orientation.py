"""Choosing a GEMM's orientation for a new result by measurement.

A new result may be written as D = A B (row-major (M, N)) or as D^T = B^T A^T (the
same values, laid out (N, M)); neither moves more bytes, yet BLAS runs one faster than
the other by up to 1.5x depending on the shape, the dtype and the library. No rule
predicts it across those, so a large final contraction times both: its first call warms
up (untimed, preferred layout), the next calls alternate between the two layouts, and
once each has been timed TRIALS times the faster stays. Every call computes the full,
correct result; only the layout of new results differs. The CPU backend measures: its
calls are synchronous, so a host timing is the GEMM's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gpu_tc.backend import PrimitivePlan, Scalars
from gpu_tc.problem import ContractionProblem, TensorSpec

# Below this many flops a call takes well under a millisecond: not worth measuring.
MIN_FLOPS = 1 << 27
TRIALS = 1


def contraction_flops(problem: ContractionProblem) -> int:
    """2 x the product of every label's extent: the multiply-adds of the contraction."""
    extents: dict[str, int] = {}
    for spec in (problem.a, problem.b, problem.d):
        extents.update(zip(spec.labels, spec.extents))
    flops = 2
    for extent in extents.values():
        flops *= extent
    return flops


class OrientationTrial:
    """Two plans for one final contraction, differing in D's layout; picks by timing.

    Args:
        plans: The plans writing ``outputs[0]`` and ``outputs[1]``.
        outputs: The two layouts of the new result, preferred first.
        layout: ``layout(array)`` (strides in elements), to tell which layout a result
            was allocated with.
    """

    def __init__(self, plans: tuple[PrimitivePlan, PrimitivePlan],
                 outputs: tuple[TensorSpec, TensorSpec], layout: Any) -> None:
        self.plans = plans
        self.outputs = outputs
        self._layout = layout
        self._times: tuple[list[float], list[float]] = ([], [])
        self._next = 0
        self._warm = False
        self._lock = threading.Lock()
        self.settled = False

    @property
    def output(self) -> TensorSpec:
        """The layout the next new result should have."""
        return self.outputs[self._next]

    @property
    def plan(self) -> PrimitivePlan:
        """The plan writing ``output``."""
        return self.plans[self._next]

    def execute(self, inputs: Any, out: Any, scalars: Scalars, addend: Any) -> None:
        """Run the plan that matches ``out``'s layout; time it while still measuring."""
        index = 1 if self._layout(out).strides == self.outputs[1].strides else 0
        plan = self.plans[index]
        if self.settled:
            plan.execute(inputs, out, scalars, addend)
            return
        if not self._warm:  # first touches of memory and BLAS threads: not a fair sample
            plan.execute(inputs, out, scalars, addend)
            with self._lock:
                self._warm, self._next = True, 1
            return
        start = time.perf_counter()
        plan.execute(inputs, out, scalars, addend)
        elapsed = time.perf_counter() - start
        with self._lock:
            if self.settled:
                return
            self._times[index].append(elapsed)
            if all(len(t) >= TRIALS for t in self._times):
                self._next = min((0, 1), key=lambda i: min(self._times[i]))
                self.settled = True
            else:
                self._next = min((0, 1), key=lambda i: len(self._times[i]))

    @property
    def reason(self) -> str:
        """Which orientation runs, and the timings that chose it."""
        if not self.settled:
            runs = sum(len(t) for t in self._times)
            return f"GEMM orientation being measured ({runs} of {2 * TRIALS} calls timed)"
        best = [min(t) * 1e3 for t in self._times]
        kept = "preferred" if self._next == 0 else "flipped"
        return (
            f"GEMM orientation measured: {kept} layout kept "
            f"(preferred {best[0]:.3g} ms, flipped {best[1]:.3g} ms)"
        )
