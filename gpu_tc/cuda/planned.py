"""Planned cuTENSOR operations: workspace policy and buffers, the out-of-memory
fallback, incremental autotuning, and the execute calls on a CUDA stream.

Workspace comes from CuPy's memory pool, one buffer per device and stream, grown on
demand; work on one stream is ordered, so its buffer is reused safely.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import cupy
from nvmath.bindings import cutensor as ct

from gpu_tc.errors import WorkspaceError

from .cutensor import Handle, OperationDescriptor, Plan, PlanPreference, call
from .operands import HostScalars
from .specs import choose_workspace, fallback_note


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
    workspace policy, planned again on out-of-memory and while autotuning; ``scalars``
    makes host scalars of the type cuTENSOR reports for the operation."""

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
        self.scalars = HostScalars(operation.scalar_type())
        self.note = ""
        self.lowered = False  # set by a plan that runs its problem as another operation
        self._limit = self._minimum = 0
        if uses_workspace:
            recommended = self._estimate(ct.WorksizePreference.WORKSPACE_DEFAULT)
            self._minimum = self._estimate(ct.WorksizePreference.WORKSPACE_MIN)
            choice = choose_workspace(recommended, self._minimum, workspace_limit, context)
            self._limit, self.note = choice.limit, choice.note
        self._context = context
        self._tuning = 0
        self.plan = Plan(handle, operation, self.preference, self._limit)

    @property
    def minimum_workspace(self) -> int:
        """The least workspace cuTENSOR needs for the operation (0 if it needs none)."""
        return self._minimum

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
