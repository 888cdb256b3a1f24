"""Which operand plays cuTENSOR's A, (B,) and C in an element-wise operation (plain data,
unit-tested on the CPU)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_tc.problem import ElementwiseProblem

from .descriptors import DescriptorSpec


@dataclass(frozen=True)
class ElementwiseRoles:
    """Which operand plays cuTENSOR's A, (B,) and C in an element-wise operation.

    cuTENSOR writes D in C's layout, so the C role goes to an operand laid out like D
    (the binary operators are commutative and, when op_ab == op_abc, associative).

    Attributes:
        order: Operand indices (0 = A, 1 = B, 2 = C of the problem) for each role;
            two entries for a binary problem, whose operands are (A, C).
        stage_c: No operand has D's layout: D is first set to gamma * op_c(C), then
            takes the C role in place.
    """

    order: tuple[int, ...]
    stage_c: bool


def elementwise_roles(
    problem: ElementwiseProblem,
    a: DescriptorSpec,
    b: DescriptorSpec | None,
    c: DescriptorSpec,
    d: DescriptorSpec,
) -> ElementwiseRoles:
    """Assign the roles from the oriented descriptors of A, B (None if binary), C and D."""
    like_d = [x is not None and x.same_layout(d) for x in (a, b, c)]
    if b is None:
        if like_d[2]:
            return ElementwiseRoles((0, 2), False)
        if like_d[0]:
            return ElementwiseRoles((2, 0), False)
        return ElementwiseRoles((0, 2), True)
    if like_d[2]:
        return ElementwiseRoles((0, 1, 2), False)
    if problem.op_ab is problem.op_abc:
        if like_d[0]:
            return ElementwiseRoles((2, 1, 0), False)
        if like_d[1]:
            return ElementwiseRoles((0, 2, 1), False)
    return ElementwiseRoles((0, 1, 2), True)
