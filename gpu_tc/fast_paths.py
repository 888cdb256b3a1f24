"""The warm functions of composed plans (``fast``): a call into a new result, unscaled,
as one or a few backend calls with nothing of the plan's own between them: an
operand's own diagonal and transpose views, a chain of small contractions' ``fresh``
calls, and backend.finish where the result has no axis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .backend import Backend
from .problem import TensorSpec
from .program import OperandPrep


def own_view(calls: tuple[tuple[int, int], ...], order: tuple[int, ...] | None) -> Any:
    """``f(x)``: the view of ``x`` that its own ``diagonal()`` ``calls``, then a transpose
    by ``order``, take (program.view_calls); None where there are none."""
    if not calls:
        return None if order is None else lambda x: x.transpose(order)
    if len(calls) == 1:  # one diagonal: no loop (a warm call's whole budget is ~1 us)
        first, second = calls[0]
        if order is None:
            return lambda x: x.diagonal(0, first, second)
        return lambda x: x.diagonal(0, first, second).transpose(order)

    def take(x: Any) -> Any:
        for first, second in calls:
            x = x.diagonal(0, first, second)
        return x if order is None else x.transpose(order)

    return take


def operand_view(backend: Backend, prep: OperandPrep) -> Any:
    """``f(x)``: the view ``prep`` takes of its operand, by the array's own calls
    (:func:`own_view`) where they take it, else by the backend's viewer bound to the
    operand's layout; None where it takes none."""
    take = own_view(prep.diagonals, prep.order)
    if take is None and prep.view is not None:
        take = backend.viewer(prep.source, prep.view, start=prep.start)
    return take


def viewed(backend: Backend, prep: OperandPrep, fresh: Any, output: TensorSpec,
           scalar: bool = False) -> Any:
    """``fresh`` applied to the view ``prep`` takes of its operand (a diagonal: a trace),
    finished as :func:`finished` does (a trace to a scalar in one frame)."""
    if prep.cast or prep.reduction is not None:
        return None
    if prep.view is None:
        return finished(backend, fresh, output, scalar)
    if prep.diagonals == ((0, 1),) and prep.order is None:  # a trace
        if output.extents or scalar:
            return lambda x: fresh(x.diagonal())
        finish = backend.finish
        return lambda x: finish(fresh(x.diagonal()))
    take = operand_view(backend, prep)
    return finished(backend, lambda x: fresh(take(x)), output, scalar)


def finished(backend: Backend, fast: Any, output: TensorSpec, scalar: bool = False) -> Any:
    """``fast`` whose result the caller gets as it is: with backend.finish (a scalar
    for a 0-d result) where the result has no axis, unless ``scalar`` (``fast`` returns
    that scalar itself)."""
    if fast is None or output.extents or scalar:
        return fast
    finish = backend.finish
    return lambda *operands: finish(fast(*operands))


def chained(steps: Sequence[tuple[int, int, Callable[..., Any] | None]]) -> Any:
    """The steps' warm fast paths (lhs, rhs, fresh call) run in turn, each result fed to
    the next step (a chain of contractions without execute()); None unless every step
    has one.

    The steps' list positions (each step pops its two operands and appends its result)
    become fixed indexes at plan time: a call appends each result and reads by index."""
    count = len(steps) + 1  # the chain's operands
    slots = list(range(count))  # the list of arrays, as indexes of ``values``
    calls: list[tuple[int, int, Callable[..., Any]]] = []
    for lhs, rhs, fresh in steps:
        if fresh is None:
            return None
        b = slots.pop(rhs)
        calls.append((slots.pop(lhs), b, fresh))
        slots.append(count + len(calls) - 1)  # where the step's result will be
    if len(calls) == 1:
        return calls[0][2]
    if len(calls) == 2 and calls[1][1] == count:  # three operands (the commonest chain):
        # the second step takes the operand left and the first step's result, in order
        (a, b, first), (left, _, second) = calls

        def two_steps(*operands: Any) -> Any:
            return second(operands[left], first(operands[a], operands[b]))

        return two_steps

    def chained(*operands: Any) -> Any:
        values: list[Any] = list(operands)
        for a, b, fresh in calls:
            values.append(fresh(values[a], values[b]))
            values[a] = values[b] = None  # each intermediate freed once used, as in execute()
        return values[-1]

    return chained
