"""The public operations: each chains parse -> problem -> backend -> cache -> execute.

Example:
    >>> import numpy as np, gpu_tc
    >>> a, b = np.ones((2, 3)), np.ones((3, 4))
    >>> gpu_tc.einsum("ij,jk->ik", a, b)[0, 0]
    np.float64(3.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .backend import Backend, select_backend
from .cache import PLAN_CACHE
from .composite import EinsumPlan, StagePlan, allocate
from .errors import DTypeError, ExpressionError, OperandError, OutputError, ShapeError
from .expression import expand, from_interleaved, parse, show_label, symbol
from .operators import check_op
from .options import DEFAULT_OPTIONS, BinaryOp, Options, ReduceOp, UnaryOp
from .paths import OperandPrep, build_program, prepare_operand
from .plan import Plan
from .problem import (
    ElementwiseProblem,
    OperandLayout,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
    contiguous_spec,
    label_extents,
)
from .strides import elements_overlap

COMPUTE_DTYPES = "fdFD"  # float32, float64, complex64, complex128
_CASTABLE_KINDS = "biufc"


def einsum(*args: Any, out: Any = None, options: Options | None = None) -> Any:
    """Evaluate an einsum expression, as numpy.einsum does, on NumPy or CuPy arrays.

    Accepts explicit and implicit outputs, "...", repeated labels (diagonals,
    traces), labels summed out of one operand, 0-d operands, size-1 and zero-size
    axes, any number of operands, and numpy's interleaved form
    ``einsum(op0, sublist0, op1, sublist1, ..., [sublist_out])``.

    Args:
        *args: The subscripts string then the operands, or the interleaved form.
        out: An array of the result's shape and dtype to write into.
        options: Plan options (part of the cache key).

    Returns:
        The result, of numpy's result dtype and shape (``out`` when given).

    Raises:
        ExpressionError, ShapeError, DTypeError, OutputError, OperandError.

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.einsum("ii", np.eye(3))
        np.float64(3.0)
    """
    if out is None and options is None and args and type(args[0]) is str:
        # The warm path of the most common calls: NumPy arrays, a new result.
        if len(args) == 3 and type(args[1]) is np.ndarray and type(args[2]) is np.ndarray:
            subscripts, a, b = args  # _flat_key(args) inlined: this path is a few microseconds
            plan = PLAN_CACHE.peek(
                (subscripts, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype)
            )
            if plan is not None and plan.fast is not None:
                result = plan.fast(a, b)
                return result[()] if result.ndim == 0 else result
        else:
            key = _flat_key(args)
            plan = None if key is None else PLAN_CACHE.peek(key)
        if plan is not None:
            return _run(plan, plan.backend, args[1:], None, (1, 0), None)
    subscripts, operands = _split_args(args)
    plan, backend, operands = _einsum_plan(subscripts, operands, out, options, "einsum")
    return _run(plan, backend, operands, out, (1, 0), None)


def _flat_key(args: Sequence[Any]) -> tuple | None:
    """The key of einsum(subscripts, *operands) on NumPy arrays with a new result and
    default options, or None when an operand is not a NumPy array.

    Flat and uncanonicalised to be cheap; the primitive plans under it are still
    shared by canonical labels.
    """
    key: list[Any] = [args[0]]
    for x in args[1:]:
        if type(x) is not np.ndarray:
            return None
        key += (x.shape, x.strides, x.dtype)
    return tuple(key)


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
        alpha, beta: Scalars; complex values need a complex result dtype.
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
    extra = [c] if c is not None and beta != 0 else []
    plan, backend, operands = _einsum_plan(subscripts, [a, b, *extra], out, options, "contract")
    c_array = operands.pop() if extra else None
    if c_array is not None:
        c_array = _checked_c(c_array, plan.program.output, backend, f"contract({subscripts!r})")
    _check_scalars(subscripts, plan.program.dtype, alpha=alpha, beta=beta)
    return _run(plan, backend, operands, out, (alpha, beta), c_array)


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
    return _stage(
        "permute", subscripts, [a], out, ops={"op_a": (UnaryOp, op_a)}, scalars={"alpha": alpha}
    )


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
    if beta != 0 and c is None:
        raise OperandError(f"beta={beta!r} needs c in reduce({subscripts!r})")
    return _stage(
        "reduce",
        subscripts,
        [a],
        out,
        ops={"op": (ReduceOp, op), "op_a": (UnaryOp, op_a)},
        scalars={"alpha": alpha, "beta": beta},
        c=c if beta else None,
    )


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
    return _stage(
        "elementwise",
        subscripts,
        [a, c],
        out,
        ops={"op_a": (UnaryOp, op_a), "op_c": (UnaryOp, op_c), "op": (BinaryOp, op)},
        scalars={"alpha": alpha, "gamma": gamma},
    )


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
    return _stage(
        "elementwise",
        subscripts,
        [a, b, c],
        out,
        ops={
            "op_a": (UnaryOp, op_a),
            "op_b": (UnaryOp, op_b),
            "op_c": (UnaryOp, op_c),
            "op_ab": (BinaryOp, op_ab),
            "op_abc": (BinaryOp, op_abc),
        },
        scalars={"alpha": alpha, "beta": beta, "gamma": gamma},
    )


def trace(a: Any, axis1: int = 0, axis2: int = 1, *, out: Any = None) -> Any:
    """The sum along the diagonal of axes ``axis1`` and ``axis2``, as numpy.trace.

    A strided view of the diagonal (stride = the two axes' strides added) is reduced:
    O(n) reads and no copy of ``a``. Non-square axes use the shorter extent.

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.trace(np.arange(9.0).reshape(3, 3))
        np.float64(12.0)
    """
    backend = select_backend([a], "trace")
    a = _host_operands(backend, [a])[0]
    ndim = a.ndim
    context = f"trace(axis1={axis1}, axis2={axis2}) of a rank-{ndim} operand"
    axes = []
    for name, axis in (("axis1", axis1), ("axis2", axis2)):
        if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
            raise ShapeError(f"{name}={axis!r} is out of range for rank {ndim} in {context}")
        axes.append(int(axis) % ndim)
    if axes[0] == axes[1]:
        raise ShapeError(f"axis1 and axis2 are both axis {axes[0]} in {context}")
    layout = backend.layout(a)
    dtype = _result_dtype([a], context)
    extra = backend.key_extra([a], context)
    out_key = _out_key(out, backend, context)
    key = ("trace", layout.shape, layout.strides, layout.dtype, tuple(axes), out_key, extra)

    def build() -> StagePlan:
        kept = [i for i in range(ndim) if i not in axes]
        labels = "".join(symbol(i) for i in kept) + symbol(ndim)
        extents = {labels[j]: layout.shape[i] for j, i in enumerate(kept)}
        extents[labels[-1]] = min(layout.shape[axes[0]], layout.shape[axes[1]])
        # The diagonal as its own label: the two axes' strides added, no copy.
        source = layout if layout.dtype == dtype else _cast_layout(layout, dtype)
        strides = [source.strides[i] for i in kept] + [sum(source.strides[i] for i in axes)]
        diagonal = OperandLayout(tuple(extents[x] for x in labels), tuple(strides), dtype)
        prep = prepare_operand(labels, diagonal, dtype, extents)
        prep = OperandPrep(layout.dtype != dtype, True, prep.spec, None)
        output = _output_spec(labels[:-1], prep.spec.extents[:-1], dtype, out, backend, context)
        problem = ReductionProblem(prep.spec, output)
        return StagePlan(backend, problem, DEFAULT_OPTIONS, extra, PLAN_CACHE, [prep], context)

    plan = PLAN_CACHE.get_or_build(key, build)
    return _run(plan, backend, [a], out, (1, 0), None)


def prepare(*args: Any, out: Any = None, options: Options | None = None) -> Plan:
    """Build (or fetch) the plan of an einsum and hold it.

    The plan accepts operands of the same shapes, strides and dtypes as these.

    Example:
        >>> import numpy as np, gpu_tc
        >>> a = np.ones((4, 4))
        >>> with gpu_tc.prepare("ij,jk->ik", a, a) as plan:
        ...     plan.execute(a, a)[0, 0]
        np.float64(4.0)
    """
    subscripts, operands = _split_args(args)
    plan, backend, operands = _einsum_plan(subscripts, operands, out, options, "prepare")
    return Plan(subscripts, plan, backend, [backend.layout(x) for x in operands], out)


# --- shared machinery -------------------------------------------------------------


def _split_args(args: Sequence[Any]) -> tuple[str, list[Any]]:
    if not args:
        raise ExpressionError("einsum needs subscripts and at least one operand")
    if isinstance(args[0], str):
        if len(args) < 2:
            raise ExpressionError(f"{args[0]!r} was given no operand")
        return args[0], list(args[1:])
    if len(args) < 2:
        raise ExpressionError("the interleaved form needs an operand and its sublist")
    return from_interleaved(args)


def _host_operands(backend: Backend, operands: Sequence[Any]) -> list[Any]:
    """Operands as the backend's arrays; odd byte strides become C-ordered copies."""
    result = []
    for index, x in enumerate(operands):
        if not isinstance(x, backend.array_type):
            try:
                x = backend.from_host(np.asarray(x))
            except Exception as err:  # noqa: BLE001 - any conversion failure is bad input
                raise OperandError(f"operand {index} cannot be read as an array: {err}") from err
        if any(s % x.itemsize for s in x.strides) if x.itemsize else False:
            x = x.copy()
        result.append(x)
    return result


def _result_dtype(operands: Sequence[Any], context: str) -> str:
    for index, x in enumerate(operands):
        if x.dtype.kind not in _CASTABLE_KINDS:
            raise DTypeError(
                f"operand {index} has dtype {x.dtype} in {context}: gpu_tc computes float32, "
                "float64, complex64 and complex128"
            )
    dtype = np.result_type(*[x.dtype for x in operands])
    if dtype.char not in COMPUTE_DTYPES:
        names = ", ".join(str(x.dtype) for x in operands)
        raise DTypeError(
            f"operands of dtype {names} give {dtype} in {context}: gpu_tc computes float32, "
            "float64, complex64 and complex128; cast an operand, e.g. a.astype(np.float64)"
        )
    return dtype.char


def _cast_layout(layout: OperandLayout, dtype: str) -> OperandLayout:
    """The layout of a C-ordered copy of an operand in ``dtype``."""
    labels = "".join(symbol(i) for i in range(len(layout.shape)))
    return OperandLayout(layout.shape, contiguous_spec(labels, layout.shape, dtype).strides, dtype)


def _out_key(out: Any, backend: Backend, context: str) -> Any:
    """``out``'s part of a plan key; an ``out`` of the wrong array type, read-only, or
    with elements sharing memory is refused here."""
    if out is None:
        return None
    if not isinstance(out, backend.array_type):
        raise OutputError(
            f"out is a {_type_name(out)} but the operands need a "
            f"{_type_name(backend.array_type)} in {context}"
        )
    if not getattr(out.flags, "writeable", True):  # CuPy arrays have no such flag
        raise OutputError(f"out is read-only in {context}")
    itemsize = out.itemsize
    if elements_overlap(tuple(out.shape), tuple(s // itemsize for s in out.strides)):
        raise OutputError(
            f"out has elements that share memory (shape {tuple(out.shape)}, strides "
            f"{tuple(out.strides)} bytes) in {context}: writing it would race"
        )
    return (out.shape, out.strides, out.dtype)


def _type_name(x: Any) -> str:
    cls = x if isinstance(x, type) else type(x)
    module = cls.__module__.split(".")[0]
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _output_spec(
    labels: str, extents: Sequence[int], dtype: str, out: Any, backend: Backend, context: str
) -> TensorSpec:
    """The layout of the result: ``out``'s, after checking it, or a new C-ordered one."""
    if out is None:
        return contiguous_spec(labels, tuple(extents), dtype)
    if tuple(out.shape) != tuple(extents):
        raise OutputError(
            f"out has shape {tuple(out.shape)} but the result has shape {tuple(extents)} "
            f"in {context}"
        )
    if out.dtype.char != dtype:
        raise OutputError(
            f"out has dtype {out.dtype} but the result has dtype {np.dtype(dtype)} in {context}"
        )
    if any(s % out.itemsize for s in out.strides):
        return contiguous_spec(labels, tuple(extents), dtype)  # computed aside, then copied
    return TensorSpec(labels, tuple(extents), backend.layout(out).strides, dtype)


def _einsum_plan(
    subscripts: str, operands: Sequence[Any], out: Any, options: Options | None, name: str
) -> tuple[EinsumPlan, Backend, list[Any]]:
    """The cached plan of an einsum (any extra trailing operand is c, keyed, not planned)."""
    context = f"{name}({subscripts!r})"
    backend = select_backend(operands, context)
    operands = _host_operands(backend, operands)
    parsed = parse(subscripts)
    options = DEFAULT_OPTIONS if options is None else options
    planned = operands[: len(parsed.terms)] if name == "contract" else operands
    key_extra = backend.key_extra(operands, context)
    flat = name == "einsum" and out is None and options is DEFAULT_OPTIONS
    key: tuple | None = _flat_key((subscripts, *operands)) if flat else None
    if key is None:
        key = (
            "einsum",
            parsed.canonical(),
            tuple((x.shape, x.strides, x.dtype) for x in operands),
            _out_key(out, backend, context),
            key_extra,
            options,
        )

    def build() -> EinsumPlan:
        expression = expand(parsed, tuple(x.ndim for x in planned))
        dtype = _result_dtype(operands, context)
        layouts = [backend.layout(x) for x in planned]
        extents = label_extents(expression, layouts)
        output_extents = tuple(extents[x] for x in expression.output)
        output = _output_spec(expression.output, output_extents, dtype, out, backend, context)
        strides = None if out is None else output.strides
        program = build_program(expression, layouts, dtype, strides)
        return EinsumPlan(program, backend, options, key_extra, PLAN_CACHE)

    return PLAN_CACHE.get_or_build(key, build), backend, operands


def _checked_c(c: Any, output: TensorSpec, backend: Backend, context: str) -> Any:
    if tuple(c.shape) != output.extents:
        raise ShapeError(
            f"c has shape {tuple(c.shape)} but the result has shape {output.extents} in {context}"
        )
    return c if c.dtype.char == output.dtype else backend.cast(c, output.dtype)


def _check_scalars(context: str, dtype: str, **scalars: complex) -> None:
    for name, value in scalars.items():
        if not isinstance(value, (int, float, complex, np.number)) or isinstance(value, bool):
            raise DTypeError(f"{name}={value!r} is not a number in {context!r}")
        if dtype in "fd" and complex(value).imag != 0:
            raise DTypeError(
                f"{name}={value!r} is complex but the result dtype {np.dtype(dtype)} is real "
                f"in {context!r}"
            )


def _run(
    plan: Any, backend: Backend, operands: Sequence[Any], out: Any, scalars: tuple, c: Any
) -> Any:
    """Execute into ``out`` or a new result; an ``out`` that overlaps an operand, or
    whose strides the plan could not use, gets the result through a temporary."""
    output = plan.output
    if out is None:
        result = allocate(backend, output)
        plan.execute(operands, result, scalars, c)
        return backend.finish(result)
    if c is not None and c is not out and backend.overlaps(out, c):
        c = c.copy()
    aside = output.strides != backend.layout(out).strides or any(
        backend.overlaps(out, x) for x in operands
    )
    if not aside:
        plan.execute(operands, out, scalars, c)
        return out
    result = allocate(backend, output)
    if c is out:
        backend.copy_into(out, result)
        c = result
    plan.execute(operands, result, scalars, c)
    backend.copy_into(result, out)
    return out


def _stage(
    kind: str,
    subscripts: str,
    operands: list[Any],
    out: Any,
    *,
    ops: dict[str, tuple[type, Any]],
    scalars: dict[str, complex],
    c: Any = None,
) -> Any:
    """permute / reduce / elementwise: one primitive problem, planned and cached.

    ``ops`` maps each operator argument's name to (its Enum, the value given).
    """
    context = f"{kind}({subscripts!r})"
    for name, (enum_type, op) in ops.items():
        if not isinstance(op, enum_type):  # before the cache: IntEnums of kinds compare equal
            raise DTypeError(f"{name}={op!r} is not a {enum_type.__name__} in {context}")
    backend = select_backend(operands + ([c] if c is not None else []), context)
    operands = _host_operands(backend, operands)
    parsed = parse(subscripts)
    extra = backend.key_extra(operands, context)
    op_values = tuple(op for _, op in ops.values())
    key = (
        kind,
        parsed.canonical(),
        tuple((x.shape, x.strides, x.dtype) for x in operands),
        _out_key(out, backend, context),
        op_values,
        extra,
    )

    def build() -> StagePlan:
        expression = expand(parsed, tuple(x.ndim for x in operands))
        dtype = _result_dtype(operands, context)
        layouts = [backend.layout(x) for x in operands]
        extents = label_extents(expression, layouts)
        _check_stage_labels(kind, expression.terms, expression.output, context)
        preps = [
            prepare_operand(t, lay, dtype, extents) for t, lay in zip(expression.terms, layouts)
        ]
        output = _output_spec(
            expression.output, [extents[x] for x in expression.output], dtype, out, backend, context
        )
        for name, (enum_type, op) in ops.items():
            check_op(op, enum_type, dtype, f"{context} ({name})")
        problem = _stage_problem(kind, [p.spec for p in preps], output, op_values, context)
        return StagePlan(backend, problem, DEFAULT_OPTIONS, extra, PLAN_CACHE, preps, context)

    plan = PLAN_CACHE.get_or_build(key, build)
    _check_scalars(subscripts, plan.output.dtype, **scalars)
    if c is not None:
        c = _checked_c(_host_operands(backend, [c])[0], plan.output, backend, context)
    return _run(plan, backend, operands, out, tuple(scalars.values()), c)


def _check_stage_labels(kind: str, terms: Sequence[str], output: str, context: str) -> None:
    if kind == "reduce":
        return
    for index, term in enumerate(terms):
        for label in term:
            if label not in output:
                raise ExpressionError(
                    f"label {show_label(label)} of operand {index} is missing from the output "
                    f"in {context}: {kind} does not sum; use reduce() or einsum()"
                )


def _stage_problem(
    kind: str, specs: list[TensorSpec], output: TensorSpec, ops: tuple[Any, ...], context: str
) -> Any:
    """The primitive problem of a stage; ``ops`` in the order its function lists them."""
    if kind == "permute":
        return PermutationProblem(specs[0], output, ops[0])
    if kind == "reduce":
        op, op_a = ops
        reduced = [x for x in specs[0].labels if x not in output.labels]
        empty = [x for x in reduced if specs[0].extent(x) == 0]
        if empty and op in (ReduceOp.MAX, ReduceOp.MIN):
            raise ShapeError(
                f"ReduceOp.{op.name} over label {show_label(empty[0])} of extent 0 has no "
                f"identity in {context}"
            )
        return ReductionProblem(specs[0], output, op, op_a)
    if len(specs) == 2:
        a, c = specs
        op_a, op_c, op = ops
        return ElementwiseProblem(
            a, None, c, output, op_a, UnaryOp.IDENTITY, op_c, BinaryOp.ADD, op
        )
    a, b, c = specs
    return ElementwiseProblem(a, b, c, output, *ops)
