"""The GPU backend's contraction, permutation and reduction plans on cuTENSOR.

A plan holds the oriented descriptor specs of its problem, in forms ``cutensor.h``
documents (:func:`gpu_tc.cuda.descriptors.documented_forms`); the cuTENSOR objects (tensor
and operation descriptors, preference, plan, workspace size) are built per tuple of
base-pointer alignments, eagerly for the alignment fresh CuPy arrays have, so a warm
call is one dictionary lookup and one cuTENSOR execute call on CuPy's current stream.
C and D share one descriptor (``cutensor.h``: descC must be identical to descD),
aligned for the less aligned of the two pointers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from typing import Any

import cupy
import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.errors import BackendError, OptionsError
from gpu_tc.options import BinaryOp, Options, UnaryOp
from gpu_tc.problem import ContractionProblem, PermutationProblem, ReductionProblem

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
from .operands import Operand, Variants, check_device, new_result_call
from .planned import PlannedOperation
from .unary_rules import cutensor_unary
from .workspace import workspace_cap

IDENTITY = int(UnaryOp.IDENTITY)
NOT_SUPPORTED = "CUTENSOR_STATUS_NOT_SUPPORTED"


def variants_reason(base: str, variants: Variants) -> str:
    """``base`` and the distinct workspace decisions of the variants built."""
    notes = dict.fromkeys(v.decision for v in variants.all() if v.decision)
    return "; ".join([base, *notes])


def refusing(operators: Mapping[str, IntEnum], context: str) -> Callable[[BackendError], None]:
    """A check that turns cuTENSOR's NOT_SUPPORTED into an error naming the operators
    that are not the default ones (cuTENSOR's support matrix is per operation)."""
    chosen = {name: op for name, op in operators.items() if op not in (UnaryOp.IDENTITY,
                                                                       BinaryOp.ADD)}

    def check(err: BackendError) -> None:
        if err.status == NOT_SUPPORTED and chosen:
            named = ", ".join(f"{name}={op.name}" for name, op in chosen.items())
            raise OptionsError(
                f"cuTENSOR does not support {named} in the {context} ({NOT_SUPPORTED}): "
                "apply the operator in a separate step, or run on the CPU"
            ) from err

    return check


class CutensorContractionPlan(PlanDefaults):
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
        oriented = orient((p.a, p.b, p.d))
        specs, lowered = documented_forms(oriented, contraction=True)
        item = np.dtype(p.d.dtype).itemsize
        self._a, self._b, self._d = (
            Operand(s, len(t.labels), item) for s, t in zip(specs, (p.a, p.b, p.d))
        )
        self._staged = staged_bytes(specs, (p.a, p.b, p.d), item)
        self._limit = workspace_cap(options.workspace_limit, options.memory_limit, self._staged)
        self._base = (
            f"cuTENSOR contraction{staging_note('ABD', specs)}{lowered}; not cuBLAS: {why}"
        )
        self._variants = Variants(self._build)
        first = self._variants(tuple(expected_alignment(s, item) for s in specs))
        self.temporary_bytes = self._staged + first.workspace_size
        self.fresh = new_result_call(self, p.d)

    @property
    def reason(self) -> str:
        """Why cuTENSOR, what is staged or lowered, and the workspace decisions."""
        return variants_reason(self._base, self._variants)
    def __repr__(self) -> str:
        return f"CutensorContractionPlan(route={self.route!r}, reason={self.reason!r})"

    def _build(self, alignments: tuple[int, ...]) -> PlannedOperation:
        """The planned operation for the alignments of A, B and (C and D)."""
        handle = Handle.for_device(self.device)
        a, b, cd = alignments
        ta = TensorDescriptor(handle, self._a.spec, a)
        tb = TensorDescriptor(handle, self._b.spec, b)
        td = TensorDescriptor(handle, self._d.spec, cd)
        op = OperationDescriptor.contraction(handle, ta, tb, td, td, self.problem.d.dtype)
        return PlannedOperation(handle, op, self._limit, self.context, uses_workspace=True)

    def autotune(self, iterations: int) -> bool:
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
        with cupy.cuda.Device(self.device):  # cuTENSOR plans for the active device
            for variant in self._variants.all():
                variant.autotune(iterations)
        return True

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write the result into ``d``; ``c`` (D's shape) is read when beta != 0."""
        a, b = inputs
        alpha, beta = scalars.alpha, scalars.beta
        check_device(self.device, (a, b, c, d), self.context)
        keep: list[Any] = []
        pa, pb = self._a.read(a, keep), self._b.read(b, keep)
        target = self._d.target(d)
        pd = pc = self._d.write_pointer(target)
        read_c = beta != 0 and c is not None
        if read_c:
            pc = self._d.addend(c, d, target)
        cd = min(pointer_alignment(pc), pointer_alignment(pd))
        variant = self._variants((pointer_alignment(pa), pointer_alignment(pb), cd))
        held = variant.scalars(alpha), variant.scalars(beta if read_c else 0)
        stream = cupy.cuda.get_current_stream()
        planned.contract(
            variant, (held[0][1], held[1][1]), (pa, pb, pc, pd), self.device, stream
        )
        self._d.write_back(target, d)


class CutensorPermutationPlan(PlanDefaults):
    """B = alpha * op(A), permuted, through cutensorPermute; where cuTENSOR refuses
    the operator in a permutation, through an element-wise binary operation
    (D = alpha op(A) + 0 * C, C not read), which ``reason`` then says."""

    route = "cutensor"

    def __init__(self, problem: PermutationProblem, device: int) -> None:
        p = self.problem = problem
        self.device = device
        self.context = f"permutation {p.a.labels}->{p.b.labels}"
        specs, lowered = documented_forms(orient((p.a, p.b)))
        item = np.dtype(p.b.dtype).itemsize
        self._a, self._b = (Operand(s, len(t.labels), item) for s, t in zip(specs, (p.a, p.b)))
        op = "" if p.op_a is UnaryOp.IDENTITY else f" applying {p.op_a.name}"
        self._base = f"cuTENSOR permutation{op}{staging_note('AB', specs)}{lowered}"
        self._refused = refusing({"op_a": p.op_a}, self.context)
        self._variants = Variants(self._build)
        self._variants(tuple(expected_alignment(s, item) for s in specs))
        self.temporary_bytes = staged_bytes(specs, (p.a, p.b), item)

    @property
    def reason(self) -> str:
        """What is permuted, staged or lowered."""
        if any(v.lowered for v in self._variants.all()):
            return (f"{self._base}; cuTENSOR refuses {self.problem.op_a.name} in a "
                    "permutation: run as an element-wise binary operation (C not read)")
        return self._base

    def __repr__(self) -> str:
        return f"CutensorPermutationPlan(route={self.route!r}, reason={self.reason!r})"

    def _build(self, alignments: tuple[int, ...]) -> PlannedOperation:
        handle = Handle.for_device(self.device)
        ta = TensorDescriptor(handle, self._a.spec, alignments[0])
        tb = TensorDescriptor(handle, self._b.spec, alignments[1])
        p = self.problem
        op_a = cutensor_unary(p.op_a, p.b.dtype)
        try:
            op = OperationDescriptor.permutation(handle, ta, op_a, tb, p.b.dtype)
            return PlannedOperation(handle, op, None, self.context, uses_workspace=False)
        except BackendError as err:
            if err.status != NOT_SUPPORTED or p.op_a is UnaryOp.IDENTITY:
                raise
        try:
            op = OperationDescriptor.elementwise(
                handle, [(ta, op_a), (tb, IDENTITY)], tb, [int(BinaryOp.ADD)], p.b.dtype
            )
            operation = PlannedOperation(handle, op, None, self.context, uses_workspace=False)
        except BackendError as err:
            self._refused(err)
            raise
        operation.lowered = True
        return operation

    def execute(self, inputs: Sequence[Any], b: Any, scalars: Scalars, addend: Any) -> None:
        """Write alpha * op(a), permuted, into ``b``."""
        a, alpha = inputs[0], scalars.alpha
        check_device(self.device, (a, b), self.context)
        keep: list[Any] = []
        pa = self._a.read(a, keep)
        target = self._b.target(b)
        pb = self._b.write_pointer(target)
        variant = self._variants((pointer_alignment(pa), pointer_alignment(pb)))
        scalar = variant.scalars(alpha)
        stream = cupy.cuda.get_current_stream()
        if variant.lowered:  # B = alpha op(A) + 0 * B, B zeroed should C be read anyway
            target.fill(0)
            zero = variant.scalars(0)
            planned.elementwise(variant, [(scalar[1], pa), (zero[1], pb)], pb, stream)
        else:
            planned.permute(variant, scalar[1], pa, pb, stream)
        self._b.write_back(target, b)


class CutensorReductionPlan(PlanDefaults):
    """D = alpha * reduce(op(A)) + beta * C through cutensorReduce; a trace or a
    diagonal arrives as A with summed strides, so nothing is copied."""

    route = "cutensor"

    def __init__(self, problem: ReductionProblem, options: Options, device: int) -> None:
        p = self.problem = problem
        self.device = device
        self.context = f"reduction {p.a.labels}->{p.d.labels}"
        specs, lowered = documented_forms(orient((p.a, p.d)))
        item = np.dtype(p.d.dtype).itemsize
        self._a, self._d = (Operand(s, len(t.labels), item) for s, t in zip(specs, (p.a, p.d)))
        self._staged = staged_bytes(specs, (p.a, p.d), item)
        self._limit = workspace_cap(options.workspace_limit, options.memory_limit, self._staged)
        self._base = (
            f"cuTENSOR {p.op_reduce.name} reduction over {len(p.reduced)} label(s)"
            f"{staging_note('AD', specs)}{lowered}"
        )
        self._refused = refusing({"op_a": p.op_a, "op_reduce": p.op_reduce}, self.context)
        self._variants = Variants(self._build)
        first = self._variants(tuple(expected_alignment(s, item) for s in specs))
        self.temporary_bytes = self._staged + first.workspace_size
        self.fresh = new_result_call(self, p.d)

    @property
    def reason(self) -> str:
        """What is reduced, staged or lowered, and the workspace decisions."""
        return variants_reason(self._base, self._variants)
    def __repr__(self) -> str:
        return f"CutensorReductionPlan(route={self.route!r}, reason={self.reason!r})"

    def _build(self, alignments: tuple[int, ...]) -> PlannedOperation:
        """The planned operation for the alignments of A and (C and D)."""
        handle = Handle.for_device(self.device)
        a, cd = alignments
        ta = TensorDescriptor(handle, self._a.spec, a)
        td = TensorDescriptor(handle, self._d.spec, cd)
        p = self.problem
        try:
            op = OperationDescriptor.reduction(
                handle, ta, cutensor_unary(p.op_a, p.d.dtype), td, td, int(p.op_reduce), p.d.dtype
            )
            return PlannedOperation(handle, op, self._limit, self.context, uses_workspace=True)
        except BackendError as err:
            self._refused(err)
            raise

    def execute(self, inputs: Sequence[Any], d: Any, scalars: Scalars, c: Any) -> None:
        """Write the reduction into ``d``; ``c`` (D's shape) is read when beta != 0."""
        a = inputs[0]
        alpha, beta = scalars.alpha, scalars.beta
        check_device(self.device, (a, c, d), self.context)
        keep: list[Any] = []
        pa = self._a.read(a, keep)
        target = self._d.target(d)
        pd = pc = self._d.write_pointer(target)
        read_c = beta != 0 and c is not None
        if read_c:
            pc = self._d.addend(c, d, target)
        cd = min(pointer_alignment(pc), pointer_alignment(pd))
        variant = self._variants((pointer_alignment(pa), cd))
        held = variant.scalars(alpha), variant.scalars(beta if read_c else 0)
        stream = cupy.cuda.get_current_stream()
        planned.reduce(variant, (held[0][1], held[1][1]), (pa, pc, pd), self.device, stream)
        self._d.write_back(target, d)
