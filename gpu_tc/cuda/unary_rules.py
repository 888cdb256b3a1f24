"""Which unary operators cuTENSOR applies to which data.

cuTENSOR 2.8 on an H200 answered CUTENSOR_STATUS_INVALID_VALUE when asked for any
unary operator but IDENTITY and CONJ on complex data (seen in permutations, reductions
and element-wise operations) and for CONJ on real data (permutations and element-wise
operations; no test asked a reduction for it). CONJ of a real value
is the value itself, so it is passed as IDENTITY; a complex problem with another
operator runs on CuPy's ufuncs instead (:mod:`gpu_tc.cuda.cupy_kernels`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpu_tc.options import UnaryOp

COMPLEX_UNARY = frozenset({UnaryOp.IDENTITY, UnaryOp.CONJ})


def cutensor_unary(op: UnaryOp, dtype: str) -> int:
    """The operator value to hand cuTENSOR for ``op`` on ``dtype`` data (CONJ of real
    data becomes IDENTITY)."""
    if op is UnaryOp.CONJ and np.dtype(dtype).kind != "c":
        return int(UnaryOp.IDENTITY)
    return int(op)


def refused_unary(operators: Mapping[str, UnaryOp], dtype: str) -> str | None:
    """Why cuTENSOR cannot run these unary ``operators`` on ``dtype`` data, or None."""
    if np.dtype(dtype).kind != "c":
        return None
    refused = [f"{name}={op.name}" for name, op in operators.items() if op not in COMPLEX_UNARY]
    if not refused:
        return None
    return (f"cuTENSOR applies no unary operator but IDENTITY and CONJ to complex data "
            f"({', '.join(refused)} on {np.dtype(dtype).name}): CuPy's ufuncs")
