"""Composed plans: a program run over a backend's primitive plans.

:class:`EinsumPlan` runs an :class:`~gpu_tc.program.EinsumProgram` (operand
preparations, pairwise contractions, a final stage); :class:`StagePlan` runs a
:class:`~gpu_tc.program.StageProgram`. Every primitive plan comes from the cache's
primitive level by canonical labels and runs through the one signature of
:class:`gpu_tc.backend.PrimitivePlan`; both composed plans execute as
``execute(operands, out, scalars, addend)`` into a checked ``out`` of the compute
dtype; ``result`` is the dtype the caller gets (:mod:`gpu_tc.run` casts into it).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .backend import UNSCALED, Backend, OrientationTrial, PrimitivePlan, Scalars
from .cache import PlanCache
from .expression import show_label
from .fast_paths import chained, finished, operand_view, own_view, viewed
from .keys import PrimitiveKey
from .memory import Ledger, nbytes
from .options import Options
from .problem import (
    ContractionProblem,
    ElementwiseProblem,
    PermutationProblem,
    PrimitiveProblem,
    ReductionProblem,
    TensorSpec,
)
from .program import EinsumProgram, OperandPrep, StageProgram

# The Backend method that plans each kind of problem.
_PLANNERS = {
    ContractionProblem: "contraction_plan",
    PermutationProblem: "permutation_plan",
    ReductionProblem: "reduction_plan",
    ElementwiseProblem: "elementwise_plan",
}


def primitive_plan(
    backend: Backend, problem: PrimitiveProblem, options: Options, extra: Hashable,
    cache: PlanCache,
) -> PrimitivePlan:
    """The backend's plan for ``problem``, from the cache or built (by canonical labels)."""
    canonical = problem.canonical()
    planner = getattr(backend, _PLANNERS[type(problem)])
    key = PrimitiveKey(canonical, backend.name, extra, options)
    return cache.get_or_build(key, lambda: planner(canonical, options))


class _Prepared:
    """Per-call preparation of one operand: strided view, cast, early reduction."""

    __slots__ = ("cast", "take", "reduction", "extents")

    def __init__(self, prep: OperandPrep, reduction: PrimitivePlan | None,
                 backend: Backend) -> None:
        self.cast = prep.cast
        self.take = operand_view(backend, prep)
        self.reduction = reduction
        self.extents = prep.result.extents

    @property
    def untouched(self) -> bool:
        return not self.cast and self.take is None and self.reduction is None

    def __call__(self, backend: Backend, x: Any, dtype: str) -> Any:
        if self.take is not None:
            x = self.take(x)
        if self.cast:
            x = backend.cast(x, dtype)
        if self.reduction is not None:
            reduced = backend.empty(self.extents, dtype)
            self.reduction.execute((x,), reduced, UNSCALED, None)
            x = reduced
        return x


_LABEL_GROUP = re.compile(r"(labels? )'([^']*)'")


def relabel(reason: str, names: dict[str, str]) -> str:
    """``reason`` with each quoted label group after "label(s)" renamed by ``names``."""

    def rename(match: re.Match[str]) -> str:
        labels = "".join(names.get(x, x) for x in match.group(2))
        if all(x.isascii() for x in labels):
            return f"{match.group(1)}{labels!r}"
        return match.group(1) + ", ".join(show_label(x) for x in labels)

    return _LABEL_GROUP.sub(rename, reason)


def in_caller_labels(reason: str, problem: PrimitiveProblem) -> str:
    """A shared plan's reason, which names canonical labels, in ``problem``'s labels."""
    return relabel(reason, {c: label for label, c in problem.canonical_labels().items()})


def _describe(stages: Sequence[tuple[PrimitivePlan, PrimitiveProblem]]) -> tuple[str, str]:
    """The route and reason of (plan, problem) stages, labels as the caller wrote them."""
    routes = [plan.route for plan, _ in stages]
    route = routes[0] if len(stages) == 1 else "+".join(routes)
    reason = "; ".join(
        f"{plan.route}: {in_caller_labels(plan.reason, problem)}" for plan, problem in stages
    )
    return route, reason


