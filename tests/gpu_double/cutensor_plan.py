"""Emulated cuTENSOR: attributes, plan preferences, workspace estimates and plans.

A plan takes the largest emulated workspace size (:data:`cutensor_types.WORKSPACE`)
that fits its limit; a limit below the minimum is INSUFFICIENT_WORKSPACE.
"""

from __future__ import annotations

import numpy as np

from . import cutensor_cache, memory, runtime
from . import cutensor_objects as objects
from .cutensor_objects import Operation, Plan, Preference
from .cutensor_types import (
    WORKSPACE,
    Algo,
    AutotuneMode,
    CacheMode,
    JitMode,
    OperationDescriptorAttribute,
    PlanAttribute,
    PlanPreferenceAttribute,
    Status,
    WorksizePreference,
    fail,
)
from .signatures import binding

INVALID = Status.INVALID_VALUE

_OPERATION_ATTRIBUTE_DTYPES = {0: np.int32, 1: np.int32, 2: np.float32, 3: np.float32,
                               4: np.uint32, 5: np.uint32, 6: np.uint64}


@binding("get_operation_descriptor_attribute_dtype(int attr)")
def get_operation_descriptor_attribute_dtype(attr: int) -> type:
    return _OPERATION_ATTRIBUTE_DTYPES[OperationDescriptorAttribute(attr)]


@binding("get_plan_preference_attribute_dtype(int attr)")
def get_plan_preference_attribute_dtype(attr: int) -> type:
    PlanPreferenceAttribute(attr)
    return np.int32


@binding("get_plan_attribute_dtype(int attr)")
def get_plan_attribute_dtype(attr: int) -> type:
    PlanAttribute(attr)
    return np.uint64


def _buffer(attr_dtype: type, size_in_bytes: int, what: str) -> np.dtype:
    dtype = np.dtype(attr_dtype)
    if size_in_bytes != dtype.itemsize:
        raise fail(INVALID, f"{what}: size_in_bytes={size_in_bytes}, the attribute has "
                            f"{dtype.itemsize}")
    return dtype


@binding(
    "operation_descriptor_get_attribute(intptr_t handle, intptr_t desc, int attr, intptr_t buf, "
    "size_t size_in_bytes)"
)
def operation_descriptor_get_attribute(handle, desc, attr, buf, size_in_bytes):
    objects.get(handle, "handle", "handle")
    operation = objects.get(desc, "operation descriptor", "desc")
    if attr not in (OperationDescriptorAttribute.SCALAR_TYPE, OperationDescriptorAttribute.TAG):
        raise fail(INVALID, f"attribute {attr} is not emulated")
    dtype = _buffer(_OPERATION_ATTRIBUTE_DTYPES[attr], size_in_bytes, "operation attribute")
    value = operation.scalar_type if attr == OperationDescriptorAttribute.SCALAR_TYPE else 0
    memory.write_host(buf, np.array([value], dtype))


@binding("create_plan_preference(intptr_t handle, int algo, int jit_mode) -> intptr_t")
def create_plan_preference(handle, algo, jit_mode):
    objects.get(handle, "handle", "handle")
    if algo < 0 and algo not in set(Algo):
        raise fail(INVALID, f"algo={algo} is not a cutensorAlgo_t")
    if jit_mode not in set(JitMode):
        raise fail(INVALID, f"jit_mode={jit_mode} is not a cutensorJitMode_t")
    return objects.new("plan preference", Preference(algo, jit_mode))


@binding("destroy_plan_preference(intptr_t pref)")
def destroy_plan_preference(pref: int) -> None:
    objects.destroy(pref, "plan preference")


_PREFERENCE_VALUES = {
    PlanPreferenceAttribute.AUTOTUNE_MODE: lambda v: v in set(AutotuneMode),
    PlanPreferenceAttribute.CACHE_MODE: lambda v: v in set(CacheMode),
    PlanPreferenceAttribute.INCREMENTAL_COUNT: lambda v: v >= 1,
    PlanPreferenceAttribute.ALGO: lambda v: v >= 0 or v in set(Algo),
    PlanPreferenceAttribute.KERNEL_RANK: lambda v: v >= 0,
    PlanPreferenceAttribute.JIT: lambda v: v in set(JitMode),
}


@binding(
    "plan_preference_set_attribute(intptr_t handle, intptr_t pref, int attr, intptr_t buf, "
    "size_t size_in_bytes)"
)
def plan_preference_set_attribute(handle, pref, attr, buf, size_in_bytes):
    objects.get(handle, "handle", "handle")
    preference = objects.get(pref, "plan preference", "pref")
    if attr not in _PREFERENCE_VALUES:
        raise fail(INVALID, f"plan preference attribute {attr} is not emulated")
    dtype = _buffer(np.int32, size_in_bytes, "plan preference attribute")
    value = int(memory.read_host(buf, dtype)[0])
    if not _PREFERENCE_VALUES[attr](value):
        raise fail(INVALID, f"{PlanPreferenceAttribute(attr).name}={value}")
    preference.attributes[attr] = value


def _workspace_sizes(operation: Operation) -> dict[int, int]:
    return WORKSPACE.get(operation.kind, {1: 0, 2: 0, 3: 0})


@binding(
    "estimate_workspace_size(intptr_t handle, intptr_t desc, intptr_t plan_pref, "
    "int workspace_pref) -> uint64_t"
)
def estimate_workspace_size(handle, desc, plan_pref, workspace_pref):
    objects.get(handle, "handle", "handle")
    operation = objects.get(desc, "operation descriptor", "desc")
    if plan_pref:
        objects.get(plan_pref, "plan preference", "plan_pref")
    if workspace_pref not in set(WorksizePreference):
        raise fail(INVALID, f"workspace_pref={workspace_pref}")
    return _workspace_sizes(operation)[workspace_pref]


@binding(
    "create_plan(intptr_t handle, intptr_t desc, intptr_t pref, uint64_t workspace_size_limit) "
    "-> intptr_t"
)
def create_plan(handle, desc, pref, workspace_size_limit):
    objects.get(handle, "handle", "handle")
    operation = objects.get(desc, "operation descriptor", "desc")
    preference = objects.get(pref, "plan preference", "pref") if pref else None
    fitting = [s for s in _workspace_sizes(operation).values() if s <= workspace_size_limit]
    if not fitting:
        raise fail(Status.INSUFFICIENT_WORKSPACE, f"workspace_size_limit={workspace_size_limit} "
                                                  "is below the minimum workspace")
    cutensor_cache.remember(handle, operation, preference)
    return objects.new("plan", Plan(operation, runtime.current_device(), max(fitting)))


@binding("destroy_plan(intptr_t plan)")
def destroy_plan(plan: int) -> None:
    objects.destroy(plan, "plan")


@binding(
    "plan_get_attribute(intptr_t handle, intptr_t plan, int attr, intptr_t buf, "
    "size_t size_in_bytes)"
)
def plan_get_attribute(handle, plan, attr, buf, size_in_bytes):
    objects.get(handle, "handle", "handle")
    value = objects.get(plan, "plan", "plan")
    PlanAttribute(attr)
    dtype = _buffer(np.uint64, size_in_bytes, "plan attribute")
    memory.write_host(buf, np.array([value.required_workspace], dtype))
