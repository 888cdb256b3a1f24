"""gpu_tc: einsum-style tensor contraction on NumPy (CPU, BLAS) and CuPy (GPU) arrays.

Example:
    >>> import numpy as np, gpu_tc
    >>> a, b = np.ones((2, 3)), np.ones((3, 4))
    >>> gpu_tc.einsum("ij,jk->ik", a, b).shape
    (2, 4)
"""

from . import numpy_einsum  # noqa: F401, I001 - numpy's einsum, taken before any drop-in
from .api import (
    contract,
    einsum,
    elementwise_binary,
    elementwise_trinary,
    permute,
    prepare,
    reduce,
    trace,
)
from .backend import host_pool
from .cache import CacheStats, PlanCache, plan_cache
from .errors import (
    AxesTypeError,
    AxisError,
    BackendError,
    CacheWarning,
    DTypeError,
    ExpressionError,
    ExpressionTypeError,
    GpuTcError,
    MemoryLimitError,
    OperandError,
    OperandValueError,
    OptionsError,
    OptionsTypeError,
    OutputError,
    OutputTypeError,
    PathError,
    PathNameError,
    PlanStateError,
    ShapeError,
    TransferError,
    WorkspaceError,
)
from .numpy_compat import tensordot, transpose
from .options import BinaryOp, Options, ReduceOp, UnaryOp
from .plan import Plan
from .version import __version__ as __version__

__all__ = [
    "AxesTypeError",
    "AxisError",
    "BackendError",
    "BinaryOp",
    "CacheStats",
    "CacheWarning",
    "DTypeError",
    "ExpressionError",
    "ExpressionTypeError",
    "GpuTcError",
    "MemoryLimitError",
    "OperandError",
    "OperandValueError",
    "Options",
    "OptionsError",
    "OptionsTypeError",
    "OutputError",
    "OutputTypeError",
    "PathError",
    "PathNameError",
    "Plan",
    "PlanCache",
    "PlanStateError",
    "ReduceOp",
    "ShapeError",
    "TransferError",
    "UnaryOp",
    "WorkspaceError",
    "contract",
    "einsum",
    "elementwise_binary",
    "elementwise_trinary",
    "host_pool",
    "permute",
    "plan_cache",
    "prepare",
    "reduce",
    "tensordot",
    "trace",
    "transpose",
]