class EinsumPlan:
    """Runs one EinsumProgram; ``route`` and ``reason`` describe each stage, in order."""

    def __init__(
        self,
        program: EinsumProgram,
        backend: Backend,
        options: Options,
        extra: Hashable,
        cache: PlanCache,
        result: np.dtype[Any],
    ) -> None:
        self.program = program
        self.backend = backend
        self.context = f"einsum({program.expression.text!r})"
        self.result = result
        self.converts = result != np.dtype(program.dtype)  # e.g. float16 computed in float32

        # Each stage's plan gets the memory the stages before it leave (gpu_tc.memory).
        ledger = Ledger(options.memory_limit, self.context)
        budgeted = options.memory_limit is not None

        def plan_with(problem: PrimitiveProblem, held: int) -> PrimitivePlan:
            budget = ledger.budget(held)
            plan = primitive_plan(
                backend, problem, replace(options, memory_limit=budget) if budgeted else options,
                extra, cache,
            )
            ledger.record(held, plan.temporary_bytes)
            return plan

        self._dtype = program.dtype
        # A result computed in another dtype than the caller's is a temporary too.
        aside = nbytes(program.output) if self.converts else 0
        operands, held = [], aside
        for prep in program.operands:
            cast = nbytes(prep.spec) if prep.cast else 0
            if prep.reduction is None:  # a cast is held from here on: later stages count it
                operands.append(_Prepared(prep, None, backend))
                held += cast
                continue
            reduced = nbytes(prep.reduction.d)
            reduction = plan_with(prep.reduction, held + cast + reduced)
            operands.append(_Prepared(prep, reduction, backend))
            held += reduced
        self._operands = tuple(operands)
        sizes = [nbytes(p.result) if p.cast or p.reduction else 0 for p in program.operands]
        planned = []
        live = held  # what the final stage runs beside
        for index, step in enumerate(program.steps):
            inputs = sizes.pop(step.rhs) + sizes.pop(step.lhs)
            last = index == len(program.steps) - 1
            made = 0 if last else nbytes(step.problem.d)
            live = aside + sum(sizes) + inputs + made
            plan = plan_with(step.problem, live)
            planned.append((step.lhs, step.rhs, plan, step.problem.d.extents))
            sizes.append(made)
        self._steps = tuple(planned)
        self._final = self._steps[-1][2] if self._steps else plan_with(program.final, held)
        # A large final GEMM into a new result: a backend may time both layouts.
        self._orientation: OrientationTrial | None = None
        if program.flipped is not None:
            final = program.final
            assert isinstance(final, ContractionProblem)
            self._orientation = backend.orientation_trial(
                (final, program.flipped), lambda problem: plan_with(problem, live)
            )
        ledger.check()
        self.temporary_bytes = ledger.peak
        self.memory_limit = options.memory_limit
        # A warm call may skip all of execute(): steps on untouched operands into a
        # new result, which the backend plans can produce by themselves; or, as numpy.einsum,
        # a view of one operand whose labels the result only reorders or diagonalises.
        untouched = all(op.untouched for op in self._operands)
        self.fast: Any = None
        view, output = program.view_of_operand, program.output
        if not program.output_is_new:
            pass
        elif view is not None and np.dtype(view.dtype) == result:
            # A reorder is the operand's own transpose; not a diagonal: NumPy's diagonal()
            # is read-only, numpy.einsum's view writable where the operand is.
            calls = program.view_calls
            if calls is not None and not calls[0]:
                reorder = own_view((), calls[1]) or (lambda x: x[...])
                self.fast = finished(backend, reorder, output)
            else:
                source = program.operands[0].source
                self.fast = finished(backend, backend.viewer(source, view, writable=True), output)
        elif self._steps and untouched and not self.converts:
            fresh_calls = [(lhs, rhs, plan.fresh) for lhs, rhs, plan, _ in self._steps]
            if self._orientation is not None:  # the last step's layout is its to pick
                lhs, rhs, _ = fresh_calls[-1]
                fresh_calls[-1] = (lhs, rhs, self._orientation.fresh)
            final_step = self._steps[-1][2]
            self.fast = finished(backend, chained(fresh_calls), output,
                                 final_step.fresh_scalar and self._orientation is None)
        elif not self._steps and not self.converts and self._final.fresh is not None:
            self.fast = viewed(backend, program.operands[0], self._final.fresh, output,
                               self._final.fresh_scalar)
        # (plan, problem) per stage: the problem names the labels of the plan's reason.
        reductions: list[tuple[PrimitivePlan, PrimitiveProblem]] = [
            (op.reduction, prep.reduction)
            for op, prep in zip(self._operands, program.operands)
            if op.reduction is not None and prep.reduction is not None
        ]
        steps: list[tuple[PrimitivePlan, PrimitiveProblem]] = [
            (plan, step.problem) for (_, _, plan, _), step in zip(self._steps, program.steps)
        ]
        self._described = tuple(reductions + (steps or [(self._final, program.final)]))

    @property
    def stages(self) -> tuple[PrimitivePlan | OrientationTrial, ...]:
        """What autotunes: the plan of each stage, the final one's orientation trial
        where there is one (it tunes each of its plans and times them again)."""
        plans = tuple(plan for plan, _ in self._described)
        return plans if self._orientation is None else plans[:-1] + (self._orientation,)

    @property
    def output(self) -> TensorSpec:
        """The result's layout (for a new result: the orientation measured or to measure)."""
        return self.program.output if self._orientation is None else self._orientation.output

    @property
    def route(self) -> str:
        """The route of each stage, joined by "+"."""
        return _describe(self._live_stages())[0]

    @property
    def reason(self) -> str:
        """Why each stage runs as it does (read live: a stage may record a fallback)."""
        reason = _describe(self._live_stages())[1]
        if self._orientation is not None:
            reason += "; " + self._orientation.reason
        return reason

    def _live_stages(self) -> tuple[tuple[PrimitivePlan, PrimitiveProblem], ...]:
        """(plan, problem) per stage, the final one as the orientation trial now chooses."""
        trial = self._orientation
        if trial is None:
            return self._described
        return self._described[:-1] + ((trial.plan, trial.problem),)

    def execute(self, operands: Sequence[Any], out: Any, scalars: Scalars, addend: Any) -> Any:
        """Compute alpha * einsum + beta * addend into ``out``."""
        backend, dtype = self.backend, self._dtype
        arrays = [prep(backend, x, dtype) for prep, x in zip(self._operands, operands)]
        if not self._steps:
            self._final.execute(arrays, out, scalars, addend)
            return out
        last = len(self._steps) - 1
        for index, (lhs, rhs, plan, extents) in enumerate(self._steps):
            b = arrays.pop(rhs)
            a = arrays.pop(lhs)
            if index == last:
                final = plan if self._orientation is None else self._orientation
                final.execute((a, b), out, scalars, addend)
            else:
                d = backend.empty(extents, dtype)
                plan.execute((a, b), d, UNSCALED, None)
                arrays.append(d)
        return out


