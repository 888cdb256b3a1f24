"""Lower a bound call onto primitive problems: the program, as plain data.

An einsum becomes operand preparations (casts, diagonal views, early reductions),
pairwise contraction steps and a final stage.
Labels found in one operand only and not in the output are reduced before any
contraction, so every contraction step has batch, contracted and free labels only.
The pairwise order comes from :mod:`gpu_tc.pairwise` (numpy's ``optimize``).
A permutation, reduction, element-wise operation or trace becomes one stage with its
operand preparations. :mod:`gpu_tc.compose` runs programs on a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .errors import ExpressionError
from .expression import Expression, show_label, symbol
from .operators import check_op
from .options import BinaryOp, ReduceOp, UnaryOp
from .pairwise import DEFAULT, PathChoice, contraction_pairs
from .problem import (
    ContractionProblem,
    ElementwiseProblem,
    OperandLayout,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
    contiguous_spec,
    label_extents,
    label_roles,
    operand_spec,
)
from .result_layout import natural_output, natural_outputs


@dataclass(frozen=True)
class OperandPrep:
    """How one operand becomes a tensor with unique labels of the compute dtype.

    Attributes:
        view: The strided view of the operand to take first (a diagonal, or broadcast
            axes dropped), in the operand's own dtype; None for none.
        cast: Then copy it into the compute dtype (C order): only what the view reaches.
        spec: The layout after the view and the cast.
        reduction: Sum away the labels no other operand or the output needs.
        source: The operand's own layout, which ``view`` is taken from (a backend
            decides once, from it, how it takes the view: see Backend.viewer).
        start: The index, in the operand, of the view's first element (a trace's
            diagonal off the main one); () for its first element.
        diagonals: Where the array's own calls take the view (see view_calls): the
            ``diagonal(0, axis1, axis2)`` calls, then a transpose by ``order`` (None:
            none). ``diagonal()`` or ``transpose()`` takes a tenth of a microsecond, a
            view built from strides ten times that (a warm small partial trace).
        order: See ``diagonals``.
    """

    view: TensorSpec | None
    cast: bool
    spec: TensorSpec
    reduction: ReductionProblem | None
    source: OperandLayout
    start: tuple[int, ...] = ()
    diagonals: tuple[tuple[int, int], ...] = ()
    order: tuple[int, ...] | None = None

    @property
    def result(self) -> TensorSpec:
        """The layout that the pairwise steps see."""
        return self.spec if self.reduction is None else self.reduction.d


@dataclass(frozen=True)
class Step:
    """One pairwise contraction: ``operands[lhs]`` and ``operands[rhs]`` are removed
    from the working list and the result is appended (opt_einsum's convention)."""

    lhs: int
    rhs: int
    problem: ContractionProblem


@dataclass(frozen=True)
class EinsumProgram:
    """Everything an einsum does, as primitive problems.

    ``final`` is the problem that writes the result: the last step's contraction, or
    for one operand a permutation or reduction of it.
    """

    expression: Expression
    dtype: str
    operands: tuple[OperandPrep, ...]
    steps: tuple[Step, ...]
    final: ContractionProblem | PermutationProblem | ReductionProblem
    output: TensorSpec
    output_is_new: bool  # the result is a new C-ordered array (no ``out``)
    # The last contraction writing the other GEMM orientation of a new result (D^T =
    # B^T A^T instead of D = A B), for a backend to choose between by measurement.
    flipped: ContractionProblem | None = None
    # One operand that the result only reorders or diagonalises: the result as a view
    # of it, in its own layout and dtype (numpy.einsum returns such views).
    view_of_operand: TensorSpec | None = None
    # The operand's own calls that take view_of_operand (see view_calls), if any.
    view_calls: ViewCalls | None = None


def build_program(
    expression: Expression,
    layouts: Sequence[OperandLayout],
    dtype: str,
    output_strides: tuple[int, ...] | None,
    path: PathChoice = DEFAULT,
) -> EinsumProgram:
    """Plan the einsum of operands with these layouts.

    Args:
        expression: The expanded expression.
        layouts: Raw shape, strides (elements) and dtype of each operand.
        dtype: The compute dtype character (that of the result the plan writes).
        output_strides: The strides of the result in elements, or None for a new
            result in the layout the last contraction writes best.
        path: The pairwise order (see :func:`gpu_tc.pairwise.path_choice`).

    Raises:
        ShapeError: extents disagree (see :func:`gpu_tc.problem.label_extents`).
        PathError: an explicit path does not contract these operands.
    """
    extents = label_extents(expression, layouts)
    out_extents = tuple(extents[x] for x in expression.output)
    output = contiguous_spec(expression.output, out_extents, dtype)
    if output_strides is not None:
        output = TensorSpec(expression.output, out_extents, output_strides, dtype)

    preps = [prepare_operand(t, lay, dtype, extents) for t, lay in zip(expression.terms, layouts)]
    # What another operand needs is known only after broadcast axes were dropped.
    preps = [
        reduce_unneeded(
            prep,
            "".join(p.spec.labels for j, p in enumerate(preps) if j != index) + expression.output,
        )
        for index, prep in enumerate(preps)
    ]

    if len(preps) == 1:
        spec = preps[0].spec
        final: ContractionProblem | PermutationProblem | ReductionProblem
        view = None
        if set(spec.labels) == set(output.labels):
            final = PermutationProblem(spec, output)
            view = operand_spec(expression.terms[0], layouts[0], extents).permuted(output.labels)
        else:
            final = ReductionProblem(spec, output)
        calls = None if view is None else view_calls(expression.terms[0], layouts[0], view)
        return EinsumProgram(
            expression, dtype, (replace(preps[0], reduction=None),), (), final, output,
            output_strides is None, view_of_operand=view, view_calls=calls,
        )

    new_output = output_strides is None
    context = f"einsum({expression.text!r})"
    steps = _pairwise_steps([p.result for p in preps], output, extents, new_output, path,
                            context)
    last = steps[-1].problem
    flipped = None
    if new_output:
        orientations = natural_outputs(last.a, last.b, output)
        if len(orientations) == 2:
            flipped = ContractionProblem(last.a, last.b, orientations[1])
    return EinsumProgram(
        expression, dtype, tuple(preps), steps, last, last.d, new_output, flipped
    )


def prepare_operand(
    term: str, layout: OperandLayout, dtype: str, extents: dict[str, int]
) -> OperandPrep:
    """How the operand with ``term`` and ``layout`` becomes a tensor of unique labels.

    Args:
        term: The operand's labels, one per axis (repeats allowed).
        layout: Its raw layout.
        dtype: The compute dtype; another dtype means a cast (a C-ordered copy of
            what the view reaches).
        extents: The broadcast extent of every label.
    """
    spec = operand_spec(term, layout, extents)
    view = spec if spec.labels != term or spec.strides != layout.strides else None
    return _cast_after(view, spec, dtype, layout, calls=view_calls(term, layout, spec))


ViewCalls = tuple[tuple[tuple[int, int], ...], tuple[int, ...] | None]


def view_calls(term: str, layout: OperandLayout, view: TensorSpec) -> ViewCalls | None:
    """The ``diagonal(0, axis1, axis2)`` calls, then the transpose (None: none), that
    take the view ``view`` of the operand with ``term`` and ``layout``: each folds the
    first two axes of a repeated label into one, last (NumPy's and CuPy's rule). None
    where the array's own calls cannot take it (a broadcast axis dropped)."""
    labels, extents, strides = list(term), list(layout.shape), list(layout.strides)
    calls: list[tuple[int, int]] = []
    while (repeated := next((x for x in labels if labels.count(x) > 1), None)) is not None:
        first = labels.index(repeated)
        second = labels.index(repeated, first + 1)
        calls.append((first, second))
        kept = [i for i in range(len(labels)) if i not in (first, second)]
        extent = min(extents[first], extents[second])
        stride = strides[first] + strides[second]
        labels = [labels[i] for i in kept] + [repeated]
        extents = [extents[i] for i in kept] + [extent]
        strides = [strides[i] for i in kept] + [stride]
    if sorted(labels) != sorted(view.labels):
        return None
    order = tuple(labels.index(x) for x in view.labels)
    if (tuple(extents[i] for i in order), tuple(strides[i] for i in order)) != (
            view.extents, view.strides):
        return None
    return tuple(calls), None if order == tuple(range(len(order))) else order


def _cast_after(view: TensorSpec | None, spec: TensorSpec, dtype: str, source: OperandLayout,
                start: tuple[int, ...] = (), calls: ViewCalls | None = None) -> OperandPrep:
    """The preparation that takes ``view`` (laid out as ``spec``; ``calls``: the
    array's own calls that take it, if any) of an operand laid out as ``source``, then
    casts it into ``dtype`` where that differs."""
    diagonals, order = calls or ((), None)
    if spec.dtype == dtype:
        return OperandPrep(view, False, spec, None, source, start, diagonals, order)
    return OperandPrep(view, True, contiguous_spec(spec.labels, spec.extents, dtype), None,
                       source, start, diagonals, order)


def reduce_unneeded(prep: OperandPrep, needed: str) -> OperandPrep:
    """``prep`` with a reduction of the labels that are not in ``needed``."""
    spec = prep.spec
    kept = "".join(x for x in spec.labels if x in needed)
    if kept == spec.labels:
        return prep
    d = contiguous_spec(kept, [spec.extent(x) for x in kept], spec.dtype)
    return replace(prep, reduction=ReductionProblem(spec, d))


def _pairwise_steps(
    specs: list[TensorSpec], output: TensorSpec, extents: dict[str, int], new_output: bool,
    path: PathChoice, context: str,
) -> tuple[Step, ...]:
    """The contraction steps in the order ``path`` gives; with ``new_output`` the last
    writes the GEMM's own layout."""
    pairs = contraction_pairs(path, [s.labels for s in specs], output.labels, extents, context)
    working = list(specs)
    ids = list(range(len(specs)))  # the tensor id of each entry of ``working``
    steps = []
    for x, y in pairs:
        lhs, rhs = sorted((ids.index(x), ids.index(y)))
        a, b = working[lhs], working[rhs]
        del working[rhs], working[lhs], ids[rhs], ids[lhs]
        if not working:
            d = natural_output(a, b, output) if new_output else output
        else:
            needed = output.labels + "".join(s.labels for s in working)
            roles = label_roles(a.labels, b.labels, needed)
            labels = roles.batch + roles.free_a + roles.free_b
            d = contiguous_spec(labels, [extents[x] for x in labels], output.dtype)
        steps.append(Step(lhs, rhs, ContractionProblem(a, b, d)))
        working.append(d)
        ids.append(len(specs) + len(steps) - 1)
    return tuple(steps)


@dataclass(frozen=True)
class StageProgram:
    """One permutation, reduction or element-wise problem and how its operands get
    there (a trace is a reduction of a diagonal view)."""

    problem: PermutationProblem | ReductionProblem | ElementwiseProblem
    operands: tuple[OperandPrep, ...]

    @property
    def output(self) -> TensorSpec:
        """The layout of the result."""
        return self.problem.b if isinstance(self.problem, PermutationProblem) else self.problem.d


def stage_program(
    kind: str,
    expression: Expression,
    layouts: Sequence[OperandLayout],
    output: TensorSpec,
    operators: dict[str, UnaryOp | BinaryOp | ReduceOp],
    context: str,
) -> StageProgram:
    """The program of ``permute``, ``reduce`` or ``elementwise`` (``kind``).

    Args:
        expression: The expanded expression.
        layouts: Each operand's layout.
        output: The result's layout (the compute dtype is its dtype).
        operators: The operator arguments by name, as the public function takes them.
        context: Names the call in messages.

    Raises:
        ExpressionError: a permutation or element-wise operand has a label the output
            lacks (they do not sum).
        DTypeError: an operator that orders values, on complex data.
        ShapeError: MAX or MIN over a label of extent 0.
    """
    if kind != "reduce":
        for index, term in enumerate(expression.terms):
            for label in term:
                if label not in expression.output:
                    raise ExpressionError(
                        f"label {show_label(label)} of operand {index} is missing from the "
                        f"output in {context}: {kind} does not sum; use reduce() or einsum()"
                    )
    extents = label_extents(expression, layouts)
    preps = tuple(
        prepare_operand(t, layout, output.dtype, extents)
        for t, layout in zip(expression.terms, layouts)
    )
    for name, op in operators.items():
        check_op(op, type(op), output.dtype, f"{context} ({name})")
    specs = [p.spec for p in preps]
    ops: dict[str, Any] = dict(operators)  # each checked against its Enum by the call
    problem: PermutationProblem | ReductionProblem | ElementwiseProblem
    if kind == "permute":
        problem = PermutationProblem(specs[0], output, ops["op_a"])
    elif kind == "reduce":
        problem = ReductionProblem(specs[0], output, ops["op"], ops["op_a"])
        problem.empty_fold(context)
    elif len(specs) == 2:
        problem = ElementwiseProblem.binary(specs[0], specs[1], output, **ops)
    else:
        problem = ElementwiseProblem.trinary(specs[0], specs[1], specs[2], output, **ops)
    return StageProgram(problem, preps)


def trace_program(
    layout: OperandLayout,
    offset: int,
    axes: tuple[int, int],
    dtype: str,
    output_for: Callable[[str, tuple[int, ...]], TensorSpec],
) -> StageProgram:
    """The reduction of a strided view of a diagonal (the two axes' strides added, no
    copy; another dtype casts the diagonal only), as numpy.trace computes it.

    Args:
        layout: The operand's layout.
        offset: The diagonal: entries (i, i + offset) of the two axes; past either edge
            it is empty and the sum 0.
        axes: The two axes (normalised, distinct).
        dtype: The compute dtype (another operand dtype means a cast first).
        output_for: ``output_for(labels, extents)`` gives the result's layout.
    """
    ndim = len(layout.shape)
    kept = [i for i in range(ndim) if i not in axes]
    labels = "".join(symbol(i) for i in kept) + symbol(ndim)
    extents = {labels[j]: layout.shape[i] for j, i in enumerate(kept)}
    first, second = (layout.shape[i] for i in axes)
    extents[labels[-1]] = max(0, min(first - max(0, -offset), second - max(0, offset)))
    start = [0] * ndim
    if extents[labels[-1]]:  # an empty diagonal needs no start (it may lie past the edge)
        start[axes[0]], start[axes[1]] = max(0, -offset), max(0, offset)
    strides = [layout.strides[i] for i in kept] + [sum(layout.strides[i] for i in axes)]
    diagonal = OperandLayout(tuple(extents[x] for x in labels), tuple(strides), layout.dtype)
    view = operand_spec(labels, diagonal, extents)
    calls = (((axes[0], axes[1]),), None) if offset == 0 else None
    prep = _cast_after(view, view, dtype, layout, tuple(start) if any(start) else (), calls)
    spec = prep.spec
    output = output_for(labels[:-1], spec.extents[:-1])
    return StageProgram(ReductionProblem(spec, output), (prep,))
