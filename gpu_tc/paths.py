"""Lower a bound einsum onto primitive problems: prepare, pairwise steps, final stage.

The program is plain data; :mod:`gpu_tc.composite` runs it on a backend. The pairwise
order comes from opt_einsum; labels found in one operand only and not in the output
are reduced before any contraction, so every contraction step has batch, contracted
and free labels only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from opt_einsum import paths as oe_paths

from .expression import Expression
from .problem import (
    ContractionProblem,
    OperandLayout,
    PermutationProblem,
    ReductionProblem,
    TensorSpec,
    contiguous_spec,
    label_extents,
    label_roles,
    operand_spec,
)


@dataclass(frozen=True)
class OperandPrep:
    """How one operand becomes a tensor with unique labels of the compute dtype.

    Attributes:
        cast: Copy it to the compute dtype (C order) first.
        view: Take the strided view ``spec`` (a diagonal, or broadcast axes dropped).
        spec: The layout after the cast and the view.
        reduction: Sum away the labels no other operand or the output needs.
    """

    cast: bool
    view: bool
    spec: TensorSpec
    reduction: ReductionProblem | None

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


def build_program(
    expression: Expression,
    layouts: Sequence[OperandLayout],
    dtype: str,
    output_strides: tuple[int, ...] | None,
) -> EinsumProgram:
    """Plan the einsum of operands with these layouts.

    Args:
        expression: The expanded expression.
        layouts: Raw shape, strides (elements) and dtype of each operand.
        dtype: The compute and result dtype character.
        output_strides: The strides of ``out`` in elements, or None for a new
            C-ordered result.

    Raises:
        ShapeError: extents disagree (see :func:`gpu_tc.problem.label_extents`).
    """
    extents = label_extents(expression, layouts)
    out_extents = tuple(extents[x] for x in expression.output)
    output = contiguous_spec(expression.output, out_extents, dtype)
    if output_strides is not None:
        output = TensorSpec(expression.output, out_extents, output_strides, dtype)

    preps = []
    for index, (term, layout) in enumerate(zip(expression.terms, layouts)):
        others = "".join(t for i, t in enumerate(expression.terms) if i != index)
        preps.append(prepare_operand(term, layout, dtype, extents, others + expression.output))

    if len(preps) == 1:
        spec = preps[0].spec
        final: ContractionProblem | PermutationProblem | ReductionProblem
        if set(spec.labels) == set(output.labels):
            final = PermutationProblem(spec, output)
        else:
            final = ReductionProblem(spec, output)
        return EinsumProgram(
            expression, dtype, (replace(preps[0], reduction=None),), (), final, output
        )

    steps = _pairwise_steps([p.result for p in preps], output, extents)
    return EinsumProgram(expression, dtype, tuple(preps), steps, steps[-1].problem, output)


def prepare_operand(
    term: str,
    layout: OperandLayout,
    dtype: str,
    extents: dict[str, int],
    needed: str | None = None,
) -> OperandPrep:
    """How the operand with ``term`` and ``layout`` enters the computation.

    Args:
        term: The operand's labels, one per axis (repeats allowed).
        layout: Its raw layout.
        dtype: The compute dtype; another dtype means a cast (a C-ordered copy).
        extents: The broadcast extent of every label.
        needed: Labels wanted downstream; the others are summed first. None: keep all.
    """
    cast = layout.dtype != dtype
    if cast:
        layout = OperandLayout(layout.shape, contiguous_spec(term, layout.shape, dtype).strides, dtype)
    spec = operand_spec(term, layout, extents)
    view = spec.labels != term or spec.strides != layout.strides
    kept = spec.labels if needed is None else "".join(x for x in spec.labels if x in needed)
    reduction = None
    if kept != spec.labels:
        reduction = ReductionProblem(spec, contiguous_spec(kept, [spec.extent(x) for x in kept], dtype))
    return OperandPrep(cast, view, spec, reduction)


def _pairwise_steps(
    specs: list[TensorSpec], output: TensorSpec, extents: dict[str, int]
) -> tuple[Step, ...]:
    path = oe_paths.auto(
        [frozenset(s.labels) for s in specs], frozenset(output.labels), dict(extents)
    )
    working = list(specs)
    steps = []
    for pair in path:
        lhs, rhs = sorted(pair)
        a, b = working[lhs], working[rhs]
        del working[rhs], working[lhs]
        if not working:
            d = output
        else:
            needed = output.labels + "".join(s.labels for s in working)
            roles = label_roles(a.labels, b.labels, needed)
            labels = roles.batch + roles.free_a + roles.free_b
            d = contiguous_spec(labels, [extents[x] for x in labels], output.dtype)
        steps.append(Step(lhs, rhs, ContractionProblem(a, b, d)))
        working.append(d)
    return tuple(steps)