class StagePlan:
    """Runs one StageProgram: a permutation, reduction or element-wise problem."""

    def __init__(
        self,
        program: StageProgram,
        backend: Backend,
        options: Options,
        extra: Hashable,
        cache: PlanCache,
        context: str,
        result: np.dtype[Any],
    ) -> None:
        self.program = program
        self.backend = backend
        self.output: TensorSpec = program.output
        self.context = context
        self.result = result
        self.converts = result != np.dtype(self.output.dtype)
        self._dtype = self.output.dtype
        self.memory_limit = options.memory_limit
        ledger = Ledger(options.memory_limit, context)
        aside = nbytes(self.output) if self.converts else 0
        held = aside + sum(nbytes(prep.spec) for prep in program.operands if prep.cast)
        if options.memory_limit is not None:
            options = replace(options, memory_limit=ledger.budget(held))
        self._plan = primitive_plan(backend, program.problem, options, extra, cache)
        ledger.record(held, self._plan.temporary_bytes)
        ledger.check()
        self.temporary_bytes = ledger.peak
        self._operands = tuple(_Prepared(prep, None, backend) for prep in program.operands)
        self.stages = (self._plan,)
        # A warm unscaled call into a new result (a trace) may be one backend call.
        fresh = self._plan.fresh
        self.fast: Any = None
        if fresh is not None and not self.converts and len(program.operands) == 1:
            self.fast = viewed(backend, program.operands[0], fresh, self.output,
                               self._plan.fresh_scalar)

    @property
    def route(self) -> str:
        """The primitive plan's route."""
        return str(self._plan.route)

    @property
    def reason(self) -> str:
        """Why the primitive plan runs as it does."""
        return in_caller_labels(str(self._plan.reason), self.program.problem)

    def execute(self, operands: Sequence[Any], out: Any, scalars: Scalars, addend: Any) -> Any:
        """Run the stage into ``out`` with the operation's scalars."""
        arrays = [prep(self.backend, x, self._dtype) for prep, x in zip(self._operands, operands)]
        self._plan.execute(arrays, out, scalars, addend)
        return out
