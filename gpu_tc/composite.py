"""Plans built of primitive backend plans: EinsumPlan and the single-stage StagePlan.

Both execute as ``execute(operands, out, scalars, c)`` into a checked ``out``.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from functools import lru_cache
from typing import Any

from .backend import Backend
from .cache import PlanCache
from .expression import show_label
from .options import Options
from .orientation import MIN_FLOPS, OrientationTrial, contraction_flops
from .paths import EinsumProgram, OperandPrep
from .problem import (
    ContractionProblem,
    ElementwiseProblem,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
)

PrimitiveProblem = ContractionProblem | PermutationProblem | ReductionProblem | ElementwiseProblem


def primitive_plan(
    backend: Backend,
    problem: PrimitiveProblem,
    options: Options,
    extra: Hashable,
    cache: PlanCache,
) -> Any:
    """The backend's plan for ``problem``, from the cache or built (by canonical labels)."""
    canonical = problem.canonical()
    key = (type(problem).__name__, canonical, backend.name, extra, options)
    builders = {
        ContractionProblem: backend.contraction_plan,
        PermutationProblem: backend.permutation_plan,
        ReductionProblem: backend.reduction_plan,
        ElementwiseProblem: backend.elementwise_plan,
    }
    build = builders[type(problem)]
    return cache.get_or_build(key, lambda: build(canonical, options))  # type: ignore[operator]


class _Operand:
    """Per-call preparation of one operand: cast, strided view, early reduction."""

    __slots__ = ("cast", "view", "reduction", "extents")

    def __init__(self, prep: OperandPrep, plan_for: Any) -> None:
        self.cast = prep.cast
        self.view = prep.spec if prep.view else None
        self.reduction = None if prep.reduction is None else plan_for(prep.reduction)
        self.extents = prep.result.extents

    def __call__(self, backend: Backend, x: Any, dtype: str) -> Any:
        if self.cast:
            x = backend.cast(x, dtype)
        if self.view is not None:
            x = backend.view(x, self.view)
        if self.reduction is not None:
            reduced = backend.empty(self.extents, dtype)
            self.reduction.execute(x, reduced, 1, 0, None)
            x = reduced
        return x


@lru_cache(maxsize=1024)
def _dense_order(spec: TensorSpec) -> tuple[int, ...] | None:
    """The axis order, outermost first, in which ``spec`` is dense; None when its
    strides leave gaps or run backwards."""
    order = tuple(sorted(range(len(spec.extents)), key=lambda i: -spec.strides[i]))
    step = 1
    for i in reversed(order):
        if spec.extents[i] != 1 and spec.strides[i] != step:
            return None
        step *= spec.extents[i]
    return order


def allocate(backend: Backend, spec: TensorSpec) -> Any:
    """A new array laid out exactly as ``spec``: dense in its axis order, or, when its
    strides leave gaps or run backwards (a plan made for an ``out`` that is a window),
    a view of a buffer spanning them: a plan's GEMM or cuTENSOR descriptor has its
    output strides built in."""
    order = _dense_order(spec)
    if order is None and 0 not in spec.extents:
        low = sum((e - 1) * s for e, s in zip(spec.extents, spec.strides) if s < 0)
        high = sum((e - 1) * s for e, s in zip(spec.extents, spec.strides) if s > 0)
        buffer = backend.empty((high - low + 1,), spec.dtype)
        return backend.view(buffer[-low:], spec, writable=True)
    memory = list(order) if order is not None else list(range(len(spec.extents)))
    if memory == list(range(len(memory))):
        return backend.empty(spec.extents, spec.dtype)
    array = backend.empty(tuple(spec.extents[i] for i in memory), spec.dtype)
    return array.transpose([memory.index(i) for i in range(len(memory))])


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


def _describe(stages: Sequence[tuple[Any, PrimitiveProblem]]) -> tuple[str, str]:
    """The route and reason of (plan, problem) stages, labels as the caller wrote them."""
    routes = [plan.route for plan, _ in stages]
    route = routes[0] if len(stages) == 1 else "+".join(routes)
    reason = "; ".join(
        f"{plan.route}: {in_caller_labels(plan.reason, problem)}" for plan, problem in stages
    )
    return route, reason


