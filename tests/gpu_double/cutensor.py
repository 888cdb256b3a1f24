"""The emulated ``nvmath.bindings.cutensor``: the slice of nvmath-python's cuTENSOR
bindings that gpu_tc calls, with the same names, parameter names and enum values.

``site/nvmath/bindings/cutensor.py`` re-exports this module. See
:mod:`.cutensor_create`, :mod:`.cutensor_plan` and :mod:`.cutensor_execute` for the checks.
"""

from __future__ import annotations

from .cutensor_cache import (
    handle_read_plan_cache_from_file,
    handle_resize_plan_cache,
    handle_write_plan_cache_to_file,
    read_kernel_cache_from_file,
    write_kernel_cache_to_file,
)
from .cutensor_create import (
    create,
    create_contraction,
    create_elementwise_binary,
    create_elementwise_trinary,
    create_permutation,
    create_reduction,
    create_tensor_descriptor,
    destroy,
    destroy_operation_descriptor,
    destroy_tensor_descriptor,
)
from .cutensor_execute import (
    contract,
    elementwise_binary_execute,
    elementwise_trinary_execute,
    permute,
    reduce,
)
from .cutensor_objects import require_library
from .cutensor_plan import (
    create_plan,
    create_plan_preference,
    destroy_plan,
    destroy_plan_preference,
    estimate_workspace_size,
    get_operation_descriptor_attribute_dtype,
    get_plan_attribute_dtype,
    get_plan_preference_attribute_dtype,
    operation_descriptor_get_attribute,
    plan_get_attribute,
    plan_preference_set_attribute,
)
from .cutensor_types import (
    COMPUTE_ADDRESSES,
    Algo,
    AutotuneMode,
    CacheMode,
    JitMode,
    OperationDescriptorAttribute,
    Operator,
    PlanAttribute,
    PlanPreferenceAttribute,
    Status,
    WorksizePreference,
    cuTENSORError,
)
from .signatures import binding

VERSION = 20801  # the cutensor.h this double follows (cutensor-cu13 2.8.1)


@binding("get_version() -> size_t")
def get_version() -> int:
    require_library()
    return VERSION


@binding("get_cudart_version() -> size_t")
def get_cudart_version() -> int:
    require_library()
    return 13000


@binding("get_error_string(int error) -> str")
def get_error_string(error: int) -> str:
    return f"CUTENSOR_STATUS_{Status(error).name}"


def _compute_descriptor(name: str) -> classmethod:
    def method(cls: type) -> int:
        try:
            require_library()
        except RuntimeError as err:
            raise ImportError("Failed to load cutensor library") from err
        return COMPUTE_ADDRESSES[name]

    method.__name__ = name
    return classmethod(method)


class ComputeDesc:
    """See `cutensorComputeDescriptor_t`: each class method returns a library address."""


for _name in COMPUTE_ADDRESSES:
    setattr(ComputeDesc, _name, _compute_descriptor(_name))

__all__ = [
    "Algo", "AutotuneMode", "CacheMode", "ComputeDesc", "JitMode", "OperationDescriptorAttribute",
    "Operator", "PlanAttribute", "PlanPreferenceAttribute", "Status", "WorksizePreference",
    "contract", "create", "create_contraction", "create_elementwise_binary",
    "create_elementwise_trinary", "create_permutation", "create_plan", "create_plan_preference",
    "create_reduction", "create_tensor_descriptor", "cuTENSORError", "destroy",
    "destroy_operation_descriptor", "destroy_plan", "destroy_plan_preference",
    "destroy_tensor_descriptor", "elementwise_binary_execute", "elementwise_trinary_execute",
    "estimate_workspace_size", "get_cudart_version", "get_error_string",
    "get_operation_descriptor_attribute_dtype", "get_plan_attribute_dtype",
    "get_plan_preference_attribute_dtype", "get_version", "handle_read_plan_cache_from_file",
    "handle_resize_plan_cache", "handle_write_plan_cache_to_file",
    "operation_descriptor_get_attribute", "permute", "plan_get_attribute",
    "plan_preference_set_attribute", "read_kernel_cache_from_file", "reduce",
    "write_kernel_cache_to_file",
]
