"""Bind one call: its backend, its operands as that backend's arrays, the result dtype,
and the checks of ``out``, ``c``, scalars and operator arguments.

Everything read from an array goes through the backend, so a call binds the same way
on every array type.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import Backend, Scalars, select_backend
from .dtypes import Casting, Dtypes, resolve
from .errors import (
    DTypeError,
    ExpressionError,
    OperandError,
    OperandValueError,
    OutputError,
    OutputTypeError,
    ShapeError,
)
from .expression import from_interleaved
from .problem import TensorSpec, contiguous_spec
from .strides import elements_overlap


def split_args(args: Sequence[Any]) -> tuple[str, list[Any]]:
    """(subscripts, operands) of ``einsum(*args)``, from either of numpy's forms
    (subscripts as str or, as numpy takes them, ASCII bytes)."""
    if not args:
        raise ExpressionError("einsum needs subscripts and at least one operand")
    if isinstance(args[0], bytes):
        args = (_decoded(args[0]), *args[1:])
    if isinstance(args[0], str):
        if len(args) < 2:
            raise ExpressionError(f"{args[0]!r} was given no operand")
        return args[0], list(args[1:])
    if len(args) < 2:
        raise ExpressionError("the interleaved form needs an operand and its sublist")
    return from_interleaved(args)


def _decoded(subscripts: bytes) -> str:
    try:
        return subscripts.decode("ascii")
    except UnicodeDecodeError:
        raise ExpressionError(f"subscripts {subscripts!r} are not ASCII") from None


def is_dask_array(x: Any) -> bool:
    """Whether ``x`` is a dask array (dask is not imported: none exists before it is)."""
    module = sys.modules.get("dask.array")
    return module is not None and isinstance(x, module.Array)


def any_dask(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` is a dask array (gpu_tc.distributed.arrays runs those)."""
    return "dask.array" in sys.modules and any(is_dask_array(x) for x in values)


def type_name(x: Any) -> str:
    """"numpy.ndarray", "cupy.ndarray", "list": how messages name a value's type."""
    cls = x if isinstance(x, type) else type(x)
    module = cls.__module__.split(".")[0]
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


@dataclass
class Call:
    """One bound call.

    Attributes:
        context: Names the call in messages, e.g. "einsum('ij,jk->ik')".
        backend: The backend of the operands' array type.
        operands: The operands as the backend's arrays.
        out: The checked ``out`` array, or None.
        c: The array added as beta * c (the backend's), or None.
    """

    context: str
    backend: Backend
    operands: list[Any]
    out: Any
    c: Any = None

    def dtypes(
        self,
        operands: Sequence[Any] | None = None,
        *,
        dtype: Any = None,
        casting: Casting = "safe",
        promote: Any = None,
    ) -> Dtypes:
        """The result and compute dtypes (numpy's rules; see :func:`gpu_tc.dtypes.resolve`)
        of ``operands`` (default: all), ``out`` included.

        Raises:
            DTypeError: a dtype gpu_tc does not compute, or a cast the rule forbids.
            OutputTypeError: the result cannot be cast into ``out``.
        """
        arrays = self.operands if operands is None else operands
        return resolve(
            [self.backend.dtype(x) for x in arrays], self.context, dtype=dtype,
            casting=casting, out=None if self.out is None else self.backend.dtype(self.out),
            promote=promote,
        )

    def layout_keys(self) -> tuple[Hashable, ...]:
        """Each operand's layout as key values."""
        return tuple(self.backend.layout_key(x) for x in self.operands)

    def out_key(self) -> Hashable | None:
        """``out``'s layout as key values, or None."""
        return None if self.out is None else self.backend.layout_key(self.out)

    def output_spec(
        self, labels: str, extents: Sequence[int], dtype: str, order: str = "C"
    ) -> TensorSpec:
        """The layout the plan writes, in the compute dtype ``dtype``: ``out``'s, after
        checking its shape, or a new one in ``order`` ("C" or "F").

        ``out`` of another dtype, or with byte strides that are not whole elements, is
        written through a temporary (then cast and copied into it).

        Raises:
            OutputError: ``out`` has another shape.
        """
        out = self.out
        if out is not None:
            layout = self.backend.layout(out)
            if layout.shape != tuple(extents):
                raise OutputError(
                    f"out has shape {layout.shape} but the result has shape {tuple(extents)} "
                    f"in {self.context}"
                )
            if layout.dtype == dtype and self.backend.whole_strides(out):
                return TensorSpec(labels, tuple(extents), layout.strides, dtype)
        spec = contiguous_spec(labels[::-1] if order == "F" else labels,
                               tuple(extents)[::-1] if order == "F" else tuple(extents), dtype)
        return spec.permuted(labels) if order == "F" else spec

    def addend(self, output: TensorSpec) -> Any:
        """``c`` checked against the result's shape (None without one); run() casts it
        where its dtype differs.

        Raises:
            ShapeError: ``c`` has another shape.
        """
        c = self.c
        if c is not None:
            check_addend_shape(self.backend.layout(c).shape, output.extents, self.context)
        return c


