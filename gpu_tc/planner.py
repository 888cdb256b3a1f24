"""The composed plan of a bound call, from the programs level of the cache or built.

Each public operation keys its call (:mod:`gpu_tc.keys`), and on a miss builds the
program (:mod:`gpu_tc.program`) and composes it over the backend's primitive plans
(:mod:`gpu_tc.compose`), which the primitives level shares among equivalent calls.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from .cache import PLAN_CACHE
from .call import Call
from .compose import EinsumPlan, StagePlan
from .errors import ShapeError
from .expression import expand, parse
from .keys import ProgramKey
from .options import DEFAULT_OPTIONS, Options
from .problem import label_extents
from .program import build_program, stage_program, trace_program


def einsum_plan(
    call: Call, subscripts: str, options: Options | None, warm: bool = False
) -> EinsumPlan:
    """The cached plan of an einsum of ``call.operands``.

    Args:
        call: The bound call (its ``c``, if any, joins the key and the result dtype).
        subscripts: The expression.
        options: Plan options (None: the defaults).
        warm: Key the plan by the backend's warm key where it has one (einsum with a
            new result and default options: the key its warm path looks up).
    """
    parsed = parse(subscripts)
    options = DEFAULT_OPTIONS if options is None else options
    backend, operands = call.backend, call.operands
    every = operands if call.c is None else [*operands, call.c]
    extra = backend.key_extra(every, call.context)
    key: Hashable | None = backend.warm_key((subscripts, *operands)) if warm else None
    if key is None:
        key = ProgramKey(
            "einsum", parsed.canonical(), tuple(backend.layout_key(x) for x in every),
            call.out_key(), extra, options,
        )

    def build() -> EinsumPlan:
        expression = expand(parsed, tuple(len(backend.layout(x).shape) for x in operands))
        dtype = call.dtype(every)
        layouts = [backend.layout(x) for x in operands]
        extents = label_extents(expression, layouts)
        output = call.output_spec(
            expression.output, tuple(extents[x] for x in expression.output), dtype
        )
        strides = None if call.out is None else output.strides
        program = build_program(expression, layouts, dtype, strides)
        return EinsumPlan(program, backend, options, extra, PLAN_CACHE.primitives)

    return PLAN_CACHE.programs.get_or_build(key, build)


def stage_plan(
    call: Call, kind: str, subscripts: str, operators: dict[str, Any]
) -> StagePlan:
    """The cached plan of ``permute``, ``reduce`` or ``elementwise`` (``kind``).

    Args:
        call: The bound call.
        kind: The operation.
        subscripts: The expression.
        operators: The operator arguments by name, in the public function's order.
    """
    parsed = parse(subscripts)
    backend, operands = call.backend, call.operands
    extra = backend.key_extra(operands, call.context)
    key = ProgramKey(
        kind, parsed.canonical(), call.layout_keys(), call.out_key(), extra, DEFAULT_OPTIONS,
        tuple(operators.values()),
    )

    def build() -> StagePlan:
        layouts = [backend.layout(x) for x in operands]
        expression = expand(parsed, tuple(len(x.shape) for x in layouts))
        dtype = call.dtype()
        extents = label_extents(expression, layouts)
        output = call.output_spec(
            expression.output, tuple(extents[x] for x in expression.output), dtype
        )
        program = stage_program(kind, expression, layouts, output, operators, call.context)
        return StagePlan(program, backend, DEFAULT_OPTIONS, extra, PLAN_CACHE.primitives,
                         call.context)

    return PLAN_CACHE.programs.get_or_build(key, build)


def trace_plan(call: Call, axis1: Any, axis2: Any) -> StagePlan:
    """The cached plan of ``trace(a, axis1, axis2)``.

    Raises:
        ShapeError: an axis is out of range, or both are the same axis.
    """
    backend = call.backend
    (a,) = call.operands
    layout = backend.layout(a)
    ndim = len(layout.shape)
    axes = []
    for name, axis in (("axis1", axis1), ("axis2", axis2)):
        if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
            raise ShapeError(f"{name}={axis!r} is out of range for rank {ndim} in {call.context}")
        axes.append(int(axis) % ndim)
    if axes[0] == axes[1]:
        raise ShapeError(f"axis1 and axis2 are both axis {axes[0]} in {call.context}")
    dtype = call.dtype()
    extra: Hashable = backend.key_extra([a], call.context)
    key = ProgramKey(
        "trace", "", call.layout_keys(), call.out_key(), extra, DEFAULT_OPTIONS, tuple(axes)
    )

    def build() -> StagePlan:
        program = trace_program(
            layout, (axes[0], axes[1]), dtype,
            lambda labels, extents: call.output_spec(labels, extents, dtype),
        )
        return StagePlan(program, backend, DEFAULT_OPTIONS, extra, PLAN_CACHE.primitives,
                         call.context)

    return PLAN_CACHE.programs.get_or_build(key, build)
