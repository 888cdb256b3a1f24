"""numpy's dtype rules for a call: the result dtype, the casting checks, and the dtype
the work is computed in.

Computed: bool, every integer, float16 (in float32, as numpy.einsum accumulates it),
float32, float64, complex64, complex128. Not computed: longdouble and clongdouble
(no BLAS, no cuTENSOR, and NumPy's own extended precision differs by platform), object,
strings, datetimes (no arithmetic to contract).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from .errors import DTypeError, OptionsError, OutputTypeError
from .problem import dtype_char

Casting = Literal["no", "equiv", "safe", "same_kind", "unsafe"]
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
_COMPUTED_KINDS = "biufc"
_UNSUPPORTED = "gG"  # longdouble, clongdouble
DESCRIBED = "bool, integers, float16/32/64 and complex64/128"


@dataclass(frozen=True)
class Dtypes:
    """The dtypes of one call.

    Attributes:
        result: The dtype of the result the caller gets (``out``'s when given).
        compute: The dtype character the work runs in (float32 for float16).
    """

    result: np.dtype[Any]
    compute: str


def checked_casting(casting: Any) -> Casting:
    """``casting`` if it is one of numpy's rules.

    Raises:
        OptionsError: it is not (a ValueError, as in numpy).
    """
    if casting not in CASTINGS:
        raise OptionsError(
            f"casting must be one of 'no', 'equiv', 'safe', 'same_kind', 'unsafe' "
            f"(got {casting!r})"
        )
    return cast(Casting, casting)


def _computable(dtype: np.dtype[Any], what: str, context: str) -> None:
    if dtype.kind not in _COMPUTED_KINDS or dtype.char in _UNSUPPORTED:
        raise DTypeError(
            f"{what} has dtype {dtype} in {context}: gpu_tc computes {DESCRIBED}"
        )


def resolve(
    operands: Sequence[np.dtype[Any]],
    context: str,
    *,
    dtype: Any = None,
    casting: Casting = "safe",
    out: np.dtype[Any] | None = None,
    promote: Any = None,
) -> Dtypes:
    """The result and compute dtypes of a call on operands of these dtypes.

    As numpy.einsum: the result type of the operands, or ``dtype``, into which every
    operand must cast under ``casting`` (then any operand that casts may come, object
    arrays included); with ``out`` and no ``dtype`` the work runs in the wider of that
    and ``out``'s dtype, which must cast into ``out`` under ``casting``; with both ``out``
    and ``dtype``, each must cast into the other.

    Args:
        operands: The operands' dtypes.
        context: Names the call in messages.
        dtype: The dtype to compute in (numpy's ``dtype=``), or None.
        casting: numpy's casting rule for the operands and ``out``.
        out: ``out``'s dtype, or None.
        promote: Applied to the operands' result type when no ``dtype`` is given
            (numpy.trace sums small integers as the platform integer).

    Raises:
        DTypeError: a dtype gpu_tc does not compute, or an operand cast the rule forbids.
        OutputTypeError: a cast into ``out`` the rule forbids.
    """
    if dtype is not None:
        try:
            base = np.dtype(dtype)
        except TypeError as err:
            raise DTypeError(f"dtype={dtype!r} is not a dtype in {context}") from err
    else:
        for index, operand in enumerate(operands):
            _computable(operand, f"operand {index}", context)
        base = np.result_type(*operands)
        if promote is not None:
            base = promote(base)
    _computable(base, "the result", context)
    work = base
    if out is not None:
        _computable(out, "out", context)
        if dtype is None:
            work = np.result_type(base, out)
    for index, operand in enumerate(operands):
        if not np.can_cast(operand, work, casting):
            raise DTypeError(
                f"cannot cast operand {index} from dtype {operand} to {work} according to "
                f"the rule {casting!r} in {context}"
            )
    if out is not None:
        if not np.can_cast(work, out, casting):
            raise OutputTypeError(
                f"out has dtype {out} but the result has dtype {work}, which the rule "
                f"{casting!r} does not cast into it, in {context}"
            )
        if dtype is not None and not np.can_cast(out, work, casting):
            raise OutputTypeError(
                f"out has dtype {out}, which the rule {casting!r} does not cast into "
                f"dtype={work} (numpy.einsum requires both directions), in {context}"
            )
    compute = "f" if work.char == "e" else dtype_char(work)
    return Dtypes(out if out is not None else work, compute)


def sum_promotion(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """numpy.sum's (and numpy.trace's) accumulator: bool and integers narrower than the
    platform integer widen to it (unsigned to its unsigned twin)."""
    if dtype.kind == "b" or (dtype.kind == "i" and dtype.itemsize < np.dtype(np.int_).itemsize):
        return np.dtype(np.int_)
    if dtype.kind == "u" and dtype.itemsize < np.dtype(np.uint).itemsize:
        return np.dtype(np.uint)
    return dtype
