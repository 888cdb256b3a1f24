"""Bind expressions to operand layouts: tensor specs, label roles and problems.

A :class:`TensorSpec` is what every backend needs to know about one operand: one unique
label per axis, extents, strides in elements and a dtype. Repeated labels in a term
become one label whose stride is the sum of the repeated axes' strides (a diagonal view,
no copy); labels of extent 1 broadcast against a larger extent are dropped.
The problem classes are plain, hashable data; with canonical labels they are the
plan-cache keys, so they never hold pointers, ``id()`` or ``hash()`` values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .errors import ShapeError
from .expression import Expression, show_label, symbol
from .options import BinaryOp, ReduceOp, UnaryOp


@dataclass(frozen=True)
class TensorSpec:
    """The layout of one operand as a backend sees it.

    Attributes:
        labels: One unique label per axis.
        extents: The extent of each axis.
        strides: The stride of each axis, in elements (may be negative or zero).
        dtype: The numpy dtype character, canonical (see :func:`dtype_char`).
    """

    labels: str
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str

    def extent(self, label: str) -> int:
        """The extent of ``label``."""
        return self.extents[self.labels.index(label)]

    def stride(self, label: str) -> int:
        """The stride of ``label`` in elements."""
        return self.strides[self.labels.index(label)]

    @property
    def size(self) -> int:
        """The number of elements."""
        n = 1
        for e in self.extents:
            n *= e
        return n

    def relabel(self, mapping: dict[str, str]) -> TensorSpec:
        """The same layout under other label names."""
        return replace(self, labels="".join(mapping[label] for label in self.labels))

    def permuted(self, labels: str) -> TensorSpec:
        """The same tensor with its axes listed in the order of ``labels``."""
        order = [self.labels.index(label) for label in labels]
        return TensorSpec(
            labels,
            tuple(self.extents[i] for i in order),
            tuple(self.strides[i] for i in order),
            self.dtype,
        )


def contiguous_spec(labels: str, extents: Sequence[int], dtype: str) -> TensorSpec:
    """The spec of a new C-ordered array with these labels and extents."""
    strides = []
    step = 1
    for extent in reversed(extents):
        strides.append(step)
        step *= max(extent, 1)
    return TensorSpec(labels, tuple(extents), tuple(reversed(strides)), dtype)


@dataclass(frozen=True)
class OperandLayout:
    """The raw layout of one operand: shape, strides in elements and dtype."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str


# Characters of dtypes that equal another's (int64 is both "l" and "q" on Linux):
# mapped to the one numpy's type promotion returns, so equal dtypes compare equal.
_SAME_DTYPE = {c: np.dtype(np.dtype(c).str).char for c in "qQlLiI"}


def dtype_char(dtype: Any) -> str:
    """The canonical character of ``dtype``: equal dtypes get the same one."""
    char = np.dtype(dtype).char
    return _SAME_DTYPE.get(char, char)


