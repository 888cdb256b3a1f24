"""Owned wrappers over ``nvmath.bindings.cutensor`` (cuTENSOR 2.x): handle, tensor and
operation descriptors, plan preference and plan.

Every C object belongs to one small Python object that destroys it exactly once
(``weakref.finalize``, which also runs at exit, newest first, so plans go before the
handle). cuTENSOR errors become :class:`gpu_tc.errors.BackendError` carrying the
status name. :mod:`gpu_tc.cuda.planned` plans and executes operations with them.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import cupy
import numpy as np
from nvmath.bindings import cutensor as ct

from gpu_tc.errors import BackendError

from . import plan_cache_file
from .descriptors import COMPUTE_DESCRIPTORS, SCALAR_DTYPES, DescriptorSpec


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
    """The cuTENSOR handle of one device, created on first use and kept until exit; its
    plan and kernel caches are read from the persistent cache directory when it is
    created and written back at exit (:mod:`gpu_tc.cuda.plan_cache_file`)."""

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
        self.cache_folder = plan_cache_file.directory(device)
        self.restored_plans = 0
        if self.cache_folder is not None:
            with cupy.cuda.Device(device):
                self.restored_plans = plan_cache_file.restore(self.ptr, self.cache_folder)
            # Made after the destroy's finalizer, so at exit it runs first (newest first).
            weakref.finalize(self, plan_cache_file.save, self.ptr, self.cache_folder)

    def save_caches(self) -> None:
        """Write the plan and kernel caches to the persistent cache (if it is on)."""
        if self.cache_folder is not None:
            plan_cache_file.save(self.ptr, self.cache_folder)

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
        self._handle = handle
        self._keep = tuple(tensors)  # the descriptors outlive the operation
        self._finalizer = weakref.finalize(self, ct.destroy_operation_descriptor, ptr)

    def scalar_type(self) -> str:
        """The dtype character of the scalars the operation reads (its SCALAR_TYPE).

        Raises:
            BackendError: cuTENSOR reports a scalar type gpu_tc does not pass.
        """
        attribute = ct.OperationDescriptorAttribute.SCALAR_TYPE
        value = np.zeros(1, dtype=ct.get_operation_descriptor_attribute_dtype(attribute))
        call(
            "cutensorOperationDescriptorGetAttribute",
            ct.operation_descriptor_get_attribute,
            self._handle.ptr,
            self.ptr,
            int(attribute),
            value.ctypes.data,
            value.itemsize,
        )
        dtype = SCALAR_DTYPES.get(int(value[0]))
        if dtype is None:
            raise BackendError(f"cuTENSOR reports scalar type {int(value[0])}, which gpu_tc "
                               "does not pass", status="CUTENSOR_STATUS_NOT_SUPPORTED")
        return dtype

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


class CutensorPlan:
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
