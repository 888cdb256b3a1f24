"""Emulated cuTENSOR execute calls: the documented checks, then the math in NumPy.

Before computing, each call checks: the plan's kind, the active device (ARCH_MISMATCH),
the stream, every pointer's alignment against its descriptor (INVALID_VALUE), that
every element lies in a live allocation of the device (:class:`memory.IllegalAddress`),
the workspace (size, 256-byte alignment, bounds), and that no input overlaps the
elements written to D unless C is D, and no tensor whose strides address an element
twice (:class:`UndefinedBehaviour`). Scalars are read from host memory as the
operation's scalar type. C is not read when beta is 0 (BLAS's convention); an
element-wise input whose scalar is 0 is not read either, except in strict mode, which
holds to cutensor.h's "may be read even if the value of the corresponding scalar is
zero" (fresh emulated memory reads as NaN, so relying on it shows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cutensor_objects as objects
from . import memory, runtime
from .cutensor_objects import Plan, Term
from .cutensor_types import BINARY_OPS, DTYPES, REDUCE_OPS, UNARY, Status, fail
from .signatures import binding

WORKSPACE_ALIGNMENT = 256


class UndefinedBehaviour(RuntimeError):
    """A documented precondition was broken: on a GPU, the result would be undefined."""


class _Call:
    """One execute call: its plan, device, the regions it reads and the one it writes."""

    def __init__(self, handle: int, plan: int, kinds: tuple[str, ...], stream: int) -> None:
        objects.get(handle, "handle", "handle")
        self.plan: Plan = objects.get(plan, "plan", "plan")
        self.operation = self.plan.operation
        if self.operation.kind not in kinds:
            raise fail(Status.INVALID_VALUE, f"a {self.operation.kind} plan passed to a "
                                             f"{'/'.join(kinds)} call")
        self.device = runtime.current_device()
        if self.device != self.plan.device:
            raise fail(Status.ARCH_MISMATCH, f"plan created on device {self.plan.device}, "
                                             f"executed on device {self.device}")
        if runtime.stream_device(stream) != self.device:
            raise fail(Status.CUDA_ERROR, f"stream {stream:#x} is not a live stream of device "
                                          f"{self.device}")
        current = runtime.get_current_stream().ptr
        if objects.STRICT and stream != current:
            # Work off CuPy's current stream races with the caller's (nothing here waits).
            raise UndefinedBehaviour(f"{self.operation.kind} on stream {stream:#x}, but CuPy's "
                                     f"current stream is {current:#x} (strict)")
        self.reads: dict[str, memory.Region] = {}
        self.written: tuple[str, memory.Region, np.ndarray] | None = None

    def scalar(self, pointer: int) -> Any:
        return memory.read_host(pointer, DTYPES[self.operation.scalar_type])[0]

    def _region(self, role: str, pointer: int) -> tuple[memory.Region, np.ndarray]:
        """The checked region of ``role``'s tensor at ``pointer``, and a view of it."""
        tensor = self.operation.terms[role].tensor
        if pointer % tensor.alignment:
            raise fail(Status.INVALID_VALUE, f"{role} at {pointer:#x} is not aligned to the "
                                             f"{tensor.alignment} bytes its descriptor states")
        region = tensor.region(pointer, DTYPES[tensor.data_type].itemsize)
        values = memory.view(region, DTYPES[tensor.data_type], self.device,
                             f"{self.operation.kind} {role}")
        if memory.self_overlap(region):  # cutensor.h: strides must not overlap
            raise UndefinedBehaviour(f"{role}'s strides address one element twice")
        return region, values

    def read(self, role: str, pointer: int, scalar: Any = 1) -> Any:
        """op(X) of an input; 0 (X unread) when its scalar is 0, but in strict mode,
        where cutensor.h's "may be read even if the scalar is zero" holds."""
        region, values = self._region(role, pointer)
        self.reads[role] = region
        if scalar == 0 and not objects.STRICT:
            return 0
        return UNARY[self.operation.terms[role].op](values)

    def output(self, role: str, pointer: int, in_place: str = "") -> None:
        """Register the tensor written; no input may overlap it (``in_place``, C when
        it is D itself, excepted)."""
        region, target = self._region(role, pointer)
        for name, read in self.reads.items():
            if name == in_place and read == region:
                continue
            if memory.overlap(read, region):
                raise UndefinedBehaviour(f"{name} overlaps the elements written to {role} "
                                         f"({self.operation.kind})")
        self.written = (role, region, target)

    def workspace(self, pointer: int, size: int) -> None:
        if size < self.plan.required_workspace:
            raise fail(Status.INSUFFICIENT_WORKSPACE, f"workspace of {size} bytes, the plan "
                                                      f"needs {self.plan.required_workspace}")
        if size == 0:
            return
        if pointer % WORKSPACE_ALIGNMENT:
            raise fail(Status.INVALID_VALUE, f"workspace {pointer:#x} is not 256-byte aligned")
        region = memory.Region(pointer, 1, (size,), (1,))
        memory.view(region, np.dtype(np.uint8), self.device, "workspace")
        tensors = dict(self.reads)
        if self.written is not None:
            tensors[self.written[0]] = self.written[1]
        for name, tensor in tensors.items():
            if memory.overlap(region, tensor):
                raise UndefinedBehaviour(f"the workspace overlaps {name}")

    def store(self, values: Any) -> None:
        """Write the result into the registered output."""
        assert self.written is not None
        target = self.written[2]
        values = np.broadcast_to(values, target.shape)
        target[...] = values if target.dtype.kind == "c" else np.real(values)

    def arrange(self, role: str, values: Any, target: str) -> Any:
        """``values`` (in ``role``'s mode order) with ``target``'s modes, broadcast."""
        if np.ndim(values) == 0:
            return values
        terms = self.operation.terms
        modes, wanted = terms[role].modes, terms[target].modes
        extents = dict(zip(wanted, terms[target].tensor.extents))
        moved = np.transpose(values, [modes.index(m) for m in wanted if m in modes])
        shape = [extents[m] if m in modes else 1 for m in wanted]
        return np.broadcast_to(moved.reshape(shape), [extents[m] for m in wanted])