class EinsumPlan:
    """Runs one EinsumProgram; every primitive plan comes through the plan cache.

    ``route`` and ``reason`` describe each stage, in order.
    """

    def __init__(
        self,
        program: EinsumProgram,
        backend: Backend,
        options: Options,
        extra: Hashable,
        cache: PlanCache,
    ) -> None:
        self.program = program
        self.backend = backend
        self._output: TensorSpec = program.output
        self.context = f"einsum({program.expression.text!r})"

        def plan_for(problem: PrimitiveProblem) -> Any:
            return primitive_plan(backend, problem, options, extra, cache)

        self._dtype = program.dtype
        self._operands = tuple(_Operand(prep, plan_for) for prep in program.operands)
        self._steps = tuple(
            (step.lhs, step.rhs, plan_for(step.problem), step.problem.d.extents)
            for step in program.steps
        )
        self._final = self._steps[-1][2] if self._steps else plan_for(program.final)
        self._single_permute = isinstance(program.final, PermutationProblem)
        # A warm call may skip all of execute(): one step on untouched operands into a
        # new C-ordered result, which the backend plan can produce by itself.
        untouched = all(
            not op.cast and op.view is None and op.reduction is None for op in self._operands
        )
        self.fast = None
        if len(self._steps) == 1 and untouched and program.output_is_new:
            self.fast = getattr(self._final, "fresh", None)
        # A large final GEMM into a new result: both orientations, chosen by timing.
        self._orientation: OrientationTrial | None = None
        flipped = program.flipped
        if (
            flipped is not None
            and getattr(backend, "measures_orientation", False)
            and contraction_flops(flipped) >= MIN_FLOPS
        ):
            self._orientation = OrientationTrial(
                (self._final, plan_for(flipped)), (program.output, flipped.d), backend.layout
            )
            self.fast = None
        # (plan, problem) per stage: the problem names the labels of the plan's reason.
        reductions = [
            (op.reduction, prep.reduction)
            for op, prep in zip(self._operands, program.operands)
            if op.reduction is not None
        ]
        steps = [(plan, step.problem) for (_, _, plan, _), step in zip(self._steps, program.steps)]
        self._described = tuple(reductions + (steps or [(self._final, program.final)]))
        self.stages = tuple(plan for plan, _ in self._described)

    @property
    def output(self) -> TensorSpec:
        """The result's layout (for a new result: the orientation measured or to measure)."""
        return self._output if self._orientation is None else self._orientation.output

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

    def _live_stages(self) -> tuple[tuple[Any, PrimitiveProblem], ...]:
        """(plan, problem) per stage, the final one in the orientation now chosen."""
        trial = self._orientation
        if trial is None or trial.plan is self._described[-1][0]:
            return self._described
        assert self.program.flipped is not None
        return self._described[:-1] + ((trial.plan, self.program.flipped),)

    def execute(self, operands: Sequence[Any], out: Any, scalars: tuple, c: Any) -> Any:
        """Compute alpha * einsum + beta * c into ``out``; ``scalars`` is (alpha, beta)."""
        backend, dtype = self.backend, self._dtype
        alpha, beta = scalars
        arrays = [prep(backend, x, dtype) for prep, x in zip(self._operands, operands)]
        if not self._steps:
            if self._single_permute:
                self._final.execute(arrays[0], out, alpha)
            else:
                self._final.execute(arrays[0], out, alpha, beta, c)
            return out
        last = len(self._steps) - 1
        for index, (lhs, rhs, plan, extents) in enumerate(self._steps):
            b = arrays.pop(rhs)
            a = arrays.pop(lhs)
            if index == last:
                final = plan if self._orientation is None else self._orientation
                final.execute(a, b, out, alpha, beta, c)
            else:
                d = backend.empty(extents, dtype)
                plan.execute(a, b, d, 1, 0, None)
                arrays.append(d)
        return out


class StagePlan:
    """One permutation, reduction or element-wise problem with its operand preparation."""

    def __init__(
        self,
        backend: Backend,
        problem: PrimitiveProblem,
        options: Options,
        extra: Hashable,
        cache: PlanCache,
        preps: Sequence[OperandPrep],
        context: str,
    ) -> None:
        self.backend = backend
        self.problem = problem
        self.output: TensorSpec = (
            problem.d if not isinstance(problem, PermutationProblem) else problem.b
        )
        self.context = context
        self._dtype = self.output.dtype
        self._plan = primitive_plan(backend, problem, options, extra, cache)
        self._operands = tuple(_Operand(prep, None) for prep in preps)
        self.stages = (self._plan,)

    @property
    def route(self) -> str:
        """The primitive plan's route."""
        return str(self._plan.route)

    @property
    def reason(self) -> str:
        """Why the primitive plan runs as it does."""
        return in_caller_labels(str(self._plan.reason), self.problem)

    def execute(self, operands: Sequence[Any], out: Any, scalars: tuple, c: Any) -> Any:
        """Run the stage into ``out`` with the operation's scalars."""
        arrays = [prep(self.backend, x, self._dtype) for prep, x in zip(self._operands, operands)]
        problem, plan = self.problem, self._plan
        if isinstance(problem, PermutationProblem):
            plan.execute(arrays[0], out, scalars[0])
        elif isinstance(problem, ReductionProblem):
            plan.execute(arrays[0], out, scalars[0], scalars[1], c)
        elif problem.b is None:
            plan.execute(arrays[0], None, arrays[1], out, scalars[0], 1, scalars[1])
        else:
            plan.execute(arrays[0], arrays[1], arrays[2], out, *scalars)
        return out
