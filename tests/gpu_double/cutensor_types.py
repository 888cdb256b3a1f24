"""cuTENSOR 2.x enums, data types and the documented type tables, for the emulation.

The enum values are ``cutensor.h``'s (via nvmath's bindings; the conformance test
compares every name -> value map with the real module). The tables list the
data-type and compute-descriptor combinations ``cutensor.h`` documents per operation,
restricted to the data types this double computes.
"""

from __future__ import annotations

import enum

import numpy as np


class Status(enum.IntEnum):
    SUCCESS = 0
    NOT_INITIALIZED = 1
    ALLOC_FAILED = 3
    INVALID_VALUE = 7
    ARCH_MISMATCH = 8
    MAPPING_ERROR = 11
    EXECUTION_FAILED = 13
    INTERNAL_ERROR = 14
    NOT_SUPPORTED = 15
    LICENSE_ERROR = 16
    CUBLAS_ERROR = 17
    CUDA_ERROR = 18
    INSUFFICIENT_WORKSPACE = 19
    INSUFFICIENT_DRIVER = 20
    IO_ERROR = 21


class Operator(enum.IntEnum):
    OP_IDENTITY = 1
    OP_SQRT = 2
    OP_RELU = 8
    OP_CONJ = 9
    OP_RCP = 10
    OP_SIGMOID = 11
    OP_TANH = 12
    OP_EXP = 22
    OP_LOG = 23
    OP_ABS = 24
    OP_NEG = 25
    OP_SIN = 26
    OP_COS = 27
    OP_TAN = 28
    OP_SINH = 29
    OP_COSH = 30
    OP_ASIN = 31
    OP_ACOS = 32
    OP_ATAN = 33
    OP_ASINH = 34
    OP_ACOSH = 35
    OP_ATANH = 36
    OP_CEIL = 37
    OP_FLOOR = 38
    OP_MISH = 39
    OP_SWISH = 40
    OP_SOFT_PLUS = 41
    OP_SOFT_SIGN = 42
    OP_ADD = 3
    OP_MUL = 5
    OP_MAX = 6
    OP_MIN = 7
    OP_UNKNOWN = 126


class Algo(enum.IntEnum):
    DEFAULT_PATIENT = -6
    GETT = -4
    TGETT = -3
    TTGT = -2
    DEFAULT = -1


class AutotuneMode(enum.IntEnum):
    NONE = 0
    INCREMENTAL = 1


class CacheMode(enum.IntEnum):
    NONE = 0
    PEDANTIC = 1


class JitMode(enum.IntEnum):
    NONE = 0
    DEFAULT = 1


class OperationDescriptorAttribute(enum.IntEnum):
    TAG = 0
    SCALAR_TYPE = 1
    FLOPS = 2
    MOVED_BYTES = 3
    PADDING_LEFT = 4
    PADDING_RIGHT = 5
    PADDING_VALUE = 6


class PlanAttribute(enum.IntEnum):
    REQUIRED_WORKSPACE = 0


class PlanPreferenceAttribute(enum.IntEnum):
    AUTOTUNE_MODE = 0
    CACHE_MODE = 1
    INCREMENTAL_COUNT = 2
    ALGO = 3
    KERNEL_RANK = 4
    JIT = 5
    GPU_ARCH = 6


class WorksizePreference(enum.IntEnum):
    WORKSPACE_MIN = 1
    WORKSPACE_DEFAULT = 2
    WORKSPACE_MAX = 3


class cuTENSORError(Exception):  # noqa: N801 - nvmath's name
    """A cuTENSOR status other than SUCCESS; ``status`` is its number."""

    def __init__(self, status: int, why: str = "") -> None:
        self.status = int(status)
        text = f"{Status(status).name} ({int(status)})"
        # The emulation says which documented rule failed; the real message stops at the status.
        super().__init__(f"{text}: emulated cuTENSOR: {why}" if why else text)


def fail(status: Status, why: str) -> cuTENSORError:
    """The error for a failed check, naming the documented rule."""
    return cuTENSORError(status, why)


# cudaDataType_t values this double computes, and their NumPy dtypes.
R_32F, R_64F, C_32F, C_64F = 0, 1, 4, 5
DTYPES = {R_32F: np.dtype(np.float32), R_64F: np.dtype(np.float64),
          C_32F: np.dtype(np.complex64), C_64F: np.dtype(np.complex128)}
COMPUTE_NAMES = ("COMPUTE_16BF", "COMPUTE_16F", "COMPUTE_32F", "COMPUTE_3XTF32", "COMPUTE_4X16F",
                 "COMPUTE_64F", "COMPUTE_8XINT8", "COMPUTE_9X16BF", "COMPUTE_TF32")
# Fake library addresses of the compute descriptors (what ComputeDesc.X() returns).
COMPUTE_ADDRESSES = {name: 0x7C00_0000_0000 + 0x40 * i for i, name in enumerate(COMPUTE_NAMES)}
COMPUTE_BY_ADDRESS = {address: name for name, address in COMPUTE_ADDRESSES.items()}

