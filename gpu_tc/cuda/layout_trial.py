"""Choosing the layout of a new result on the GPU by timing its first calls.

A final contraction into a new result may write it in the layout gpu_tc's rule prefers
(:func:`gpu_tc.program.natural_outputs`), in the other GEMM orientation, or in the
layout asked for (C order of the output labels, as nvmath and cupy.einsum write it).
Which runs fastest depends on the shape and on the kernels cuTENSOR or cuBLAS pick for
it: on an H200, TCCG case 31 (``aged,cbfg->fedcba``, float64) ran at 12.1 TFLOP/s in
the preferred layout, where nvmath's plan, cuTENSOR writing the layout asked, ran 13.8.
No rule predicts it, so the first calls run each layout in turn, each timed between two
CUDA events on the stream it runs on (no host synchronisation: a timing is read once
its end event has completed); once every layout has ``ROUNDS`` timings after a warm-up
call, the fastest median writes every later new result. Every call computes the full,
correct result; only the layout of new results differs.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Sequence
from typing import Any

import cupy

from gpu_tc.backend import PrimitivePlan, Scalars
from gpu_tc.problem import ContractionProblem, TensorSpec, array_layout, contiguous_spec
from gpu_tc.strides import same_layout

# Below this many flops a contraction takes a few microseconds, about what a launch
# costs: the layouts cannot differ by more than the timing's noise.
MIN_FLOPS = 10**8
WARM_UPS = 1  # untimed calls of each layout first (module loading, first-touch)
ROUNDS = 3  # timed calls of each layout; the median decides
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
    their first calls with CUDA events; then the fastest.

    Args:
        candidates: (name, problem) per layout, the preferred first (see :func:`layouts`).
        plan_for: Plans a problem (the backend's plan, with the memory budget applied).
    """

    def __init__(self, candidates: Sequence[tuple[str, ContractionProblem]],
                 plan_for: Callable[[ContractionProblem], PrimitivePlan]) -> None:
        self._names = tuple(name for name, _ in candidates)
        self._problems = tuple(problem for _, problem in candidates)
        self.plans = tuple(plan_for(problem) for problem in self._problems)
        self._started = [0] * len(self.plans)  # calls begun per layout while timing
        self._times: list[list[float]] = [[] for _ in self.plans]  # milliseconds
        self._pending: list[tuple[int, Any, Any]] = []  # (layout, start event, end event)
        self._chosen: int | None = None
        self._lock = threading.Lock()
        # The most any of the plans takes: each runs while they are timed.
        self.temporary_bytes = max(plan.temporary_bytes for plan in self.plans)

    @property
    def output(self) -> TensorSpec:
        """The layout the next new result should have."""
        with self._lock:
            return self._problems[self._next()].d

    @property
    def plan(self) -> PrimitivePlan:
        """The plan chosen, or while timing, the fastest so far."""
        with self._lock:
            return self.plans[self._leader()]

    @property
    def problem(self) -> ContractionProblem:
        """The final contraction into the layout chosen (so far)."""
        with self._lock:
            return self._problems[self._leader()]

    def execute(self, inputs: Sequence[Any], out: Any, scalars: Scalars, addend: Any) -> None:
        """Run the plan that writes ``out``'s layout; time it while still timing.

        Raises:
            ValueError: ``out`` has none of the layouts (a caller's error: results are
                allocated as :attr:`output` says).
        """
        strides = array_layout(out).strides
        index = next((i for i, p in enumerate(self._problems)
                      if same_layout(p.d, strides)), None)
        if index is None:
            raise ValueError(f"a result with strides {out.strides} has none of the layouts "
                             f"timed for {self._problems[0].d.labels}")
        with self._lock:
            self._collect()
            timed = self._chosen is None and self._started[index] < WARM_UPS + ROUNDS
            warm_up = self._started[index] < WARM_UPS
            if timed:
                self._started[index] += 1
        if not timed:
            self.plans[index].execute(inputs, out, scalars, addend)
            return
        stream = cupy.cuda.get_current_stream()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        self.plans[index].execute(inputs, out, scalars, addend)
        end.record(stream)
        if not warm_up:
            with self._lock:
                self._pending.append((index, start, end))

    @property
    def reason(self) -> str:
        """Which layout runs, and the timings that chose it."""
        with self._lock:
            self._collect()
            timings = ", ".join(
                f"{name} {statistics.median(times):.4g} ms" if times else f"{name} not yet"
                for name, times in zip(self._names, self._times)
            )
            if self._chosen is None:
                state = f"timing {len(self.plans)} layouts"
            else:
                state = f"{self._names[self._chosen]} kept"
        return (f"layout of the new result {state} (CUDA events, median of {ROUNDS} after "
                f"{WARM_UPS} warm-up): {timings}")

    def _collect(self) -> None:
        """Read the timings whose end events completed; choose once all are in."""
        waiting = []
        for index, start, end in self._pending:
            if end.done:
                self._times[index].append(float(cupy.cuda.get_elapsed_time(start, end)))
            else:
                waiting.append((index, start, end))
        self._pending = waiting
        if self._chosen is None and all(len(t) >= ROUNDS for t in self._times):
            self._chosen = self._leader()

    def _leader(self) -> int:
        """The chosen layout, else the one with the fastest median so far (the preferred
        one before any timing)."""
        if self._chosen is not None:
            return self._chosen
        medians = [statistics.median(t) if t else float("inf") for t in self._times]
        return min(range(len(medians)), key=lambda i: (medians[i], i)) if any(
            t for t in self._times) else 0

    def _next(self) -> int:
        """The layout the next new result gets: the chosen one, else the one with the
        fewest timed calls begun, else (all begun, timings still in flight) the leader."""
        self._collect()
        if self._chosen is not None:
            return self._chosen
        fewest = min(range(len(self._started)), key=lambda i: self._started[i])
        if self._started[fewest] < WARM_UPS + ROUNDS:
            return fewest
        return self._leader()
