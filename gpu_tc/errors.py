"""The one exception family of gpu_tc.

Every class subclasses both :class:`GpuTcError` and the built-in exception a caller
would expect, so ``except ValueError`` and ``except gpu_tc.GpuTcError`` both work.
Messages name the expression and the offending label, operand or value.
"""

from __future__ import annotations

import numpy as np


class GpuTcError(Exception):
    """Base class of every error raised by gpu_tc."""


class ExpressionError(GpuTcError, ValueError):
    """The subscripts string is malformed or does not match the operands."""


class ExpressionTypeError(ExpressionError, TypeError):
    """Subscripts or a sublist entry of the wrong type (numpy raises TypeError here)."""


class ShapeError(GpuTcError, ValueError):
    """Ranks, extents or axes do not fit the expression."""


class AxisError(ShapeError, np.exceptions.AxisError):
    """An axis argument out of range for the operand's rank (numpy's AxisError, a
    ValueError and an IndexError)."""


class AxesTypeError(ShapeError, TypeError):
    """An ``axes`` argument that is neither an int nor a sequence of ints (numpy raises
    TypeError)."""


class DTypeError(GpuTcError, TypeError):
    """An operand or output has a dtype gpu_tc does not compute."""


class OperandError(GpuTcError, TypeError):
    """Operands of different array types, devices or unknown kinds were mixed."""


class OperandValueError(OperandError, ValueError):
    """An operand whose values cannot form an array, e.g. a ragged nested list (numpy
    raises ValueError)."""


class TransferError(GpuTcError, ValueError):
    """An operand cannot be sent to the workers of a distributed contraction."""


class OutputError(GpuTcError, ValueError):
    """The ``out`` argument has the wrong shape, dtype, type or is not writable."""


class OutputTypeError(OutputError, TypeError):
    """``out`` is not an array of the operands' kind, or its dtype cannot take the
    result under the casting rule (numpy raises TypeError for both)."""


class OptionsError(GpuTcError, ValueError):
    """An Options field or an operator argument holds an invalid value."""


class PlanStateError(GpuTcError, RuntimeError):
    """A plan was used after free()."""


class OptionsTypeError(OptionsError, TypeError):
    """A keyword argument of a type or kind numpy does not understand (numpy raises
    TypeError, e.g. for an unknown ``optimize`` value)."""


class PathNameError(OptionsError, KeyError):
    """``optimize`` names a path search that neither numpy nor opt_einsum has (numpy
    raises KeyError)."""

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0]) if self.args else ""


class PathError(GpuTcError, RuntimeError, IndexError):
    """An explicit contraction path names an operand that is not there, or leaves
    operands uncontracted (numpy raises IndexError and RuntimeError for these)."""


class BackendError(GpuTcError, RuntimeError):
    """A backend library call failed; ``status`` holds the library's status name."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class WorkspaceError(GpuTcError, MemoryError):
    """cuTENSOR could not plan within ``Options(workspace_limit=...)``, or a plan's
    workspace could not be allocated even after planning again with less."""


class MemoryLimitError(GpuTcError, MemoryError):
    """No route keeps a call's temporaries under ``Options(memory_limit=...)``; raised
    while planning, before any work. ``need`` holds the smallest need in bytes."""

    def __init__(self, message: str, need: int) -> None:
        super().__init__(message)
        self.need = need


class CacheWarning(UserWarning):
    """A file of the persistent cache (``GPU_TC_CACHE_DIR``) was ignored: unreadable,
    corrupt or written by another version. Nothing is lost but the time to measure
    again."""
