"""The GPU backend's element-wise plan: cutensorElementwiseBinary/TrinaryExecute.

cuTENSOR writes D in C's layout and wants C's descriptor to be D's: the C role goes to
an operand laid out like D (:func:`gpu_tc.cuda.roles.elementwise_roles`), described by
D's own descriptor; when no operand is, D is first set to gamma * op_c(C) and then
plays the C role in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.errors import BackendError
from gpu_tc.options import BinaryOp
from gpu_tc.problem import ElementwiseProblem

from . import planned
from .cutensor import Handle, OperationDescriptor, TensorDescriptor
from .descriptors import (
    documented_forms,
    expected_alignment,
    orient,
    pointer_alignment,
    staged_bytes,
    staging_note,
)
from .operands import Operand, Variants, check_device
from .planned import PlannedOperation
from .plans import IDENTITY, refusing
from .roles import elementwise_roles
from .unary_rules import cutensor_unary


class _ElementwiseVariant:
    """The main operation, and the one that first sets D to gamma * op_c(C) when no
    operand is laid out like D."""

    __slots__ = ("main", "stage")

    def __init__(self, main: PlannedOperation, stage: PlannedOperation | None) -> None:
        self.main, self.stage = main, stage


class CutensorElementwisePlan(PlanDefaults):
    """D = op_abc(op_ab(alpha*op_a(A), beta*op_b(B)), gamma*op_c(C)) through
    cutensorElementwiseBinary/TrinaryExecute (binary: no B, op_abc combines A and C)."""

    route = "cutensor"

    def __init__(self, problem: ElementwiseProblem, device: int) -> None:
        p = self.problem = problem
        self.device = device
        names = "AC" if p.b is None else "ABC"
        self.context = f"element-wise {','.join(s.labels for s in self._inputs())}->{p.d.labels}"
        specs, lowered = documented_forms(orient([*self._inputs(), p.d]))
        item = np.dtype(p.d.dtype).itemsize
        operands = [Operand(s, len(t.labels), item) for s, t in zip(specs, [*self._inputs(), p.d])]
        *inputs, self._d = operands
        # Indexed by operand number: 0 = A, 1 = B, 2 = C.
        self._operands: dict[int, Operand] = dict(zip((0, 2) if p.b is None else (0, 1, 2), inputs))
        self._roles = elementwise_roles(
            p, self._operands[0].spec, None if p.b is None else self._operands[1].spec,
            self._operands[2].spec, self._d.spec,
        )
        unary = (p.op_a, p.op_b, p.op_c)
        self._ops = {i: cutensor_unary(op, p.d.dtype) for i, op in enumerate(unary)}
        operators = {"op_a": p.op_a, "op_c": p.op_c, "op_abc": p.op_abc}
        if p.b is not None:
            operators |= {"op_b": p.op_b, "op_ab": p.op_ab}
        self._refused = refusing(operators, self.context)
        staged = ""
        if self._roles.stage_c:
            staged = " (C first written into D: no operand is laid out like D)"
        self.reason = (
            f"cuTENSOR element-wise {names}{staging_note(names + 'D', specs)}{lowered}{staged}"
        )
        self.temporary_bytes = staged_bytes(specs, [*self._inputs(), p.d], item)
        self._variants = Variants(self._build)
        guess = {k: expected_alignment(o.spec, item) for k, o in self._operands.items()}
        self._variants(self._key(guess, expected_alignment(self._d.spec, item)))

    def __repr__(self) -> str:
        return f"CutensorElementwisePlan(route={self.route!r}, reason={self.reason!r})"

    def _inputs(self) -> list[Any]:
        p = self.problem
        return [p.a, p.c] if p.b is None else [p.a, p.b, p.c]

    def _key(self, alignments: dict[int, int], d: int) -> tuple[int, ...]:
        """Alignments of the A (and B) role operands, then of D's descriptor (the less
        aligned of D and the C-role operand it also describes), then, when C is staged,
        of the C operand."""
        *front, last = self._roles.order
        head = tuple(alignments[k] for k in front)
        if self._roles.stage_c:
            return (*head, d, alignments[2])
        return (*head, min(alignments[last], d))

    def _build(self, key: tuple[int, ...]) -> _ElementwiseVariant:
        try:
            return self._planned(key)
        except BackendError as err:
            self._refused(err)
            raise

    def _planned(self, key: tuple[int, ...]) -> _ElementwiseVariant:
        handle = Handle.for_device(self.device)
        roles, dtype = self._roles, self.problem.d.dtype
        *front, last = roles.order
        td = TensorDescriptor(handle, self._d.spec, key[len(front)])
        inputs = [
            (TensorDescriptor(handle, self._operands[k].spec, key[i]), self._ops[k])
            for i, k in enumerate(front)
        ]
        stage = None
        if roles.stage_c:
            inputs.append((td, IDENTITY))
            tc = TensorDescriptor(handle, self._operands[2].spec, key[len(front) + 1])
            staging = OperationDescriptor.elementwise(
                handle, [(tc, self._ops[2]), (td, IDENTITY)], td, [int(BinaryOp.ADD)], dtype
            )
            stage = PlannedOperation(handle, staging, None, self.context, uses_workspace=False)
        else:
            inputs.append((td, self._ops[last]))
        p = self.problem
        binary = [int(p.op_abc)] if p.b is None else [int(p.op_ab), int(p.op_abc)]
        main = OperationDescriptor.elementwise(handle, inputs, td, binary, dtype)
        return _ElementwiseVariant(
            PlannedOperation(handle, main, None, self.context, uses_workspace=False), stage
        )

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, addend: Any) -> None:
        """Write the result into ``d`` (inputs: A, C or A, B, C)."""
        a, c = inputs[0], inputs[-1]
        b = inputs[1] if len(inputs) == 3 else None
        check_device(self.device, (a, b, c, d), self.context)
        keep: list[Any] = []
        arrays = {0: a, 1: b, 2: c}
        values = {0: scalars.alpha, 1: scalars.beta, 2: scalars.gamma}
        pointers = {k: op.read(arrays[k], keep) for k, op in self._operands.items()}
        target = self._d.target(d)
        pd = self._d.write_pointer(target)
        variant = self._variants(
            self._key({k: pointer_alignment(x) for k, x in pointers.items()}, pointer_alignment(pd))
        )
        stream = cupy.cuda.get_current_stream()
        host = variant.main.scalars
        one = host(1)
        order = self._roles.order
        if variant.stage is not None:  # D = gamma op_c(C) + 1 * 0
            target.fill(0)
            scale = host(values[2])
            staged = [(scale[1], pointers[2]), (one[1], pd)]
            planned.elementwise(variant.stage, staged, pd, stream)
            order = order[:-1]
        held = [host(values[k]) for k in order]  # host scalars must outlive the call
        pairs = [(scalar[1], pointers[k]) for scalar, k in zip(held, order)]
        if variant.stage is not None:
            pairs.append((one[1], pd))
        planned.elementwise(variant.main, pairs, pd, stream)
        self._d.write_back(target, d)

