"""The GPU backend's primitive plans on cuTENSOR.

A plan holds the oriented descriptor specs of its problem; the cuTENSOR objects
(tensor and operation descriptors, preference, plan, workspace size) are built per
tuple of base-pointer alignments, eagerly for the alignment fresh CuPy arrays have,
so a warm call is one dictionary lookup and one cuTENSOR execute call on CuPy's
current stream.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from gpu_tc.errors import OptionsError
from gpu_tc.options import BinaryOp, Options, UnaryOp
from gpu_tc.problem import (
    ContractionProblem,
    ElementwiseProblem,
    PermutationProblem,
    ReductionProblem,
)

from . import cutensor
from .cutensor import Handle, OperationDescriptor, PlannedOperation, TensorDescriptor
from .operands import HostScalars, Operand, Variants, check_device
from .specs import (
    elementwise_roles,
    expected_alignment,
    orient,
    pointer_alignment,
    staging_note,
)

IDENTITY = int(UnaryOp.IDENTITY)


def _reason(base: str, variants: Variants) -> str:
    notes = dict.fromkeys(v.note for v in variants.all() if v.note)
    return "; ".join([base, *notes])


class CutensorContractionPlan:
    """D = alpha * A * B + beta * C through cutensorContract.

    Args:
        problem: The (canonical) contraction.
        options: ``workspace_limit`` bounds the workspace.
        device: The CUDA device the plan runs on.
        why: Why the cuBLAS route was not taken (recorded in ``reason``).
    """

    route = "cutensor"

    def __init__(
        self, problem: ContractionProblem, options: Options, device: int, why: str
    ) -> None:
        p = self.problem = problem
        self.device = device
        self.context = f"contraction {p.a.labels},{p.b.labels}->{p.d.labels}"
        specs = orient((p.a, p.b, p.d))
        item = np.dtype(p.d.dtype).itemsize
        self._a, self._b, self._d = (
            Operand(s, len(t.labels), item) for s, t in zip(specs, (p.a, p.b, p.d))
        )
        self._scalars = HostScalars(p.d.dtype)
        self._limit = options.workspace_limit
        self._base = f"cuTENSOR contraction{staging_note('ABD', specs)}; not cuBLAS: {why}"
        self._variants = Variants(self._build)
        a, b, d = (expected_alignment(s, item) for s in specs)
        self._variants((a, b, d, d))

    @property
    def reason(self) -> str:
        """Why cuTENSOR, what is staged, and the workspace decisions."""
        return _reason(self._base, self._variants)

    def __repr__(self) -> str:
        return f"CutensorContractionPlan(route={self.route!r}, reason={self.reason!r})"

    def _build(self, alignments: tuple[int, ...]) -> PlannedOperation:
        handle = Handle.for_device(self.device)
        a, b, c, d = alignments
        ta = TensorDescriptor(handle, self._a.spec, a)
        tb = TensorDescriptor(handle, self._b.spec, b)
        td = TensorDescriptor(handle, self._d.spec, d)
        tc = td if c == d else TensorDescriptor(handle, self._d.spec, c)
        op = OperationDescriptor.contraction(handle, ta, tb, tc, td, self.problem.d.dtype)
        return PlannedOperation(handle, op, self._limit, self.context, uses_workspace=True)

    def autotune(self, iterations: int) -> None:
        """Opt in to cuTENSOR's incremental autotuning for the next executions.

        Each of the next ``iterations`` calls to :meth:`execute` (with operands
        aligned as before) runs another kernel candidate; cuTENSOR times them and,
        after the last, this plan and every later plan of the same problem on this
        device use the fastest (kept in the handle's plan cache).

        Raises:
            OptionsError: ``iterations`` is not a positive int.
        """
        if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
            raise OptionsError(
                f"autotune iterations must be a positive int, got {iterations!r} for the "
                f"{self.context}"
            )
        for variant in self._variants.all():
            variant.autotune(iterations)

    def execute(
        self, a: Any, b: Any, d: Any, alpha: complex = 1, beta: complex = 0, c: Any = None
    ) -> None:
        """Write the result into ``d``; ``c`` (D's shape) is read when beta != 0."""
        check_device(self.device, (a, b, c, d), self.context)
        keep: list[Any] = []
        pa, pb = self._a.read(a, keep), self._b.read(b, keep)
        target = self._d.target(d)
        pd = pc = self._d.write_pointer(target)
        read_c = beta != 0 and c is not None
        if read_c:
            pc = self._d.addend(c, d, target)
        variant = self._variants(tuple(pointer_alignment(x) for x in (pa, pb, pc, pd)))
        scalars = self._scalars(alpha), self._scalars(beta if read_c else 0)
        stream = cupy.cuda.get_current_stream()
        cutensor.contract(
            variant, (scalars[0][1], scalars[1][1]), (pa, pb, pc, pd), self.device, stream
        )
        self._d.write_back(target, d)


class CutensorPermutationPlan:
    """B = alpha * op(A), permuted, through cutensorPermute."""

    route = "cutensor"

    def __init__(self, problem: PermutationProblem, device: int) -> None:
        p = self.problem = problem
        self.device = device
        self.context = f"permutation {p.a.labels}->{p.b.labels}"
        specs = orient((p.a, p.b))
        item = np.dtype(p.b.dtype).itemsize
        self._a, self._b = (Operand(s, len(t.labels), item) for s, t in zip(specs, (p.a, p.b)))
        self._scalars = HostScalars(p.b.dtype)
        op = "" if p.op_a is UnaryOp.IDENTITY else f" applying {p.op_a.name}"
        self.reason = f"cuTENSOR permutation{op}{staging_note('AB', specs)}"
        self._variants = Variants(self._build)
        self._variants(tuple(expected_alignment(s, item) for s in specs))

    def __repr__(self) -> str:
        return f"CutensorPermutationPlan(route={self.route!r}, reason={self.reason!r})"

    def _build(self, alignments: tuple[int, ...]) -> PlannedOperation:
        handle = Handle.for_device(self.device)
        ta = TensorDescriptor(handle, self._a.spec, alignments[0])
        tb = TensorDescriptor(handle, self._b.spec, alignments[1])
        p = self.problem
        op = OperationDescriptor.permutation(handle, ta, int(p.op_a), tb, p.b.dtype)
        return PlannedOperation(handle, op, None, self.context, uses_workspace=False)

    def execute(self, a: Any, b: Any, alpha: complex = 1) -> None:
        """Write alpha * op(a), permuted, into ``b``."""
        check_device(self.device, (a, b), self.context)
        keep: list[Any] = []
        pa = self._a.read(a, keep)
        target = self._b.target(b)
        pb = self._b.write_pointer(target)
        variant = self._variants((pointer_alignment(pa), pointer_alignment(pb)))
        scalar = self._scalars(alpha)
        cutensor.permute(variant, scalar[1], pa, pb, cupy.cuda.get_current_stream())
        self._b.write_back(target, b)


class CutensorReductionPlan:
    """D = alpha * reduce(op(A)) + beta * C through cutensorReduce; a trace or a
    diagonal arrives as A with summed strides, so nothing is copied."""

    route = "cutensor"

    def __init__(self, problem: ReductionProblem, options: Options, device: int) -> None:
        p = self.problem = problem
        self.device = device
        self.context = f"reduction {p.a.labels}->{p.d.labels}"
        specs = orient((p.a, p.d))
        item = np.dtype(p.d.dtype).itemsize
        self._a, self._d = (Operand(s, len(t.labels), item) for s, t in zip(specs, (p.a, p.d)))
        self._scalars = HostScalars(p.d.dtype)
        self._limit = options.workspace_limit
        self._base = (
            f"cuTENSOR {p.op_reduce.name} reduction over {len(p.reduced)} label(s)"
            f"{staging_note('AD', specs)}"
        )
        self._variants = Variants(self._build)
        a, d = (expected_alignment(s, item) for s in specs)
        self._variants((a, d, d))

    @property
    def reason(self) -> str:
        """What is reduced, what is staged, and the workspace decisions."""
        return _reason(self._base, self._variants)

    def __repr__(self) -> str:
        return f"CutensorReductionPlan(route={self.route!r}, reason={self.reason!r})"

    def _build(self, alignments: tuple[int, ...]) -> PlannedOperation:
        handle = Handle.for_device(self.device)
        a, c, d = alignments
        ta = TensorDescriptor(handle, self._a.spec, a)
        td = TensorDescriptor(handle, self._d.spec, d)
        tc = td if c == d else TensorDescriptor(handle, self._d.spec, c)
        p = self.problem
        op = OperationDescriptor.reduction(
            handle, ta, int(p.op_a), tc, td, int(p.op_reduce), p.d.dtype
        )
        return PlannedOperation(handle, op, self._limit, self.context, uses_workspace=True)

    def execute(self, a: Any, d: Any, alpha: complex = 1, beta: complex = 0, c: Any = None) -> None:
        """Write the reduction into ``d``; ``c`` (D's shape) is read when beta != 0."""
        check_device(self.device, (a, c, d), self.context)
        keep: list[Any] = []
        pa = self._a.read(a, keep)
        target = self._d.target(d)
        pd = pc = self._d.write_pointer(target)
        read_c = beta != 0 and c is not None
        if read_c:
            pc = self._d.addend(c, d, target)
        variant = self._variants(tuple(pointer_alignment(x) for x in (pa, pc, pd)))
        scalars = self._scalars(alpha), self._scalars(beta if read_c else 0)
        stream = cupy.cuda.get_current_stream()
        cutensor.reduce(variant, (scalars[0][1], scalars[1][1]), (pa, pc, pd), self.device, stream)
        self._d.write_back(target, d)


class _ElementwiseVariant:
    """The main operation, and the one that first sets D to gamma * op_c(C) when no
    operand is laid out like D."""

    __slots__ = ("main", "stage")

    def __init__(self, main: PlannedOperation, stage: PlannedOperation | None) -> None:
        self.main, self.stage = main, stage


class CutensorElementwisePlan:
    """D = op_abc(op_ab(alpha*op_a(A), beta*op_b(B)), gamma*op_c(C)) through
    cutensorElementwiseBinary/TrinaryExecute (binary: no B, op_abc combines A and C)."""

    route = "cutensor"

    def __init__(self, problem: ElementwiseProblem, device: int) -> None:
        p = self.problem = problem
        self.device = device
        names = "AC" if p.b is None else "ABC"
        self.context = f"element-wise {','.join(s.labels for s in self._inputs())}->{p.d.labels}"
        specs = orient([*self._inputs(), p.d])
        item = np.dtype(p.d.dtype).itemsize
        operands = [Operand(s, len(t.labels), item) for s, t in zip(specs, [*self._inputs(), p.d])]
        *inputs, self._d = operands
        # Indexed by operand number: 0 = A, 1 = B, 2 = C.
        self._operands: dict[int, Operand] = dict(zip((0, 2) if p.b is None else (0, 1, 2), inputs))
        self._roles = elementwise_roles(
            p, self._operands[0].spec, None if p.b is None else self._operands[1].spec,
            self._operands[2].spec, self._d.spec,
        )
        self._ops = {0: int(p.op_a), 1: int(p.op_b), 2: int(p.op_c)}
        self._scalars = HostScalars(p.d.dtype)
        staged = ""
        if self._roles.stage_c:
            staged = " (C first written into D: no operand is laid out like D)"
        self.reason = f"cuTENSOR element-wise {names}{staging_note(names + 'D', specs)}{staged}"
        self._variants = Variants(self._build)
        guess = {k: expected_alignment(o.spec, item) for k, o in self._operands.items()}
        self._variants(self._key(guess, expected_alignment(self._d.spec, item)))

    def __repr__(self) -> str:
        return f"CutensorElementwisePlan(route={self.route!r}, reason={self.reason!r})"

    def _inputs(self) -> list[Any]:
        p = self.problem
        return [p.a, p.c] if p.b is None else [p.a, p.b, p.c]

    def _key(self, alignments: dict[int, int], d: int) -> tuple[int, ...]:
        """Alignments of the role operands, then D, then (staged) the C operand.

        When C is staged into D, D itself plays the C role.
        """
        order = self._roles.order
        if self._roles.stage_c:
            return (*(alignments[k] for k in order[:-1]), d, d, alignments[2])
        return (*(alignments[k] for k in order), d)

    def _build(self, key: tuple[int, ...]) -> _ElementwiseVariant:
        handle = Handle.for_device(self.device)
        roles, dtype = self._roles, self.problem.d.dtype
        count = len(roles.order)
        td = TensorDescriptor(handle, self._d.spec, key[count])
        inputs = [
            (TensorDescriptor(handle, self._operands[k].spec, key[i]), self._ops[k])
            for i, k in enumerate(roles.order[:-1])
        ]
        stage = None
        if roles.stage_c:
            inputs.append((td, IDENTITY))
            tc = TensorDescriptor(handle, self._operands[2].spec, key[count + 1])
            staging = OperationDescriptor.elementwise(
                handle, [(tc, self._ops[2]), (td, IDENTITY)], td, [int(BinaryOp.ADD)], dtype
            )
            stage = PlannedOperation(handle, staging, None, self.context, uses_workspace=False)
        else:
            last = roles.order[-1]
            inputs.append((TensorDescriptor(handle, self._d.spec, key[count - 1]), self._ops[last]))
        p = self.problem
        binary = [int(p.op_abc)] if p.b is None else [int(p.op_ab), int(p.op_abc)]
        main = OperationDescriptor.elementwise(handle, inputs, td, binary, dtype)
        return _ElementwiseVariant(
            PlannedOperation(handle, main, None, self.context, uses_workspace=False), stage
        )

    def execute(
        self,
        a: Any,
        b: Any,
        c: Any,
        d: Any,
        alpha: complex = 1,
        beta: complex = 1,
        gamma: complex = 1,
    ) -> None:
        """Write the result into ``d`` (``b`` is None for a binary problem)."""
        check_device(self.device, (a, b, c, d), self.context)
        keep: list[Any] = []
        arrays, values = {0: a, 1: b, 2: c}, {0: alpha, 1: beta, 2: gamma}
        pointers = {k: op.read(arrays[k], keep) for k, op in self._operands.items()}
        target = self._d.target(d)
        pd = self._d.write_pointer(target)
        variant = self._variants(
            self._key({k: pointer_alignment(x) for k, x in pointers.items()}, pointer_alignment(pd))
        )
        stream = cupy.cuda.get_current_stream()
        one = self._scalars(1)
        order = self._roles.order
        if variant.stage is not None:
            target.fill(0)
            scale = self._scalars(gamma)
            cutensor.elementwise(variant.stage, [(scale[1], pointers[2]), (one[1], pd)], pd, stream)
            order = order[:-1]
        scaled = [self._scalars(values[k]) for k in order]
        pairs = [(s[1], pointers[k]) for s, k in zip(scaled, order)]
        if variant.stage is not None:
            pairs.append((one[1], pd))
        cutensor.elementwise(variant.main, pairs, pd, stream)
        self._d.write_back(target, d)