def array_layout(array: Any) -> OperandLayout:
    """Shape, strides in elements and dtype character of a NumPy or CuPy array."""
    itemsize = array.itemsize
    char = array.dtype.char
    return OperandLayout(
        tuple(array.shape), tuple(s // itemsize for s in array.strides),
        _SAME_DTYPE.get(char, char),
    )


def label_extents(expression: Expression, layouts: Sequence[OperandLayout]) -> dict[str, int]:
    """The extent of every label after broadcasting extents of 1.

    Raises:
        ShapeError: a label has two different extents (neither 1), within one operand
            (a diagonal) or across operands.
    """
    extents: dict[str, int] = {}
    where: dict[str, int] = {}
    for index, (term, layout) in enumerate(zip(expression.terms, layouts)):
        seen: dict[str, int] = {}
        for label, extent in zip(term, layout.shape):
            if label in seen and seen[label] != extent:
                raise ShapeError(
                    f"label {show_label(label)} is repeated in operand {index} with extents "
                    f"{seen[label]} and {extent} in {expression.text!r}: a diagonal needs "
                    "equal extents"
                )
            seen[label] = extent
            known = extents.get(label)
            if known is None or (known == 1 and extent != 1):
                extents[label] = extent
                where[label] = index
            elif extent not in (1, known):
                raise ShapeError(
                    f"label {show_label(label)} has extent {known} in operand {where[label]} "
                    f"but {extent} in operand {index} in {expression.text!r}"
                )
    return extents


def operand_spec(term: str, layout: OperandLayout, extents: dict[str, int]) -> TensorSpec:
    """Fold repeated labels into diagonals and drop broadcast axes of extent 1.

    Args:
        term: The operand's labels, one per axis, possibly repeated.
        layout: The operand's raw shape and strides.
        extents: The broadcast extent of every label (from :func:`label_extents`).
    """
    strides: dict[str, int] = {}
    own: dict[str, int] = {}
    for label, extent, stride in zip(term, layout.shape, layout.strides):
        if extent == 1 and extents[label] != 1:
            continue  # broadcast: the operand is constant along this label
        strides[label] = strides.get(label, 0) + stride
        own[label] = extent
    labels = "".join(strides)
    return TensorSpec(
        labels, tuple(own[x] for x in labels), tuple(strides[x] for x in labels), layout.dtype
    )


@dataclass(frozen=True)
class LabelRoles:
    """Roles of the labels of a binary step D = A * B (tenferro's classification)."""

    batch: str  # in A, B and D
    contracted: str  # in A and B, not in D
    free_a: str  # in A and D only
    free_b: str  # in B and D only
    summed: str  # in one operand only, not in D


def label_roles(a: str, b: str, d: str) -> LabelRoles:
    """Classify the labels of A and B against the output D (orders follow A, then B)."""
    return LabelRoles(
        batch="".join(x for x in a if x in b and x in d),
        contracted="".join(x for x in a if x in b and x not in d),
        free_a="".join(x for x in a if x not in b and x in d),
        free_b="".join(x for x in b if x not in a and x in d),
        summed="".join(x for x in a + b if (x in a) != (x in b) and x not in d),
    )


def _canonical_mapping(*label_strings: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for label in "".join(label_strings):
        if label not in mapping:
            mapping[label] = symbol(len(mapping))
    return mapping


@dataclass(frozen=True)
class ContractionProblem:
    """D = alpha * A * B + beta * C, where C has D's layout.

    Summed labels are reduced before a contraction, so every label of A and B is
    batch, contracted or free.
    """

    a: TensorSpec
    b: TensorSpec
    d: TensorSpec

    @property
    def roles(self) -> LabelRoles:
        """The role of every label."""
        return label_roles(self.a.labels, self.b.labels, self.d.labels)

    @property
    def flops(self) -> int:
        """2 x the product of every label's extent: the multiply-adds, counted twice."""
        extents: dict[str, int] = {}
        for spec in (self.a, self.b, self.d):
            extents.update(zip(spec.labels, spec.extents))
        return 2 * math.prod(extents.values())

    def canonical_labels(self) -> dict[str, str]:
        """Each label's canonical name (renamed by first appearance)."""
        return _canonical_mapping(self.a.labels, self.b.labels, self.d.labels)

    def canonical(self) -> ContractionProblem:
        """The same problem with labels renamed by first appearance (the cache key)."""
        m = self.canonical_labels()
        return ContractionProblem(self.a.relabel(m), self.b.relabel(m), self.d.relabel(m))


@dataclass(frozen=True)
class PermutationProblem:
    """B = alpha * op(A), with B's labels a permutation of A's."""

    a: TensorSpec
    b: TensorSpec
    op_a: UnaryOp = UnaryOp.IDENTITY

    def canonical_labels(self) -> dict[str, str]:
        """Each label's canonical name (renamed by first appearance)."""
        return _canonical_mapping(self.a.labels, self.b.labels)

    def canonical(self) -> PermutationProblem:
        """The same problem with labels renamed by first appearance."""
        m = self.canonical_labels()
        return PermutationProblem(self.a.relabel(m), self.b.relabel(m), self.op_a)


@dataclass(frozen=True)
class ReductionProblem:
    """D = alpha * reduce_op(op(A)) + beta * C over the labels of A missing from D."""

    a: TensorSpec
    d: TensorSpec
    op_reduce: ReduceOp = ReduceOp.SUM
    op_a: UnaryOp = UnaryOp.IDENTITY

    @property
    def reduced(self) -> str:
        """The labels folded away."""
        return "".join(x for x in self.a.labels if x not in self.d.labels)

    def empty_fold(self, context: str) -> complex | None:
        """The value of a fold over nothing when a reduced label has extent 0 (0 for
        SUM, 1 for PROD), else None.

        Raises:
            ShapeError: MAX or MIN over nothing: they have no identity.
        """
        empty = [x for x in self.reduced if self.a.extent(x) == 0]
        if not empty:
            return None
        if self.op_reduce in (ReduceOp.MAX, ReduceOp.MIN):
            raise ShapeError(
                f"ReduceOp.{self.op_reduce.name} over label {show_label(empty[0])} of extent 0 "
                f"has no identity in {context}"
            )
        return 0 if self.op_reduce is ReduceOp.SUM else 1

    def canonical_labels(self) -> dict[str, str]:
        """Each label's canonical name (renamed by first appearance)."""
        return _canonical_mapping(self.a.labels, self.d.labels)

    def canonical(self) -> ReductionProblem:
        """The same problem with labels renamed by first appearance."""
        m = self.canonical_labels()
        return ReductionProblem(self.a.relabel(m), self.d.relabel(m), self.op_reduce, self.op_a)


@dataclass(frozen=True)
class ElementwiseProblem:
    """D = op_abc(op_ab(alpha*op_a(A), beta*op_b(B)), gamma*op_c(C)), broadcasting.

    With two operands (binary) the fields ``b``/``op_b``/``op_ab`` are unused and
    D = op_ac(alpha*op_a(A), gamma*op_c(C)) with ``op_abc`` as op_ac. Every label of
    every operand appears in D; operands are broadcast along the labels they lack. Made
    by :meth:`binary` or :meth:`trinary`, which name every operator.
    """

    a: TensorSpec
    b: TensorSpec | None
    c: TensorSpec
    d: TensorSpec
    op_a: UnaryOp
    op_b: UnaryOp
    op_c: UnaryOp
    op_ab: BinaryOp
    op_abc: BinaryOp

    @classmethod
    def binary(
        cls, a: TensorSpec, c: TensorSpec, d: TensorSpec, *, op_a: UnaryOp, op_c: UnaryOp,
        op: BinaryOp,
    ) -> ElementwiseProblem:
        """D = op(alpha * op_a(A), gamma * op_c(C))."""
        return cls(a, None, c, d, op_a, UnaryOp.IDENTITY, op_c, BinaryOp.ADD, op)

    @classmethod
    def trinary(
        cls, a: TensorSpec, b: TensorSpec, c: TensorSpec, d: TensorSpec, *, op_a: UnaryOp,
        op_b: UnaryOp, op_c: UnaryOp, op_ab: BinaryOp, op_abc: BinaryOp,
    ) -> ElementwiseProblem:
        """D = op_abc(op_ab(alpha * op_a(A), beta * op_b(B)), gamma * op_c(C))."""
        return cls(a, b, c, d, op_a, op_b, op_c, op_ab, op_abc)

    def canonical_labels(self) -> dict[str, str]:
        """Each label's canonical name (renamed by first appearance)."""
        specs = [self.a, self.b, self.c, self.d]
        return _canonical_mapping(*(s.labels for s in specs if s is not None))

    def canonical(self) -> ElementwiseProblem:
        """The same problem with labels renamed by first appearance."""
        m = self.canonical_labels()
        return replace(
            self,
            a=self.a.relabel(m),
            b=None if self.b is None else self.b.relabel(m),
            c=self.c.relabel(m),
            d=self.d.relabel(m),
        )


# Every kind of problem a backend plans.
PrimitiveProblem = ContractionProblem | PermutationProblem | ReductionProblem | ElementwiseProblem
