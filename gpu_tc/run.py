"""Execute a composed plan into ``out``, a new result, or through a temporary.

A plan writes exactly the output layout it was built for (a GEMM's leading dimension
or a cuTENSOR descriptor has the strides built in) in its compute dtype, so an ``out``
the plan cannot write in place (it overlaps an operand, has other strides or another
dtype) gets the result through a temporary laid out as the plan's output, then a copy
that casts; so does a new result of another dtype than the compute dtype (float16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from .backend import UNSCALED, Backend, Scalars
from .errors import MemoryLimitError
from .memory import nbytes
from .problem import TensorSpec
from .strides import same_layout


class Composed(Protocol):
    """What :func:`run` needs of a composed plan (EinsumPlan, StagePlan)."""

    fast: Any  # f(*operands): a new result as callers get it (finished); or None
    result: np.dtype[Any]  # the dtype the caller gets
    converts: bool  # whether it differs from the output's (compute) dtype
    temporary_bytes: int  # the plan's own peak (gpu_tc.memory)
    memory_limit: int | None
    context: str  # names the call in messages

    @property
    def output(self) -> TensorSpec:
        """The layout the plan writes."""

    def execute(self, operands: Sequence[Any], out: Any, scalars: Scalars, addend: Any) -> Any: ...


@lru_cache(maxsize=1024)
def dense_allocation(spec: TensorSpec) -> tuple[tuple[int, ...], tuple[int, ...] | None] | None:
    """For a ``spec`` dense in some axis order: (its extents in that order, outermost
    first; the transpose back to ``spec``'s axis order, or None when it is that order).
    None when its strides leave gaps or run backwards."""
    order = tuple(sorted(range(len(spec.extents)), key=lambda i: -spec.strides[i]))
    step = 1
    for i in reversed(order):
        if spec.extents[i] != 1 and spec.strides[i] != step:
            return None
        step *= spec.extents[i]
    if order == tuple(range(len(order))):
        return spec.extents, None
    return tuple(spec.extents[i] for i in order), tuple(order.index(i) for i in range(len(order)))


def allocate(backend: Backend, spec: TensorSpec) -> Any:
    """A new array laid out exactly as ``spec``: dense in its axis order, or, when its
    strides leave gaps or run backwards (a plan made for an ``out`` that is a window),
    a view of a buffer spanning them."""
    dense = dense_allocation(spec)
    if dense is not None:
        extents, axes = dense
        array = backend.empty(extents, spec.dtype)
        return array if axes is None else array.transpose(axes)
    if 0 in spec.extents:
        return backend.empty(spec.extents, spec.dtype)
    low = sum((e - 1) * s for e, s in zip(spec.extents, spec.strides) if s < 0)
    high = sum((e - 1) * s for e, s in zip(spec.extents, spec.strides) if s > 0)
    buffer = backend.empty((high - low + 1,), spec.dtype)
    return backend.view(buffer[-low:], spec, writable=True)


def check_room(plan: Composed, extra: int, what: str) -> None:
    """Raise MemoryLimitError where ``extra`` bytes of copies (``what``) and the plan's
    own temporaries exceed its ``memory_limit``."""
    need = plan.temporary_bytes + extra
    if plan.memory_limit is not None and need > plan.memory_limit:
        raise MemoryLimitError(
            f"{plan.context}: {what} takes {need} bytes of temporaries with the plan's own, "
            f"above memory_limit={plan.memory_limit} bytes",
            need,
        )


ASIDE = "out cannot take the result in place, and the result aside"


def run(
    plan: Composed,
    backend: Backend,
    operands: Sequence[Any],
    out: Any,
    scalars: Scalars,
    addend: Any,
) -> Any:
    """Execute ``plan`` into ``out`` (checked by the call) or into a new result.

    ``addend`` (C, of the result's shape) is copied in the compute dtype where its dtype
    differs or ``out`` overlaps it (``out`` itself is read in place); such copies and a
    result set aside count against the plan's ``memory_limit``.

    Raises:
        MemoryLimitError: those copies do not fit, before any work.

    Returns:
        ``out``, or the new result as the backend hands it to callers.
    """
    if out is None:
        if scalars is UNSCALED and addend is None:
            if plan.fast is not None:
                return plan.fast(*operands)
        if addend is not None:
            addend = _addend_as_read(plan, backend, addend, None, aside=False)
        result = allocate(backend, plan.output)
        plan.execute(operands, result, scalars, addend)
        if plan.converts:
            work, result = result, allocate(backend, replace(plan.output, dtype=plan.result.char))
            backend.copy_into(work, result)
        return backend.finish(result)
    aside = (
        plan.converts
        or not same_layout(plan.output, backend.layout(out).strides)
        or any(backend.overlaps(out, x) for x in operands)
    )
    if addend is not None:
        addend = _addend_as_read(plan, backend, addend, out, aside)
    if not aside:
        plan.execute(operands, out, scalars, addend)
        return out
    check_room(plan, nbytes(plan.output), ASIDE)
    result = allocate(backend, plan.output)
    if addend is out:
        backend.copy_into(out, result)
        addend = result
    plan.execute(operands, result, scalars, addend)
    backend.copy_into(result, out)
    return out


def _addend_as_read(plan: Composed, backend: Backend, addend: Any, out: Any,
                    aside: bool) -> Any:
    """``addend`` (not None) as the plan reads it: itself, or a copy in the compute dtype where
    its dtype differs or ``out`` (not ``addend`` itself) overlaps it, checked against
    ``memory_limit`` with a result set aside."""
    if addend is out:
        return addend
    copy = backend.dtype(addend) != plan.output.dtype or (
        out is not None and backend.overlaps(out, addend))
    if not copy:
        return addend
    what = f"a copy of c in {np.dtype(plan.output.dtype)}"
    check_room(plan, nbytes(plan.output) * (2 if aside else 1),
               what + " and the result aside" if aside else what)
    return backend.cast(addend, plan.output.dtype)