# Documented (types..., compute) -> scalar type, for the data types above.
CONTRACTION = {
    (R_32F, R_32F, R_32F, c): R_32F
    for c in ("COMPUTE_32F", "COMPUTE_TF32", "COMPUTE_3XTF32", "COMPUTE_16BF", "COMPUTE_16F",
              "COMPUTE_9X16BF", "COMPUTE_4X16F")
} | {
    (R_64F, R_64F, R_64F, c): R_64F for c in ("COMPUTE_64F", "COMPUTE_32F", "COMPUTE_8XINT8")
} | {
    (C_32F, C_32F, C_32F, c): C_32F
    for c in ("COMPUTE_32F", "COMPUTE_TF32", "COMPUTE_3XTF32", "COMPUTE_9X16BF", "COMPUTE_4X16F")
} | {
    (C_64F, C_64F, C_64F, c): C_64F for c in ("COMPUTE_64F", "COMPUTE_32F", "COMPUTE_8XINT8")
} | {(R_64F, C_64F, C_64F, "COMPUTE_64F"): C_64F, (C_64F, R_64F, C_64F, "COMPUTE_64F"): C_64F}
REDUCTION = {(R_32F, R_32F, "COMPUTE_32F"): R_32F, (R_64F, R_64F, "COMPUTE_64F"): R_64F,
             (C_32F, C_32F, "COMPUTE_32F"): C_32F, (C_64F, C_64F, "COMPUTE_64F"): C_64F}
PERMUTATION = REDUCTION | {(R_32F, R_64F, "COMPUTE_64F"): R_64F,
                           (R_64F, R_32F, "COMPUTE_64F"): R_64F,
                           (C_32F, C_64F, "COMPUTE_64F"): C_64F,
                           (C_64F, C_32F, "COMPUTE_64F"): C_64F}
BINARY = REDUCTION | {(R_64F, R_32F, "COMPUTE_64F"): R_64F, (C_64F, C_32F, "COMPUTE_64F"): C_64F}
TRINARY = {(t, t, t, c): s for (t, _, c), s in REDUCTION.items()} | {
    (R_64F, R_64F, R_32F, "COMPUTE_64F"): R_64F, (C_64F, C_64F, C_32F, "COMPUTE_64F"): C_64F}

UNARY = {
    Operator.OP_IDENTITY: lambda x: x,
    Operator.OP_SQRT: np.sqrt,
    Operator.OP_RELU: lambda x: np.maximum(x, 0),
    Operator.OP_CONJ: np.conjugate,
    Operator.OP_RCP: np.reciprocal,
    Operator.OP_SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    Operator.OP_TANH: np.tanh,
    Operator.OP_EXP: np.exp,
    Operator.OP_LOG: np.log,
    Operator.OP_ABS: np.absolute,
    Operator.OP_NEG: np.negative,
    Operator.OP_SIN: np.sin,
    Operator.OP_COS: np.cos,
    Operator.OP_TAN: np.tan,
    Operator.OP_SINH: np.sinh,
    Operator.OP_COSH: np.cosh,
    Operator.OP_ASIN: np.arcsin,
    Operator.OP_ACOS: np.arccos,
    Operator.OP_ATAN: np.arctan,
    Operator.OP_ASINH: np.arcsinh,
    Operator.OP_ACOSH: np.arccosh,
    Operator.OP_ATANH: np.arctanh,
    Operator.OP_CEIL: np.ceil,
    Operator.OP_FLOOR: np.floor,
    Operator.OP_MISH: lambda x: x * np.tanh(np.log1p(np.exp(x))),
    Operator.OP_SWISH: lambda x: x / (1 + np.exp(-x)),
    Operator.OP_SOFT_PLUS: lambda x: np.log1p(np.exp(x)),
    Operator.OP_SOFT_SIGN: lambda x: x / (np.abs(x) + 1),
}
# Operators that order or round values: defined on real numbers only.
REAL_ONLY = frozenset({Operator.OP_RELU, Operator.OP_SIGMOID, Operator.OP_CEIL,
                       Operator.OP_FLOOR, Operator.OP_MISH, Operator.OP_SWISH,
                       Operator.OP_SOFT_PLUS, Operator.OP_SOFT_SIGN, Operator.OP_MAX,
                       Operator.OP_MIN})
BINARY_OPS = {Operator.OP_ADD: np.add, Operator.OP_MUL: np.multiply,
              Operator.OP_MAX: np.maximum, Operator.OP_MIN: np.minimum}
REDUCE_OPS = {Operator.OP_ADD: np.sum, Operator.OP_MUL: np.prod,
              Operator.OP_MAX: np.max, Operator.OP_MIN: np.min}

# Emulated workspace sizes (bytes) per WorksizePreference: arbitrary but fixed, so that
# plans exercise workspace allocation, limits and the minimum fallback.
WORKSPACE = {
    "contraction": {1: 256, 2: 4 << 20, 3: 64 << 20},
    "reduction": {1: 256, 2: 64 << 10, 3: 1 << 20},
}
