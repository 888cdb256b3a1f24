"""The public operations. Each binds its call (:mod:`gpu_tc.call`), fetches or builds
its plan (:mod:`gpu_tc.planner`) and runs it (:mod:`gpu_tc.run`).

Example:
    >>> import numpy as np, gpu_tc
    >>> a, b = np.ones((2, 3)), np.ones((3, 4))
    >>> gpu_tc.einsum("ij,jk->ik", a, b)[0, 0]
    np.float64(3.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import warm
from .backend import UNSCALED, backend_of_type
from .cache import PLAN_CACHE
from .call import (
    Call,
    any_dask,
    bind,
    check_addend_shape,
    check_operators,
    check_out,
    checked_scalars,
    split_args,
)
from .compose import EinsumPlan
from .dtypes import checked_casting
from .errors import ExpressionError, OperandError, OptionsError, OptionsTypeError
from .expression import parse
from .options import BinaryOp, Options, ReduceOp, UnaryOp, check_options
from .pairwise import path_choice
from .plan import Plan
from .planner import einsum_plan, reduce_warm_key, stage_plan, trace_plan, trace_warm_key
from .run import run


@warm.front(PLAN_CACHE.programs)
def einsum(
    *args: Any,
    out: Any = None,
    dtype: Any = None,
    order: str = "K",
    casting: str = "safe",
    optimize: Any = False,
    options: Options | None = None,
) -> Any:
    """Evaluate an einsum expression, as numpy.einsum does, on NumPy or CuPy arrays.

    Accepts explicit and implicit outputs, "...", repeated labels (diagonals,
    traces), labels summed out of one operand, 0-d operands, size-1 and zero-size
    axes, any number of operands, and numpy's interleaved form
    ``einsum(op0, sublist0, op1, sublist1, ..., [sublist_out])``. Operands are
    contracted two at a time (GEMM-like), in the order ``optimize`` chooses.

    Args:
        *args: The subscripts string then the operands, or the interleaved form.
        out: Where to write the result: of its shape, and of a dtype the result casts
            into under ``casting``.
        dtype: Compute in this dtype (every operand must cast into it under
            ``casting``); default: numpy's result type of the operands (and ``out``).
        order: The layout of a new result: "C", "F", "A" (F when every operand is
            Fortran-ordered) or "K" (the layout the last contraction writes best).
        casting: numpy's casting rule for the operands and ``out``.
        optimize: The pairwise order: False (opt_einsum's "auto"), True or "greedy",
            "optimal", any opt_einsum path name, ``(name, memory_limit)``, or an
            explicit path as numpy.einsum_path returns it.
        options: Plan options (part of the cache key).

    Returns:
        The result, of numpy's result dtype and shape (``out`` when given).

    Raises:
        ExpressionError, ShapeError, DTypeError, OutputError, OperandError,
        OptionsError, PathError.

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.einsum("ii", np.eye(3))
        np.float64(3.0)
    """
    plain = dtype is None and optimize is False and order == "K" and casting == "safe"
    if plain and out is None and options is None and len(args) > 1 and type(args[0]) is str:
        # The warm path: a backend's flat key of the arrays, a plan already built.
        backend = backend_of_type(type(args[1]))
        if backend is not None:
            key = backend.warm_key(args)
            plan = None if key is None else PLAN_CACHE.programs.peek(key)
            if plan is not None:
                fast = plan.fast
                if fast is not None:  # run()'s own first branch, one call fewer
                    return fast(*args[1:])
                return run(plan, backend, args[1:], None, UNSCALED, None)
    subscripts, operands = split_args(args)
    check_options(options, f"einsum({subscripts!r})")
    if any_dask(operands):
        return _dask_einsum(subscripts, operands, out, dtype=dtype, order=order,
                            casting=casting, optimize=optimize, options=options)
    call = bind(operands, out, f"einsum({subscripts!r})")
    plan = _keyword_plan(call, subscripts, options, dtype, order, casting, optimize,
                         warm=plain and out is None and options is None)
    return run(plan, call.backend, call.operands, out, UNSCALED, None)


def _dask_einsum(subscripts: str, operands: list[Any], out: Any, **keywords: Any) -> Any:
    """einsum on dask operands: a lazy dask array (gpu_tc.distributed.arrays); the
    keywords left at einsum's defaults are not passed to the block tasks."""
    from .distributed.arrays import lazy_einsum

    defaults = {"dtype": None, "order": "K", "casting": "safe", "optimize": False,
                "options": None}
    chosen = {k: v for k, v in keywords.items() if v is not defaults[k] and v != defaults[k]}
    options = chosen.get("options")
    accumulate = options is not None and options.chunk_sums == "accumulate"
    return lazy_einsum(einsum, subscripts, operands, out=out, accumulate=accumulate,
                       accumulate_with=contract, **chosen)


def contract(
    subscripts: str,
    a: Any,
    b: Any,
    *,
    alpha: complex = 1,
    beta: complex = 0,
    c: Any = None,
    out: Any = None,
    options: Options | None = None,
) -> Any:
    """D = alpha * einsum(subscripts, a, b) + beta * c.

    Args:
        subscripts: Two terms, e.g. ``"abcd,dbea->ec"``.
        a, b: The operands.
        alpha, beta: Scalars; complex values need a complex result dtype. As in BLAS's
            gemm, A and B count only where ``alpha != 0`` and c only where
            ``beta != 0``: an inf or nan there is not seen (numpy's ``0 * inf`` is nan).
        c: Added when ``beta != 0``; the result's shape. May be ``out`` itself.
        out: Where to write D.

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.contract("ij,jk->ik", np.eye(2), np.eye(2), alpha=2, beta=1,
        ...                 c=np.ones((2, 2))).tolist()
        [[3.0, 1.0], [1.0, 3.0]]
    """
    if len(parse(subscripts).terms) != 2:
        raise ExpressionError(f"contract takes exactly two terms, got {subscripts!r}")
    if beta != 0 and c is None:
        raise OperandError(f"beta={beta!r} needs c in contract({subscripts!r})")
    context = f"contract({subscripts!r})"
    check_options(options, context)
    if any_dask([a, b, c]):
        result = _dask_einsum(subscripts, [a, b], out, options=options)
        scalars = checked_scalars(subscripts, result.dtype.char, alpha=alpha, beta=beta)
        if scalars.alpha == 0:  # as on NumPy operands: A and B do not count
            result = result.map_blocks(np.zeros_like, dtype=result.dtype)
        elif scalars.alpha != 1:
            result = result * scalars.alpha
        if scalars.beta == 0:
            return result
        check_addend_shape(np.shape(c), result.shape, context)
        return result + scalars.beta * c
    call = bind([a, b], out, context, c if beta != 0 else None)
    plan = einsum_plan(call, subscripts, options)
    addend = call.addend(plan.program.output)
    scalars = checked_scalars(subscripts, plan.program.dtype, alpha=alpha, beta=beta)
    return run(plan, call.backend, call.operands, out, scalars, addend)


def permute(
    subscripts: str,
    a: Any,
    *,
    alpha: complex = 1,
    op_a: UnaryOp = UnaryOp.IDENTITY,
    out: Any = None,
) -> Any:
    """B = alpha * op_a(A) with B's axes reordered, e.g. ``permute("abcd->dcba", a)``.

    Every label of ``a`` must appear in the output (a repeated label takes a diagonal).
    """
    context = f"permute({subscripts!r})"
    check_operators({"op_a": (UnaryOp, op_a)}, context)
    call = bind([a], out, context)
    plan = stage_plan(call, "permute", subscripts, {"op_a": op_a})
    scalars = checked_scalars(subscripts, plan.output.dtype, alpha=alpha)
    return run(plan, call.backend, call.operands, out, scalars, None)


def reduce(
    subscripts: str,
    a: Any,
    *,
    op: ReduceOp = ReduceOp.SUM,
    alpha: complex = 1,
    beta: complex = 0,
    c: Any = None,
    op_a: UnaryOp = UnaryOp.IDENTITY,
    out: Any = None,
) -> Any:
    """D = alpha * op-reduce(op_a(A)) + beta * C over the labels missing from the output.

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.reduce("ij->j", np.arange(6.0).reshape(2, 3), op=gpu_tc.ReduceOp.MAX).tolist()
        [3.0, 4.0, 5.0]
    """
    # The warm path (a new result, unscaled): a backend's flat key, a plan already built.
    warm = (out is None and c is None and type(alpha) is int and alpha == 1
            and type(beta) is int and beta == 0)
    backend = backend_of_type(type(a)) if warm else None
    key = None
    if backend is not None:
        key = reduce_warm_key(backend, subscripts, a, op, op_a)
        plan = None if key is None else PLAN_CACHE.programs.peek(key)
        if plan is not None:
            return run(plan, backend, (a,), None, UNSCALED, None)
    if beta != 0 and c is None:
        raise OperandError(f"beta={beta!r} needs c in reduce({subscripts!r})")
    context = f"reduce({subscripts!r})"
    check_operators({"op": (ReduceOp, op), "op_a": (UnaryOp, op_a)}, context)
    call = bind([a], out, context, c if beta else None)
    plan = stage_plan(call, "reduce", subscripts, {"op": op, "op_a": op_a}, key)
    scalars = checked_scalars(subscripts, plan.output.dtype, alpha=alpha, beta=beta)
    addend = call.addend(plan.output)
    return run(plan, call.backend, call.operands, out, scalars, addend)


def elementwise_binary(
    subscripts: str,
    a: Any,
    c: Any,
    *,
    alpha: complex = 1,
    gamma: complex = 1,
    op: BinaryOp = BinaryOp.ADD,
    op_a: UnaryOp = UnaryOp.IDENTITY,
    op_c: UnaryOp = UnaryOp.IDENTITY,
    out: Any = None,
) -> Any:
    """D = op(alpha * op_a(A), gamma * op_c(C)), broadcasting over labels an operand lacks.

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.elementwise_binary("ij,ji->ij", np.ones((2, 2)), np.eye(2), gamma=3).tolist()
        [[4.0, 1.0], [1.0, 4.0]]
    """
    context = f"elementwise({subscripts!r})"
    operators = {"op_a": (UnaryOp, op_a), "op_c": (UnaryOp, op_c), "op": (BinaryOp, op)}
    check_operators(operators, context)
    call = bind([a, c], out, context)
    plan = stage_plan(call, "elementwise", subscripts, {k: v for k, (_, v) in operators.items()})
    scalars = checked_scalars(subscripts, plan.output.dtype, alpha=alpha, gamma=gamma)
    return run(plan, call.backend, call.operands, out, scalars, None)


def elementwise_trinary(
    subscripts: str,
    a: Any,
    b: Any,
    c: Any,
    *,
    alpha: complex = 1,
    beta: complex = 1,
    gamma: complex = 1,
    op_ab: BinaryOp = BinaryOp.ADD,
    op_abc: BinaryOp = BinaryOp.ADD,
    op_a: UnaryOp = UnaryOp.IDENTITY,
    op_b: UnaryOp = UnaryOp.IDENTITY,
    op_c: UnaryOp = UnaryOp.IDENTITY,
    out: Any = None,
) -> Any:
    """D = op_abc(op_ab(alpha * op_a(A), beta * op_b(B)), gamma * op_c(C)), broadcasting."""
    context = f"elementwise({subscripts!r})"
    operators = {
        "op_a": (UnaryOp, op_a),
        "op_b": (UnaryOp, op_b),
        "op_c": (UnaryOp, op_c),
        "op_ab": (BinaryOp, op_ab),
        "op_abc": (BinaryOp, op_abc),
    }
    check_operators(operators, context)
    call = bind([a, b, c], out, context)
    plan = stage_plan(call, "elementwise", subscripts, {k: v for k, (_, v) in operators.items()})
    scalars = checked_scalars(subscripts, plan.output.dtype, alpha=alpha, beta=beta, gamma=gamma)
    return run(plan, call.backend, call.operands, out, scalars, None)


def trace(
    a: Any, offset: Any = 0, axis1: Any = 0, axis2: Any = 1, dtype: Any = None, out: Any = None
) -> Any:
    """The sum along a diagonal of axes ``axis1`` and ``axis2``, as numpy.trace.

    The diagonal is entries (i, i + offset): above the main one for offset > 0, below
    it for offset < 0; past either edge it is empty and the sum 0. A strided view of it
    (stride = the two axes' strides added) is reduced: O(n) reads and no copy of ``a``.
    As numpy.sum, bool and small integers sum in the platform integer unless ``dtype``
    says otherwise; ``out`` takes the result cast as numpy.trace casts it ("unsafe").

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.trace(np.arange(9.0).reshape(3, 3))
        np.float64(12.0)
        >>> gpu_tc.trace(np.arange(9.0).reshape(3, 3), 1)
        np.float64(6.0)
    """
    warm = out is None and dtype is None
    if warm:  # the warm path: a backend's flat key, a plan already built
        backend = backend_of_type(type(a))
        if backend is not None:
            key = trace_warm_key(backend, a, offset, axis1, axis2)
            plan = None if key is None else PLAN_CACHE.programs.peek(key)
            if plan is not None:
                return run(plan, backend, (a,), None, UNSCALED, None)
    call = bind([a], None, "trace")
    ndim = len(call.backend.layout(call.operands[0]).shape)
    call.context = (
        f"trace(offset={offset!r}, axis1={axis1!r}, axis2={axis2!r}) of a rank-{ndim} operand"
    )
    if out is not None:
        check_out(call.backend, out, call.context)
        call.out = out
    plan = trace_plan(call, offset, axis1, axis2, dtype, warm=warm)
    return run(plan, call.backend, call.operands, out, UNSCALED, None)


def prepare(
    *args: Any,
    out: Any = None,
    dtype: Any = None,
    order: str = "K",
    casting: str = "safe",
    optimize: Any = False,
    options: Options | None = None,
) -> Plan:
    """Build (or fetch) the plan of an einsum and hold it; the keywords are einsum's.

    The plan accepts operands of the same shapes, strides and dtypes as these.

    Example:
        >>> import numpy as np, gpu_tc
        >>> a = np.ones((4, 4))
        >>> with gpu_tc.prepare("ij,jk->ik", a, a) as plan:
        ...     plan.execute(a, a)[0, 0]
        np.float64(4.0)
    """
    subscripts, operands = split_args(args)
    check_options(options, f"prepare({subscripts!r})")
    call = bind(operands, out, f"prepare({subscripts!r})")
    plan = _keyword_plan(call, subscripts, options, dtype, order, casting, optimize)
    layouts = [call.backend.layout(x) for x in call.operands]

    def plan_for(other: Call) -> EinsumPlan:
        return _keyword_plan(other, subscripts, options, dtype, order, casting, optimize)

    overlaps = out is not None and any(call.backend.overlaps(out, x) for x in call.operands)
    return Plan(subscripts, plan, call.backend, layouts, out, plan_for, overlaps)


def _keyword_plan(
    call: Call, subscripts: str, options: Options | None, dtype: Any, order: Any,
    casting: Any, optimize: Any, warm: bool = False,
) -> EinsumPlan:
    """The einsum plan for numpy.einsum's keywords, each checked first."""
    order = _checked_order(order)
    return einsum_plan(
        call, subscripts, options, dtype=dtype, casting=checked_casting(casting), order=order,
        path=path_choice(optimize), warm=warm,
    )


def _checked_order(order: Any) -> str:
    """numpy's ``order`` for a new result, as "C", "F", "A" or "K" (any case; None is
    "K", as in numpy).

    Raises:
        OptionsTypeError: not a str (a TypeError, as in numpy).
        OptionsError: another str (a ValueError, as in numpy).
    """
    if order is None:
        return "K"
    if not isinstance(order, str):
        raise OptionsTypeError(f"order must be str, not {type(order).__name__}")
    if order.upper() not in ("C", "F", "A", "K"):
        raise OptionsError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    return order.upper()
