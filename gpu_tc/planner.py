"""The composed plan of a bound call, from the programs level of the cache or built.

Each public operation keys its call (:mod:`gpu_tc.keys`), and on a miss builds the
program (:mod:`gpu_tc.program`) and composes it over the backend's primitive plans
(:mod:`gpu_tc.compose`), which the primitives level shares among equivalent calls.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable
from typing import Any

import numpy as np

from .backend import Backend
from .cache import PLAN_CACHE
from .call import Call
from .compose import EinsumPlan, StagePlan
from .dtypes import Casting, sum_promotion
from .errors import AxisError, OptionsTypeError, ShapeError
from .expression import expand, parse
from .keys import ProgramKey
from .options import DEFAULT_OPTIONS, Options, ReduceOp, UnaryOp
from .pairwise import DEFAULT, PathChoice
from .problem import OperandLayout, label_extents
from .program import build_program, stage_program, trace_program


def einsum_plan(
    call: Call,
    subscripts: str,
    options: Options | None,
    *,
    dtype: Any = None,
    casting: Casting = "safe",
    order: str = "K",
    path: PathChoice = DEFAULT,
    warm: bool = False,
) -> EinsumPlan:
    """The cached plan of an einsum of ``call.operands``.

    Args:
        call: The bound call (its ``c``, if any, joins the key and the result dtype).
        subscripts: The expression.
        options: Plan options (None: the defaults).
        dtype, casting, order: numpy.einsum's keywords (checked by the caller).
        path: The pairwise order (see :func:`gpu_tc.pairwise.path_choice`).
        warm: Key the plan by the backend's warm key where it has one (einsum with a
            new result and every keyword at its default: the key its warm path looks up).
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
            call.out_key(), extra, options, (dtype, casting, order, path),
        )

    def build() -> EinsumPlan:
        layouts = [backend.layout(x) for x in operands]
        expression = expand(parsed, tuple(len(x.shape) for x in layouts))
        dtypes = call.dtypes(every, dtype=dtype, casting=casting)
        extents = label_extents(expression, layouts)
        layout_order = _order(order, layouts)
        output = call.output_spec(
            expression.output, tuple(extents[x] for x in expression.output), dtypes.compute,
            layout_order,
        )
        natural = call.out is None and order == "K"
        program = build_program(
            expression, layouts, dtypes.compute, None if natural else output.strides,
            _limited(path, options, dtypes.compute),
        )
        return EinsumPlan(program, backend, options, extra, PLAN_CACHE.primitives,
                          dtypes.result)

    return PLAN_CACHE.programs.get_or_build(key, build)


