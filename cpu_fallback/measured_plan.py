"""Several plans of one problem run as one plan, the variant to run chosen by timing
(cpu_fallback.measure's Choice): the plan the backend hands out where routes compete,
with a warm call into a new result that runs the picked variant's own; and the timed
run of a variant, reported to its Choice."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpu_tc.backend import UNSCALED, PlanDefaults, PrimitivePlan, Scalars
from gpu_tc.problem import TensorSpec
from gpu_tc.run import dense_allocation

from .measure import Choice
from .pool import HOST_POOL


def engines(plans: Sequence[PrimitivePlan]) -> list[str]:
    """Whose threads each plan's calls leave spinning: 'numpy' for NumPy's broadcast
    multiply (one thread, none left spinning), 'blas' for another route on NumPy's BLAS,
    else 'openmp' (gpu_tc's own kernels, and MKL's GEMMs: cpu_fallback.mkl runs them on
    GNU OpenMP's threads, the kernels' own)."""
    return ["numpy" if plan.route == "blas:multiply"
            else "blas" if str(plan.route).startswith("blas:") else "openmp"
            for plan in plans]


def variant_names(plans: Sequence[PrimitivePlan], prefixes: Sequence[str] = ()) -> list[str]:
    """Names for a reason: each plan's route (with its prefix), numbered when repeated."""
    names = [f"{p} {plan.route}" if p else plan.route
             for p, plan in zip(list(prefixes) or [""] * len(plans), plans, strict=True)]
    return [f"{n} #{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


def choice_key(problem: str | None, plans: Sequence[PrimitivePlan]) -> str | None:
    """A choice's key: the problem's text and each plan's reason (its blocking too)."""
    return None if problem is None else f"{problem} by {[plan.reason for plan in plans]}"


class MeasuredPlan(PlanDefaults):
    """Several primitive plans of one problem (same layouts in and out), run by a
    :class:`Choice`: its route and reason are the chosen plan's, plus the timings.
    ``key``: the problem as plain text, to keep decisions across processes;
    ``prefixes``: words that tell plans of one route apart in the reason."""

    def __init__(self, plans: Sequence[PrimitivePlan], key: str | None = None,
                 d: TensorSpec | None = None, incumbent: bool = True,
                 prefixes: Sequence[str] = ()) -> None:
        self.plans = tuple(plans)
        self.choice = Choice(variant_names(self.plans, prefixes), choice_key(key, self.plans),
                             engines(self.plans), incumbent)
        # The most any of the plans takes: each runs while they are timed.
        self.temporary_bytes = max(plan.temporary_bytes for plan in self.plans)
        # A warm call into a new result where a plan has a fresh call of its own.
        self.fresh = (None if d is None or not any(plan.fresh for plan in self.plans)
                      else fresh_call(self.choice, self.plans, [d] * len(self.plans)))

    @property
    def route(self) -> str:
        """The route of the plan chosen (so far)."""
        return str(self.plans[self.choice.best].route)

    @property
    def reason(self) -> str:
        """The chosen plan's reason and the measurement."""
        return f"{self.plans[self.choice.best].reason}; {self.choice.describe()}"

    def __repr__(self) -> str:
        return f"MeasuredPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Sequence[Any], out: Any, scalars: Scalars, addend: Any) -> None:
        """Write the result with the plan the choice picks."""
        timed_run(self.choice, self.plans, inputs, out, scalars, addend)


def fresh_call(choice: Choice, plans: Sequence[PrimitivePlan],
               outputs: Sequence[TensorSpec]) -> Any:
    """``f(*inputs)`` returning a new result laid out as ``outputs[i]`` for the variant
    ``i`` the choice picks (the warm path of a call into a new result): where the call
    is not timed (settled, or a measurement's lead-in), the variant's own fresh call
    where it has one; else the variant into a new array, timed as execute() would be;
    None where an output has gaps."""
    calls = [plan.fresh for plan in plans]
    allocations = []
    for d in outputs:
        dense = dense_allocation(d)
        if dense is None:
            return None
        allocations.append((*dense, str(np.dtype(d.dtype))))

    def fresh(*inputs: Any) -> Any:
        variant, timed = choice.next()
        call = calls[variant]
        if call is not None and not timed:
            result = call(*inputs)
            choice.spinning.left(choice.engines[variant], time.perf_counter())
            return result
        extents, axes, dtype = allocations[variant]
        out = HOST_POOL.empty(extents, dtype)
        if axes is not None:
            out = out.transpose(axes)
        run_variant(choice, plans, variant, timed, inputs, out, UNSCALED, None)
        return out

    return fresh


def timed_run(choice: Choice, plans: Sequence[PrimitivePlan], inputs: Any, out: Any,
              scalars: Scalars, addend: Any, allowed: Sequence[int] | None = None) -> None:
    """Run the variant ``choice`` picks (among ``allowed``) and report its time."""
    variant, timed = choice.next(allowed)
    run_variant(choice, plans, variant, timed, inputs, out, scalars, addend)


def run_variant(choice: Choice, plans: Sequence[PrimitivePlan], variant: int, timed: bool,
                inputs: Any, out: Any, scalars: Scalars, addend: Any) -> None:
    """Run ``variant``, as :meth:`Choice.next` said, and report its time."""
    start = time.perf_counter()
    plans[variant].execute(inputs, out, scalars, addend)
    end = time.perf_counter()
    choice.spinning.left(choice.engines[variant], end)
    choice.record(variant, end - start, timed)
