"""Emulated cuTENSOR execute calls: the documented checks, then the math in NumPy.

Before computing, each call checks: the plan's kind, the active device (ARCH_MISMATCH),
the stream, every pointer's alignment against its descriptor (INVALID_VALUE), that
every element lies in a live allocation of the device (:class:`memory.IllegalAddress`),
the workspace (size, 256-byte alignment, bounds), and that no input overlaps the
elements written to D unless C is D (:class:`UndefinedBehaviour`). Scalars are read from
host memory as the operation's scalar type; a tensor whose scalar is zero is not read.
"""

from __future__ import annotations

from collections.abc import Callable
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
    """One execute call: its plan, device, and the regions it read and wrote."""

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

    def scalar(self, pointer: int) -> Any:
        return memory.read_host(pointer, DTYPES[self.operation.scalar_type])[0]

    def region(self, role: str, pointer: int) -> memory.Region:
        tensor = self.operation.terms[role].tensor
        if pointer % tensor.alignment:
            raise fail(Status.INVALID_VALUE, f"{role} at {pointer:#x} is not aligned to the "
                                             f"{tensor.alignment} bytes its descriptor states")
        return tensor.region(pointer, DTYPES[tensor.data_type].itemsize)

    def read(self, role: str, pointer: int) -> np.ndarray:
        """op(X) of an input, arranged in D's modes (broadcast where X lacks one)."""
        term = self.operation.terms[role]
        region = self.reads[role] = self.region(role, pointer)
        values = memory.view(region, DTYPES[term.tensor.data_type], self.device,
                             f"{self.operation.kind} {role}")
        return UNARY[term.op](values)

    def write(self, role: str, pointer: int, result: Callable[[], np.ndarray],
              in_place: str = "") -> None:
        """Check overlaps and the workspace, then compute and store ``role``'s tensor.

        ``in_place`` names the input that may be the output itself (C when C is D).
        """
        term = self.operation.terms[role]
        region = self.region(role, pointer)
        target = memory.view(region, DTYPES[term.tensor.data_type], self.device,
                             f"{self.operation.kind} {role}")
        if memory.self_overlap(region):
            raise UndefinedBehaviour(f"{role}'s elements overlap one another: writing it races")
        for name, read in self.reads.items():
            if name == in_place and read == region:
                continue
            if memory.overlap(read, region):
                raise UndefinedBehaviour(f"{name} overlaps the elements written to {role} "
                                         f"({self.operation.kind})")
        values = result()
        if target.dtype.kind != "c":
            values = np.real(values)
        target[...] = values

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
        for name, read in self.reads.items():
            if memory.overlap(region, read):
                raise UndefinedBehaviour(f"the workspace overlaps {name}")

    def arrange(self, role: str, values: np.ndarray, target: str) -> np.ndarray:
        """``values`` (in ``role``'s mode order) with ``target``'s modes, broadcast."""
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
    values_c = call.read("C", c) if beta_value != 0 else None
    call.workspace(workspace, workspace_size)
    la, lb, ld = _letters(terms["A"], terms["B"], terms["D"])

    def result() -> np.ndarray:
        product = alpha_value * np.einsum(f"{la},{lb}->{ld}", values_a, values_b, optimize=True)
        return product if values_c is None else product + beta_value * values_c

    call.write("D", d, result, in_place="C")


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
    call.workspace(workspace, workspace_size)
    kept = terms["D"].modes
    reduced = [m for m in terms["A"].modes if m not in kept]
    order = [terms["A"].modes.index(m) for m in (*kept, *reduced)]
    fold = REDUCE_OPS[call.operation.binary_ops[0]]

    def result() -> np.ndarray:
        moved = np.transpose(values_a, order)
        folded = fold(moved, axis=tuple(range(len(kept), moved.ndim))) if reduced else moved
        scaled = alpha_value * folded
        return scaled if values_c is None else scaled + beta_value * values_c

    call.write("D", d, result, in_place="C")


@binding(
    "permute(intptr_t handle, intptr_t plan, intptr_t alpha, intptr_t a, intptr_t b, "
    "intptr_t stream)"
)
def permute(handle, plan, alpha, a, b, stream):
    call = _Call(handle, plan, ("permutation",), stream)
    alpha_value = call.scalar(alpha)
    values_a = call.read("A", a) if alpha_value != 0 else None
    extents = call.operation.terms["B"].tensor.extents

    def result() -> np.ndarray:
        if values_a is None:
            return np.zeros(extents)
        return alpha_value * call.arrange("A", values_a, "B")

    call.write("B", b, result)


def _elementwise(call: _Call, scaled: dict[str, tuple[int, int]], d: int) -> None:
    values = {}
    for role, (scalar_pointer, pointer) in scaled.items():
        scalar = call.scalar(scalar_pointer)
        values[role] = (scalar * call.arrange(role, call.read(role, pointer), "D")
                        if scalar != 0 else 0)
    ops = [BINARY_OPS[op] for op in call.operation.binary_ops]
    extents = call.operation.terms["D"].tensor.extents

    def result() -> np.ndarray:
        if len(ops) == 1:
            combined = ops[0](values["A"], values["C"])
        else:
            combined = ops[1](ops[0](values["A"], values["B"]), values["C"])
        return np.broadcast_to(combined, extents)

    call.write("D", d, result, in_place="C")


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