def check_addend_shape(shape: tuple[int, ...], result_shape: tuple[int, ...],
                       context: str) -> None:
    """Raise ShapeError unless ``c`` has the result's shape (no broadcasting)."""
    if tuple(shape) != tuple(result_shape):
        raise ShapeError(
            f"c has shape {tuple(shape)} but the result has shape {tuple(result_shape)} in "
            f"{context}"
        )


def bind(operands: Sequence[Any], out: Any, context: str, c: Any = None) -> Call:
    """Choose the backend, adopt the operands (and ``c``, numbered after them) and check
    ``out``'s type and memory.

    Raises:
        OperandError: operands of two backends, or one that cannot be an array.
        OutputError: ``out`` is not the backend's array, is read-only, or has elements
            that share memory.
    """
    values = [*operands, *([] if c is None else [c])]
    backend = select_backend(values, context)
    adopted = adopt(backend, values)
    if out is not None:
        check_out(backend, out, context)
    if c is None:
        return Call(context, backend, adopted, out)
    return Call(context, backend, adopted[:-1], out, adopted[-1])


def adopt(backend: Backend, operands: Sequence[Any]) -> list[Any]:
    """The operands as ``backend``'s arrays.

    Raises:
        OperandError: one cannot be an array (OperandValueError, a ValueError too, where
            its values cannot: a ragged list).
    """
    adopted = []
    for index, x in enumerate(operands):
        try:
            adopted.append(backend.adopt(x))
        except Exception as err:  # noqa: BLE001 - any conversion failure is bad input
            error = OperandValueError if isinstance(err, ValueError) else OperandError
            raise error(f"operand {index} cannot be read as an array: {err}") from err
    return adopted


def check_out(backend: Backend, out: Any, context: str) -> None:
    """``out`` must be the backend's array, writable, with no two elements in one place.

    Raises:
        OutputError: it is not.
    """
    if not isinstance(out, backend.array_type):
        raise OutputTypeError(
            f"out is a {type_name(out)} but the operands need a "
            f"{type_name(backend.array_type)} in {context}"
        )
    if not backend.writable(out):
        raise OutputError(f"out is read-only in {context}")
    layout = backend.layout(out)
    if elements_overlap(layout.shape, layout.strides):
        raise OutputError(
            f"out has elements that share memory (shape {layout.shape}, strides "
            f"{layout.strides} elements) in {context}: writing it would race"
        )


def checked_scalars(context: str, dtype: str, **values: Any) -> Scalars:
    """The call's scalars (alpha, beta, gamma) as numbers of the compute dtype's kind.

    Each must be a number: real for a real dtype (a complex one with no imaginary part
    is taken as its real part), whole and within range for an integer dtype (kept
    exact, never through a float) and 0 or 1 for bool.

    Raises:
        DTypeError: one is not.
    """
    kind = np.dtype(dtype).kind
    checked: dict[str, Any] = {}
    for name, value in values.items():
        if not isinstance(value, (int, float, complex, np.number)) or isinstance(value, bool):
            raise DTypeError(f"{name}={value!r} is not a number in {context!r}")
        if kind != "c" and complex(value).imag != 0:
            raise DTypeError(
                f"{name}={value!r} is complex but the result dtype {np.dtype(dtype)} is real "
                f"in {context!r}"
            )
        if kind == "f" and isinstance(value, (complex, np.complexfloating)):
            checked[name] = value.real
        else:
            checked[name] = value if kind in "fc" else _whole(name, value, dtype, context)
    return Scalars(**checked)


def _whole(name: str, value: Any, dtype: str, context: str) -> int | bool:
    """``value`` as an int (bool for a bool dtype), exact."""
    if isinstance(value, (int, np.integer)):
        number = int(value)
    else:
        real = complex(value).real
        if not real.is_integer():
            raise DTypeError(
                f"{name}={value!r} is not a whole number but the result dtype "
                f"{np.dtype(dtype)} is an integer in {context!r}"
            )
        number = int(real)
    if np.dtype(dtype).kind != "b":
        bounds = np.iinfo(dtype)
        if not bounds.min <= number <= bounds.max:
            raise DTypeError(
                f"{name}={value!r} does not fit the result dtype {np.dtype(dtype)} "
                f"([{bounds.min}, {bounds.max}]) in {context!r}"
            )
        return number
    if number not in (0, 1):
        raise DTypeError(f"{name}={value!r} is neither 0 nor 1 for a bool result in {context!r}")
    return bool(number)


def check_operators(operators: Mapping[str, tuple[type[enum.Enum], Any]], context: str) -> None:
    """Each operator argument must be a member of its Enum (checked before any cache
    lookup: IntEnum members of different kinds compare equal).

    Raises:
        DTypeError: one is not.
    """
    for name, (enum_type, op) in operators.items():
        if not isinstance(op, enum_type):
            raise DTypeError(f"{name}={op!r} is not a {enum_type.__name__} in {context}")
