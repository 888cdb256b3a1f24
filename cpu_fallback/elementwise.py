"""Element-wise operations on the CPU: NumPy ufuncs on broadcast views."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.operators import BINARY, UNARY
from gpu_tc.options import UnaryOp
from gpu_tc.problem import ElementwiseProblem, TensorSpec


def _scaled(x: Any, op: UnaryOp, scale: complex) -> Any:
    """scale * op(x), as a new array (or ``x`` itself when nothing changes it)."""
    if op is not UnaryOp.IDENTITY:
        x = UNARY[op](x)
    return x if scale == 1 else np.multiply(x, scale)


def _in_d_order(x: Any, spec: TensorSpec, d: TensorSpec) -> Any:
    present = [label for label in d.labels if label in spec.labels]
    view = x.transpose([spec.labels.index(label) for label in present])
    return view.reshape([spec.extent(x) if x in spec.labels else 1 for x in d.labels])


class CpuElementwisePlan(PlanDefaults):
    """D = op_abc(op_ab(alpha*op_a(A), beta*op_b(B)), gamma*op_c(C)), broadcasting."""

    route = "elementwise"

    def __init__(self, problem: ElementwiseProblem) -> None:
        self.problem = problem
        self.reason = "NumPy ufuncs on broadcast views, written into D"
        # Each operand scaled or mapped by an operator is a new array; with three
        # operands, the first two combine into one of D's size.
        itemsize = np.dtype(problem.d.dtype).itemsize
        operands = [problem.a, problem.c] + ([] if problem.b is None else [problem.b])
        self.temporary_bytes = itemsize * (
            sum(spec.size for spec in operands) + (problem.d.size if problem.b else 0)
        )

    def __repr__(self) -> str:
        return f"CpuElementwisePlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Any, d: Any, scalars: Scalars, addend: Any) -> None:
        """Write the result into ``d`` (inputs: A, C or A, B, C)."""
        p = self.problem
        a, c = inputs[0], inputs[-1]
        left = _scaled(_in_d_order(a, p.a, p.d), p.op_a, scalars.alpha)
        if p.b is not None:
            right = _scaled(_in_d_order(inputs[1], p.b, p.d), p.op_b, scalars.beta)
            left = BINARY[p.op_ab](left, right)
        last = _scaled(_in_d_order(c, p.c, p.d), p.op_c, scalars.gamma)
        BINARY[p.op_abc](left, last, out=d)
