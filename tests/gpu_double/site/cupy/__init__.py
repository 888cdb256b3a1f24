"""Shadow CuPy of the gpu_double emulation: a TEST DOUBLE, NOT A GPU (see gpu_double)."""

from gpu_double.array import ndarray  # noqa: F401
from gpu_double.functions import (  # noqa: F401
    absolute,
    add,
    arange,
    array,
    asarray,
    ascontiguousarray,
    asfortranarray,
    asnumpy,
    broadcast_to,
    conj,
    conjugate,
    copyto,
    einsum,
    empty,
    empty_like,
    full,
    get_array_module,
    get_default_memory_pool,
    matmul,
    maximum,
    may_share_memory,
    minimum,
    multiply,
    negative,
    ones,
    shares_memory,
    zeros,
    zeros_like,
)
from numpy import (  # noqa: F401 - CuPy re-exports NumPy's scalar types
    bool_,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)

from . import cuda, lib  # noqa: F401

__version__ = "14.2.0 (gpu_double emulation, not CuPy)"
__gpu_double__ = True
