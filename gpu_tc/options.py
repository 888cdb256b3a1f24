"""Enums for operators and the frozen Options that join every plan key.

Operator values are cuTENSOR's ``cutensorOperator_t`` numbers, so the GPU backend can
pass them through unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import OptionsError, OptionsTypeError


class UnaryOp(enum.IntEnum):
    """Element-wise operator applied to an operand before it is combined."""

    IDENTITY = 1
    SQRT = 2
    RELU = 8
    CONJ = 9
    RCP = 10
    SIGMOID = 11
    TANH = 12
    EXP = 22
    LOG = 23
    ABS = 24
    NEG = 25
    SIN = 26
    COS = 27
    TAN = 28
    SINH = 29
    COSH = 30
    ASIN = 31
    ACOS = 32
    ATAN = 33
    ASINH = 34
    ACOSH = 35
    ATANH = 36
    CEIL = 37
    FLOOR = 38


class BinaryOp(enum.IntEnum):
    """Operator combining two operands element-wise."""

    ADD = 3
    MUL = 5
    MAX = 6
    MIN = 7


class ReduceOp(enum.IntEnum):
    """Operator folding the reduced labels of a reduction."""

    SUM = 3
    PROD = 5
    MAX = 6
    MIN = 7


CHUNK_SUMS = ("tree", "accumulate")


@dataclass(frozen=True)
class Options:
    """Settings that change how a plan is built; part of every plan key.

    Attributes:
        workspace_limit: Upper bound in bytes on a GPU plan's workspace (None: the
            size cuTENSOR recommends).
        allow_cublas: Let GEMM-like GPU contractions run through cuBLAS.
        memory_limit: Upper bound in bytes on the temporaries of one call: packed
            operands, staged results, intermediates of a chain, casts and (on the GPU)
            workspace; the result and ``out`` do not count. None: a default budget
            that keeps the speed of unbounded copies (see ``plan.temporary_bytes``).
        chunk_sums: On dask arrays chunked along a summed label: "tree" (dask's way:
            a partial product per chunk, summed in a tree) or "accumulate" (one task
            per output block adds its partial products into one buffer).
    """

    workspace_limit: int | None = None
    allow_cublas: bool = True
    memory_limit: int | None = None
    chunk_sums: str = "tree"

    def __post_init__(self) -> None:
        for name in ("workspace_limit", "memory_limit"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
                raise OptionsTypeError(f"{name} must be an int or None, got {value!r}")
            if value < 0:
                raise OptionsError(f"{name} must be a non-negative int or None, got {value!r}")
            object.__setattr__(self, name, int(value))  # a NumPy integer as a plain int
        if not isinstance(self.allow_cublas, bool):
            raise OptionsError(f"allow_cublas must be a bool, got {self.allow_cublas!r}")
        if self.chunk_sums not in CHUNK_SUMS:
            raise OptionsError(
                f"chunk_sums must be one of {CHUNK_SUMS}, got {self.chunk_sums!r}")


DEFAULT_OPTIONS = Options()


def check_options(options: Any, context: str) -> None:
    """Raise OptionsTypeError unless ``options`` is an :class:`Options` or None."""
    if options is not None and not isinstance(options, Options):
        raise OptionsTypeError(
            f"options must be a gpu_tc.Options or None, got {type(options).__name__} "
            f"{options!r} in {context}"
        )