def _limited(path: PathChoice, options: Options, dtype: str) -> PathChoice:
    """A named path search bounded, as opt_einsum's searches take it, to intermediates
    of ``options.memory_limit`` bytes (in elements); other choices as they are."""
    if options.memory_limit is None or not isinstance(path, str):
        return path
    return (path, max(1, options.memory_limit // np.dtype(dtype).itemsize))


def _order(order: str, layouts: list[OperandLayout]) -> str:
    """numpy's ``order`` as "C" or "F" for a new result ("A": F when every operand is
    Fortran-contiguous; "K": C where a layout must be named)."""
    if order == "F" or (order == "A" and layouts and all(_fortran(x) for x in layouts)):
        return "F"
    return "C"


def _fortran(layout: OperandLayout) -> bool:
    step = 1
    for extent, stride in zip(layout.shape, layout.strides):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def stage_plan(
    call: Call, kind: str, subscripts: str, operators: dict[str, Any],
    warm_key: Hashable | None = None,
) -> StagePlan:
    """The cached plan of ``permute``, ``reduce`` or ``elementwise`` (``kind``).

    Args:
        call: The bound call.
        kind: The operation.
        subscripts: The expression.
        operators: The operator arguments by name, in the public function's order.
        warm_key: Key the plan by this (a backend's warm key, see
            :func:`reduce_warm_key`) in place of its canonical key.
    """
    parsed = parse(subscripts)
    backend, operands = call.backend, call.operands
    extra = backend.key_extra(operands, call.context)
    key: Hashable = warm_key if warm_key is not None else ProgramKey(
        kind, parsed.canonical(), call.layout_keys(), call.out_key(), extra, DEFAULT_OPTIONS,
        tuple(operators.values()),
    )

    def build() -> StagePlan:
        layouts = [backend.layout(x) for x in operands]
        expression = expand(parsed, tuple(len(x.shape) for x in layouts))
        dtypes = call.dtypes()
        extents = label_extents(expression, layouts)
        output = call.output_spec(
            expression.output, tuple(extents[x] for x in expression.output), dtypes.compute
        )
        program = stage_program(kind, expression, layouts, output, operators, call.context)
        return StagePlan(program, backend, DEFAULT_OPTIONS, extra, PLAN_CACHE.primitives,
                         call.context, dtypes.result)

    return PLAN_CACHE.programs.get_or_build(key, build)


def trace_plan(
    call: Call, offset: Any, axis1: Any, axis2: Any, dtype: Any, warm: bool = False
) -> StagePlan:
    """The cached plan of ``trace(a, offset, axis1, axis2, dtype)``, numpy.trace's rules:
    the diagonal ``offset`` places above (below, when negative) the main one, summed
    as numpy.sum sums (small integers and bool widen to the platform integer). With
    ``warm`` (a new result, no dtype) it is keyed by the backend's warm key of
    :func:`trace_warm_key` where the backend has one.

    Raises:
        AxisError: an axis is out of range.
        ShapeError: both axes are the same axis.
        OptionsTypeError: ``offset`` or an axis is not an integer.
    """
    backend = call.backend
    (a,) = call.operands
    layout = backend.layout(a)
    ndim = len(layout.shape)
    diagonal = _integer("offset", offset, call.context)
    axes = []
    for name, axis in (("axis1", axis1), ("axis2", axis2)):
        index = _integer(name, axis, call.context)
        if not -ndim <= index < ndim:
            raise AxisError(f"{name}={axis!r} is out of range for rank {ndim} in {call.context}")
        axes.append(index % ndim)
    if axes[0] == axes[1]:
        raise ShapeError(f"axis1 and axis2 are both axis {axes[0]} in {call.context}")
    extra: Hashable = backend.key_extra([a], call.context)
    key: Hashable | None = trace_warm_key(backend, a, offset, axis1, axis2) if warm else None
    if key is None:
        key = ProgramKey(
            "trace", "", call.layout_keys(), call.out_key(), extra, DEFAULT_OPTIONS,
            (diagonal, *axes, dtype),
        )

    def build() -> StagePlan:
        dtypes = call.dtypes(dtype=dtype, casting="unsafe", promote=sum_promotion)
        program = trace_program(
            layout, diagonal, (axes[0], axes[1]), dtypes.compute,
            lambda labels, extents: call.output_spec(labels, extents, dtypes.compute),
        )
        return StagePlan(program, backend, DEFAULT_OPTIONS, extra, PLAN_CACHE.primitives,
                         call.context, dtypes.result)

    return PLAN_CACHE.programs.get_or_build(key, build)


def reduce_warm_key(backend: Backend, subscripts: Any, a: Any, op: Any, op_a: Any) -> Hashable:
    """The backend's flat key of ``reduce(subscripts, a, op=op, op_a=op_a)`` into a new
    result with alpha 1 and beta 0 (None where the backend has none, or an argument is
    not of its plain type)."""
    if type(subscripts) is not str or type(op) is not ReduceOp or type(op_a) is not UnaryOp:
        return None
    return backend.warm_key((("reduce", subscripts, op, op_a), a))


def trace_warm_key(backend: Backend, a: Any, offset: Any, axis1: Any, axis2: Any) -> Hashable:
    """The backend's flat key of ``trace(a, offset, axis1, axis2)`` into a new result
    (None where the backend has none, or an argument is not a plain int)."""
    if type(offset) is not int or type(axis1) is not int or type(axis2) is not int:
        return None
    return backend.warm_key((("trace", offset, axis1, axis2), a))


def _integer(name: str, value: Any, context: str) -> int:
    """``value`` as an int (Python or NumPy integers only, as numpy takes axes).

    Raises:
        OptionsTypeError: it is not an integer (a TypeError, as in numpy).
    """
    try:
        return operator.index(value)
    except TypeError:
        raise OptionsTypeError(f"{name}={value!r} is not an integer in {context}") from None
