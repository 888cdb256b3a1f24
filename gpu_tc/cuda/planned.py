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

from gpu_tc.errors import BackendError, WorkspaceError

from .cutensor import CutensorPlan, Handle, OperationDescriptor, PlanPreference, call
from .operands import HostScalars
from .workspace import choose_workspace, fallback_note, refused_within

INSUFFICIENT = "CUTENSOR_STATUS_INSUFFICIENT_WORKSPACE"
# The handles of CuPy's default streams: the null stream, cudaStreamLegacy and
# cudaStreamPerThread (a stream of each host thread's own behind one handle).
BUILTIN_STREAMS = (0, 1, 2)
PER_THREAD_STREAM = 2


class Workspaces:
    """One workspace buffer per device and stream, from CuPy's memory pool, grown on
    demand; work on one stream is ordered, so its buffer is reused safely.

    A user's stream keeps its buffer while the stream lives, the null stream for good,
    and the per-thread default stream (one handle, a stream per thread) per thread
    while the thread lives. Callers hold the returned memory until their call is
    enqueued, so a buffer that another thread replaces does not go back to the pool
    under them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[int, weakref.WeakKeyDictionary[Any, tuple[Any, int]]] = {}
        self._builtin: dict[tuple[int, int], tuple[Any, int]] = {}
        self._per_thread = threading.local()

    def memory(self, device: int, stream: Any, size: int) -> Any:
        """CuPy memory of at least ``size`` bytes for work on ``stream`` (None for 0).

        Raises:
            cupy.cuda.memory.OutOfMemoryError: the pool cannot grow the buffer.
        """
        if size == 0:
            return None
        with self._lock:
            table: Any
            key: Any
            if stream.ptr == PER_THREAD_STREAM:
                if not hasattr(self._per_thread, "buffers"):
                    self._per_thread.buffers = {}
                table, key = self._per_thread.buffers, device
            elif stream.ptr in BUILTIN_STREAMS:
                table, key = self._builtin, (device, stream.ptr)
            else:
                table = self._streams.setdefault(device, weakref.WeakKeyDictionary())
                key = stream
            held = table.get(key)
            if held is not None and held[1] >= size:
                return held[0]
            table.pop(key, None)  # back to the pool, once its holders let go, then grow
            memory = cupy.cuda.alloc(size)
            table[key] = (memory, size)
            return memory


WORKSPACES = Workspaces()


class PlannedOperation:
    """An operation descriptor with its preference and plan, planned under the
    workspace policy, planned again on out-of-memory and while autotuning; ``scalars``
    makes host scalars of the type cuTENSOR reports for the operation."""

    def __init__(
        self,
        handle: Handle,
        operation: OperationDescriptor,
        workspace_limit: tuple[int | None, str] | None,
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
        source = "workspace_limit"
        if uses_workspace:
            recommended = self._estimate(ct.WorksizePreference.WORKSPACE_DEFAULT)
            self._minimum = self._estimate(ct.WorksizePreference.WORKSPACE_MIN)
            limit, source = workspace_limit or (None, source)
            choice = choose_workspace(recommended, self._minimum, limit, source)
            self._limit, self.note = choice.limit, choice.note
        self._context = context
        self._tuning = 0
        try:
            self.plan = CutensorPlan(handle, operation, self.preference, self._limit)
        except BackendError as err:
            if err.status != INSUFFICIENT or self._limit >= self._minimum:
                raise
            raise refused_within(self._limit, self._minimum, context, source, err.status) \
                from err

    @property
    def workspace_size(self) -> int:
        """The workspace the current plan takes."""
        return int(self.plan.workspace_size)

    @property
    def decision(self) -> str:
        """The workspace decision for ``reason``: ``note``, and what the plan takes where
        that is less than it was allowed (cuTENSOR 2.8.0 on an H200 planned a 6x7x8
        contraction with none under the 32 MiB it recommended)."""
        taken = self.workspace_size
        if not self.note or taken >= self._limit:
            return self.note
        return f"{self.note}, of which the plan takes {taken}"

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

    def workspace(self, device: int, stream: Any) -> tuple[Any, int, int]:
        """(memory to hold until the call is enqueued, pointer, size) of the plan's
        workspace; on out-of-memory, plan again with cuTENSOR's minimum estimate, then
        with none (the estimate is no floor), and record it in ``note``.

        Raises:
            WorkspaceError: out of memory for the least workspace cuTENSOR plans with.
        """
        while True:
            size = self.plan.workspace_size
            try:
                return _held(WORKSPACES.memory(device, stream, size), size)
            except cupy.cuda.memory.OutOfMemoryError as err:
                failure = err
            smaller = next((s for s in (self._minimum, 0) if s < size), None)
            if smaller is None:
                break
            try:
                self.plan = CutensorPlan(self.handle, self.operation, self.preference, smaller)
            except BackendError:
                break  # cuTENSOR plans this with no less
            self._limit = smaller
            self.note = fallback_note(size, smaller, self._minimum)
        raise WorkspaceError(
            f"{self._context}: out of memory for its workspace of {size} bytes, the least "
            "cuTENSOR plans it with"
        ) from failure

    def autotune(self, iterations: int) -> None:
        """Let the next ``iterations`` executions each try another kernel candidate;
        cuTENSOR times them and keeps the fastest in the handle's plan cache."""
        self.preference.incremental(iterations)
        self.plan = CutensorPlan(self.handle, self.operation, self.preference, self._limit)
        self._tuning = iterations

    def executed(self) -> None:
        """After an execution: while autotuning, plan the next candidate (at the end,
        the cached fastest, and the plan cache is written to the persistent cache)."""
        if self._tuning:
            self._tuning -= 1
            self.plan = CutensorPlan(self.handle, self.operation, self.preference, self._limit)
            if not self._tuning:
                self.handle.save_caches()


def _held(memory: Any, size: int) -> tuple[Any, int, int]:
    return memory, 0 if memory is None else int(memory.ptr), size


def contract(
    op: PlannedOperation,
    scalars: tuple[int, int],
    pointers: Sequence[int],
    device: int,
    stream: Any,
) -> None:
    """cutensorContract on ``stream``; ``pointers`` are (A, B, C, D)."""
    held, workspace, size = op.workspace(device, stream)  # held until enqueued
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
    held, workspace, size = op.workspace(device, stream)  # held until enqueued
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
