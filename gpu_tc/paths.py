"""Lower a bound einsum onto primitive problems: prepare, pairwise steps, final stage.

The program is plain data; :mod:`gpu_tc.composite` runs it on a backend. The pairwise
order comes from opt_einsum; labels found in one operand only and not in the output
are reduced before any contraction, so every contraction step has batch, contracted
and free labels only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

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
from .strides import order_by_stride


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
    output_is_new: bool  # the result is a new C-ordered array (no ``out``)
    # The last contraction writing the other GEMM orientation of a new result (D^T =
    # B^T A^T instead of D = A B), for a backend to choose between by measurement.
    flipped: ContractionProblem | None = None


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
        if set(spec.labels) == set(output.labels):
            final = PermutationProblem(spec, output)
        else:
            final = ReductionProblem(spec, output)
        return EinsumProgram(
            expression,
            dtype,
            (replace(preps[0], reduction=None),),
            (),
            final,
            output,
            output_strides is None,
        )

    new_output = output_strides is None
    steps = _pairwise_steps([p.result for p in preps], output, extents, new_output)
    final = steps[-1].problem
    flipped = None
    if new_output:
        layouts = natural_outputs(final.a, final.b, output)
        if len(layouts) == 2:
            flipped = ContractionProblem(final.a, final.b, layouts[1])
    return EinsumProgram(
        expression, dtype, tuple(preps), steps, final, final.d, new_output, flipped
    )


def prepare_operand(
    term: str, layout: OperandLayout, dtype: str, extents: dict[str, int]
) -> OperandPrep:
    """How the operand with ``term`` and ``layout`` becomes a tensor of unique labels.

    Args:
        term: The operand's labels, one per axis (repeats allowed).
        layout: Its raw layout.
        dtype: The compute dtype; another dtype means a cast (a C-ordered copy).
        extents: The broadcast extent of every label.
    """
    cast = layout.dtype != dtype
    if cast:
        layout = OperandLayout(
            layout.shape, contiguous_spec(term, layout.shape, dtype).strides, dtype
        )
    spec = operand_spec(term, layout, extents)
    view = spec.labels != term or spec.strides != layout.strides
    return OperandPrep(cast, view, spec, None)


def reduce_unneeded(prep: OperandPrep, needed: str) -> OperandPrep:
    """``prep`` with a reduction of the labels that are not in ``needed``."""
    spec = prep.spec
    kept = "".join(x for x in spec.labels if x in needed)
    if kept == spec.labels:
        return prep
    d = contiguous_spec(kept, [spec.extent(x) for x in kept], spec.dtype)
    return replace(prep, reduction=ReductionProblem(spec, d))


def natural_output(a: TensorSpec, b: TensorSpec, output: TensorSpec) -> TensorSpec:
    """A new result laid out as the GEMM writes it, listed in the output's label order.

    Like numpy.einsum(optimize=True) and opt_einsum, a new result is the contraction's
    own layout seen through a permuted view: (batch, M, N) with each group in its
    operand's stride order, or (batch, N, M) when the output's last label is in M. So
    no new result is ever written to a temporary and permuted again.
    """
    return natural_outputs(a, b, output)[0]


def natural_outputs(a: TensorSpec, b: TensorSpec, output: TensorSpec) -> tuple[TensorSpec, ...]:
    """The preferred natural layout (see natural_output), then the other orientation
    when M and N are both non-empty."""
    roles = label_roles(a.labels, b.labels, output.labels)
    batch = order_by_stride(a, roles.batch)
    m = order_by_stride(a, roles.free_a)
    n = order_by_stride(b, roles.free_b)
    orders = [m + n, n + m] if m and n else [m + n]
    if output.labels[-1:] in m and m:
        orders.reverse()
    return tuple(
        contiguous_spec(batch + o, [output.extent(x) for x in batch + o], output.dtype).permuted(
            output.labels
        )
        for o in orders
    )


def _pairwise_steps(
    specs: list[TensorSpec], output: TensorSpec, extents: dict[str, int], new_output: bool
) -> tuple[Step, ...]:
    """The contraction steps; with ``new_output`` the last writes the GEMM's own layout."""
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
            d = natural_output(a, b, output) if new_output else output
        else:
            needed = output.labels + "".join(s.labels for s in working)
            roles = label_roles(a.labels, b.labels, needed)
            labels = roles.batch + roles.free_a + roles.free_b
            d = contiguous_spec(labels, [extents[x] for x in labels], output.dtype)
        steps.append(Step(lhs, rhs, ContractionProblem(a, b, d)))
        working.append(d)
    return tuple(steps)
