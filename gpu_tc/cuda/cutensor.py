"""Owned wrappers over ``nvmath.bindings.cutensor`` (cuTENSOR 2.x) and its execute calls.

Every C object belongs to one small Python object that destroys it exactly once
(``weakref.finalize``, which also runs at exit, newest first, so plans go before the
handle). cuTENSOR errors become :class:`gpu_tc.errors.BackendError` carrying the
status name. Workspace comes from CuPy's memory pool, one buffer per device and
stream, grown on demand.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import cupy
import numpy as np
from nvmath.bindings import cutensor as ct

from gpu_tc.errors import BackendError, WorkspaceError

from .specs import COMPUTE_DESCRIPTORS, DescriptorSpec, choose_workspace, fallback_note


def status_name(err: Any) -> str:
    """The C name of a cuTENSOR status, e.g. "CUTENSOR_STATUS_NOT_SUPPORTED"."""
    try:
        return "CUTENSOR_STATUS_" + ct.Status(int(err.status)).name
    except (AttributeError, TypeError, ValueError):
        return "CUTENSOR_STATUS_UNKNOWN"


def call(what: str, function: Callable[..., Any], *args: Any) -> Any:
    """Call a binding; a cuTENSOR error becomes a BackendError naming ``what``."""
    try:
        return function(*args)
    except ct.cuTENSORError as err:
        status = status_name(err)
        raise BackendError(f"cuTENSOR {what} failed with {status}", status=status) from err


class Handle:
    """The cuTENSOR handle of one device, created on first use and kept until exit."""

    _handles: dict[int, Handle] = {}
    _lock = threading.Lock()

    def __init__(self, device: int) -> None:
        with cupy.cuda.Device(device):
            try:
                self.ptr: int = call("cutensorCreate", ct.create)
            except (ImportError, RuntimeError) as err:
                if isinstance(err, BackendError):
                    raise
                raise BackendError(
                    f"cuTENSOR could not be loaded ({err}): install cutensor-cu13 "
                    "(pip install gpu-tc[gpu])",
                    status="CUTENSOR_STATUS_NOT_INITIALIZED",
                ) from err
        self.device = device
        self._finalizer = weakref.finalize(self, ct.destroy, self.ptr)

    @classmethod
    def for_device(cls, device: int) -> Handle:
        """The handle of ``device``, created on first use."""
        handle = cls._handles.get(device)
        if handle is None:
            with cls._lock:
                handle = cls._handles.get(device)
                if handle is None:
                    handle = cls._handles[device] = cls(device)
        return handle


class TensorDescriptor:
    """A cutensorTensorDescriptor_t for a descriptor spec and a base-pointer alignment."""

    def __init__(self, handle: Handle, spec: DescriptorSpec, alignment: int) -> None:
        self.ptr: int = call(
            "cutensorCreateTensorDescriptor",
            ct.create_tensor_descriptor,
            handle.ptr,
            len(spec.modes),
            spec.extents,
            spec.strides,
            spec.data_type,
            alignment,
        )
        self.modes = spec.modes
        self._finalizer = weakref.finalize(self, ct.destroy_tensor_descriptor, self.ptr)


def compute_descriptor(dtype: str) -> int:
    """The cutensorComputeDescriptor_t (a library address) for a dtype character."""
    return getattr(ct.ComputeDesc, COMPUTE_DESCRIPTORS[dtype])()


class OperationDescriptor:
    """A cutensorOperationDescriptor_t; made by the class methods, one per operation."""

    def __init__(self, handle: Handle, ptr: int, tensors: Sequence[TensorDescriptor]) -> None:
        self.ptr = ptr
        self._keep = (handle, tuple(tensors))  # the descriptors outlive the operation
        self._finalizer = weakref.finalize(self, ct.destroy_operation_descriptor, ptr)

    @classmethod
    def contraction(
        cls,
        handle: Handle,
        a: TensorDescriptor,
        b: TensorDescriptor,
        c: TensorDescriptor,
        d: TensorDescriptor,
        dtype: str,
    ) -> OperationDescriptor:
        """D = alpha A B + beta C (C shares D's modes)."""
        identity = int(ct.Operator.OP_IDENTITY)
        ptr = call(
            "cutensorCreateContraction",
            ct.create_contraction,
            handle.ptr,
            a.ptr, a.modes, identity,
            b.ptr, b.modes, identity,
            c.ptr, d.modes, identity,
            d.ptr, d.modes,
            compute_descriptor(dtype),
        )
        return cls(handle, ptr, (a, b, c, d))

    @classmethod
    def permutation(
        cls, handle: Handle, a: TensorDescriptor, op_a: int, b: TensorDescriptor, dtype: str
    ) -> OperationDescriptor:
        """B = alpha op_a(A), permuted."""
        ptr = call(
            "cutensorCreatePermutation",
            ct.create_permutation,
            handle.ptr, a.ptr, a.modes, op_a, b.ptr, b.modes, compute_descriptor(dtype),
        )
        return cls(handle, ptr, (a, b))

    @classmethod
    def reduction(
        cls,
        handle: Handle,
        a: TensorDescriptor,
        op_a: int,
        c: TensorDescriptor,
        d: TensorDescriptor,
        op_reduce: int,
        dtype: str,
    ) -> OperationDescriptor:
        """D = alpha reduce(op_a(A)) + beta C (C shares D's modes)."""
        ptr = call(
            "cutensorCreateReduction",
            ct.create_reduction,
            handle.ptr,
            a.ptr, a.modes, op_a,
            c.ptr, d.modes, int(ct.Operator.OP_IDENTITY),
            d.ptr, d.modes,
            op_reduce,
            compute_descriptor(dtype),
        )
        return cls(handle, ptr, (a, c, d))

    @classmethod
    def elementwise(
        cls,
        handle: Handle,
        inputs: Sequence[tuple[TensorDescriptor, int]],
        d: TensorDescriptor,
        binary_ops: Sequence[int],
        dtype: str,
    ) -> OperationDescriptor:
        """Binary (inputs A, C; ops (op_ac,)) or trinary (A, B, C; (op_ab, op_abc)).

        The C input takes D's modes: it is laid out like D.
        """
        *front, (c, op_c) = inputs
        args: list[Any] = [handle.ptr]
        for tensor, op in front:
            args += [tensor.ptr, tensor.modes, op]
        args += [c.ptr, d.modes, op_c, d.ptr, d.modes, *binary_ops, compute_descriptor(dtype)]
        if len(front) == 1:
            ptr = call("cutensorCreateElementwiseBinary", ct.create_elementwise_binary, *args)
        else:
            ptr = call("cutensorCreateElementwiseTrinary", ct.create_elementwise_trinary, *args)
        tensors = [t for t, _ in inputs] + [d]
        return cls(handle, ptr, tensors)


class PlanPreference:
    """A cutensorPlanPreference_t (the 1.x "find"): algorithm, JIT mode, autotuning."""

    def __init__(self, handle: Handle) -> None:
        self._handle = handle
        self.ptr: int = call(
            "cutensorCreatePlanPreference",
            ct.create_plan_preference,
            handle.ptr,
            int(ct.Algo.DEFAULT),
            int(ct.JitMode.NONE),
        )
        self._finalizer = weakref.finalize(self, ct.destroy_plan_preference, self.ptr)

    def set(self, attribute: Any, value: int) -> None:
        """Set one cutensorPlanPreferenceAttribute_t."""
        buffer = np.array(value, dtype=ct.get_plan_preference_attribute_dtype(attribute))
        call(
            "cutensorPlanPreferenceSetAttribute",
            ct.plan_preference_set_attribute,
            self._handle.ptr,
            self.ptr,
            int(attribute),
            buffer.ctypes.data,
            buffer.itemsize,
        )

    def incremental(self, count: int) -> None:
        """Incremental autotuning: each new plan tries another of ``count`` candidates."""
        attribute = ct.PlanPreferenceAttribute
        self.set(attribute.AUTOTUNE_MODE, int(ct.AutotuneMode.INCREMENTAL))
        self.set(attribute.CACHE_MODE, int(ct.CacheMode.PEDANTIC))
        self.set(attribute.INCREMENTAL_COUNT, count)


class Plan:
    """A cutensorPlan_t and the workspace size it requires."""

    def __init__(
        self, handle: Handle, operation: OperationDescriptor, preference: PlanPreference, limit: int
    ) -> None:
        self.ptr: int = call(
            "cutensorCreatePlan", ct.create_plan, handle.ptr, operation.ptr, preference.ptr, limit
        )
        self._finalizer = weakref.finalize(self, ct.destroy_plan, self.ptr)
        attribute = ct.PlanAttribute.REQUIRED_WORKSPACE
        required = np.zeros(1, dtype=ct.get_plan_attribute_dtype(attribute))
        call(
            "cutensorPlanGetAttribute",
            ct.plan_get_attribute,
            handle.ptr,
            self.ptr,
            int(attribute),
            required.ctypes.data,
            required.itemsize,
        )
        self.workspace_size = int(required[0])


class Workspaces:
    """One workspace buffer per device and stream, from CuPy's memory pool, grown on
    demand; work on one stream is ordered, so its buffer is reused safely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffers: dict[int, weakref.WeakKeyDictionary[Any, tuple[Any, int]]] = {}

    def pointer(self, device: int, stream: Any, size: int) -> int:
        """A device pointer to at least ``size`` bytes for work on ``stream``.

        Raises:
            cupy.cuda.memory.OutOfMemoryError: the pool cannot grow the buffer.
        """
        if size == 0:
            return 0
        with self._lock:
            per_stream = self._buffers.setdefault(device, weakref.WeakKeyDictionary())
            held = per_stream.get(stream)
            if held is not None and held[1] >= size:
                return int(held[0].ptr)
            per_stream.pop(stream, None)  # back to the pool before growing
            memory = cupy.cuda.alloc(size)
            per_stream[stream] = (memory, size)
            return int(memory.ptr)


WORKSPACES = Workspaces()


class PlannedOperation:
    """An operation descriptor with its preference and plan, planned under the
    workspace policy, planned again on out-of-memory and while autotuning."""

    def __init__(
        self,
        handle: Handle,
        operation: OperationDescriptor,
        workspace_limit: int | None,
        context: str,
        uses_workspace: bool,
    ) -> None:
        self.handle = handle
        self.operation = operation
        self.preference = PlanPreference(handle)
        self.note = ""
        self._limit = self._minimum = 0
        if uses_workspace:
            recommended = self._estimate(ct.WorksizePreference.WORKSPACE_DEFAULT)
            self._minimum = self._estimate(ct.WorksizePreference.WORKSPACE_MIN)
            choice = choose_workspace(recommended, self._minimum, workspace_limit, context)
            self._limit, self.note = choice.limit, choice.note
        self._context = context
        self._tuning = 0
        self.plan = Plan(handle, operation, self.preference, self._limit)

    def _estimate(self, preference: Any) -> int:
        return int(
            call(
                "cutensorEstimateWorkspaceSize",
                ct.estimate_workspace_size,
                self.handle.ptr,
                self.operation.ptr,
                self.preference.ptr,
                int(preference),
            )
        )

    def workspace(self, device: int, stream: Any) -> tuple[int, int]:
        """(pointer, size) of the plan's workspace; on out-of-memory, plan again with
        the minimum workspace and record it in ``note``.

        Raises:
            WorkspaceError: not even the minimum workspace can be allocated.
        """
        size = self.plan.workspace_size
        try:
            return WORKSPACES.pointer(device, stream, size), size
        except cupy.cuda.memory.OutOfMemoryError as err:
            if size <= self._minimum:
                raise WorkspaceError(
                    f"{self._context}: out of memory for its minimum workspace of {size} bytes"
                ) from err
        self._limit = self._minimum
        self.plan = Plan(self.handle, self.operation, self.preference, self._limit)
        self.note = fallback_note(size, self._minimum)
        minimum = self.plan.workspace_size
        try:
            return WORKSPACES.pointer(device, stream, minimum), minimum
        except cupy.cuda.memory.OutOfMemoryError as err:
            raise WorkspaceError(
                f"{self._context}: out of memory for its minimum workspace of {minimum} bytes"
            ) from err

    def autotune(self, iterations: int) -> None:
        """Let the next ``iterations`` executions each try another kernel candidate;
        cuTENSOR times them and keeps the fastest in the handle's plan cache."""
        self.preference.incremental(iterations)
        self._tuning = iterations
        self.plan = Plan(self.handle, self.operation, self.preference, self._limit)

    def executed(self) -> None:
        """After an execution: while autotuning, plan the next candidate (at the end,
        the cached fastest)."""
        if self._tuning:
            self._tuning -= 1
            self.plan = Plan(self.handle, self.operation, self.preference, self._limit)


def contract(
    op: PlannedOperation,
    scalars: tuple[int, int],
    pointers: Sequence[int],
    device: int,
    stream: Any,
) -> None:
    """cutensorContract on ``stream``; ``pointers`` are (A, B, C, D)."""
    workspace, size = op.workspace(device, stream)
    a, b, c, d = pointers
    call(
        "cutensorContract",
        ct.contract,
        op.handle.ptr, op.plan.ptr, scalars[0], a, b, scalars[1], c, d, workspace, size, stream.ptr,
    )
    op.executed()


def reduce(
    op: PlannedOperation,
    scalars: tuple[int, int],
    pointers: Sequence[int],
    device: int,
    stream: Any,
) -> None:
    """cutensorReduce on ``stream``; ``pointers`` are (A, C, D)."""
    workspace, size = op.workspace(device, stream)
    a, c, d = pointers
    call(
        "cutensorReduce",
        ct.reduce,
        op.handle.ptr, op.plan.ptr, scalars[0], a, scalars[1], c, d, workspace, size, stream.ptr,
    )


def permute(op: PlannedOperation, alpha: int, a: int, b: int, stream: Any) -> None:
    """cutensorPermute on ``stream``."""
    call("cutensorPermute", ct.permute, op.handle.ptr, op.plan.ptr, alpha, a, b, stream.ptr)


def elementwise(
    op: PlannedOperation, scaled: Sequence[tuple[int, int]], d: int, stream: Any
) -> None:
    """cutensorElementwiseBinaryExecute / TrinaryExecute; ``scaled`` holds
    (scalar pointer, tensor pointer) for A, (B,) and C."""
    args = [x for pair in scaled for x in pair]
    if len(scaled) == 2:
        function, what = ct.elementwise_binary_execute, "cutensorElementwiseBinaryExecute"
    else:
        function, what = ct.elementwise_trinary_execute, "cutensorElementwiseTrinaryExecute"
    call(what, function, op.handle.ptr, op.plan.ptr, *args, d, stream.ptr)