def _letters(*terms: Term) -> list[str]:
    names: dict[int, str] = {}
    for term in terms:
        for mode in term.modes:
            names.setdefault(mode, chr(ord("a") + len(names)) if len(names) < 26
                             else chr(ord("A") + len(names) - 26))
    return ["".join(names[m] for m in term.modes) for term in terms]


@binding(
    "contract(intptr_t handle, intptr_t plan, intptr_t alpha, intptr_t a, intptr_t b, "
    "intptr_t beta, intptr_t c, intptr_t d, intptr_t workspace, uint64_t workspace_size, "
    "intptr_t stream)"
)
def contract(handle, plan, alpha, a, b, beta, c, d, workspace, workspace_size, stream):
    call = _Call(handle, plan, ("contraction",), stream)
    alpha_value, beta_value = call.scalar(alpha), call.scalar(beta)
    terms = call.operation.terms
    values_a, values_b = call.read("A", a), call.read("B", b)
    values_c = call.read("C", c) if beta_value != 0 else None  # BLAS: C unread at beta 0
    call.output("D", d, in_place="C")
    call.workspace(workspace, workspace_size)
    la, lb, ld = _letters(terms["A"], terms["B"], terms["D"])
    product = alpha_value * np.einsum(f"{la},{lb}->{ld}", values_a, values_b, optimize=True)
    call.store(product if values_c is None else product + beta_value * values_c)


@binding(
    "reduce(intptr_t handle, intptr_t plan, intptr_t alpha, intptr_t a, intptr_t beta, "
    "intptr_t c, intptr_t d, intptr_t workspace, uint64_t workspace_size, intptr_t stream)"
)
def reduce(handle, plan, alpha, a, beta, c, d, workspace, workspace_size, stream):
    call = _Call(handle, plan, ("reduction",), stream)
    alpha_value, beta_value = call.scalar(alpha), call.scalar(beta)
    terms = call.operation.terms
    values_a = call.read("A", a)
    values_c = call.read("C", c) if beta_value != 0 else None
    call.output("D", d, in_place="C")
    call.workspace(workspace, workspace_size)
    kept = terms["D"].modes
    reduced = [m for m in terms["A"].modes if m not in kept]
    moved = np.transpose(values_a, [terms["A"].modes.index(m) for m in (*kept, *reduced)])
    fold = REDUCE_OPS[call.operation.binary_ops[0]]
    folded = fold(moved, axis=tuple(range(len(kept), moved.ndim))) if reduced else moved
    scaled = alpha_value * folded
    call.store(scaled if values_c is None else scaled + beta_value * values_c)


@binding(
    "permute(intptr_t handle, intptr_t plan, intptr_t alpha, intptr_t a, intptr_t b, "
    "intptr_t stream)"
)
def permute(handle, plan, alpha, a, b, stream):
    call = _Call(handle, plan, ("permutation",), stream)
    alpha_value = call.scalar(alpha)
    values_a = call.read("A", a, alpha_value)
    call.output("B", b)
    call.store(alpha_value * call.arrange("A", values_a, "B"))


def _elementwise(call: _Call, scaled: dict[str, tuple[int, int]], d: int) -> None:
    values = {}
    for role, (scalar_pointer, pointer) in scaled.items():
        scalar = call.scalar(scalar_pointer)
        values[role] = scalar * call.arrange(role, call.read(role, pointer, scalar), "D")
    call.output("D", d, in_place="C")
    ops = [BINARY_OPS[op] for op in call.operation.binary_ops]
    if len(ops) == 1:
        call.store(ops[0](values["A"], values["C"]))
    else:
        call.store(ops[1](ops[0](values["A"], values["B"]), values["C"]))


@binding(
    "elementwise_binary_execute(intptr_t handle, intptr_t plan, intptr_t alpha, intptr_t a, "
    "intptr_t gamma, intptr_t c, intptr_t d, intptr_t stream)"
)
def elementwise_binary_execute(handle, plan, alpha, a, gamma, c, d, stream):
    call = _Call(handle, plan, ("binary",), stream)
    _elementwise(call, {"A": (alpha, a), "C": (gamma, c)}, d)


@binding(
    "elementwise_trinary_execute(intptr_t handle, intptr_t plan, intptr_t alpha, intptr_t a, "
    "intptr_t beta, intptr_t b, intptr_t gamma, intptr_t c, intptr_t d, intptr_t stream)"
)
def elementwise_trinary_execute(handle, plan, alpha, a, beta, b, gamma, c, d, stream):
    call = _Call(handle, plan, ("trinary",), stream)
    _elementwise(call, {"A": (alpha, a), "B": (beta, b), "C": (gamma, c)}, d)
