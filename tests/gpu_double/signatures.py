"""Functions declared by the C signature their real Cython binding shows.

A real binding (nvmath's, CuPy's) starts its docstring with a line such as
``permute(intptr_t handle, intptr_t plan, intptr_t alpha, intptr_t a, intptr_t b,
intptr_t stream)``: parameter names, C types and return type. :func:`binding` gives an
emulated function exactly that line as its docstring and its parameter names as its
Python signature, and converts each typed argument as Cython would (``__index__``,
range), so the conformance test can compare the line with the real one.
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
from collections.abc import Callable
from typing import Any

# Integer C types the bindings use, with their ranges.
_RANGES = {
    "int": (-(2**31), 2**31 - 1),
    "int32_t": (-(2**31), 2**31 - 1),
    "uint32_t": (0, 2**32 - 1),
    "long long": (-(2**63), 2**63 - 1),
    "intptr_t": (-(2**63), 2**63 - 1),
    "size_t": (0, 2**64 - 1),
    "uint64_t": (0, 2**64 - 1),
}
_PARAMETER = re.compile(r"^(?:(?P<type>[a-z_0-9 ]+?)\s+)?(?P<name>[A-Za-z_][A-Za-z_0-9]*)$")


def parse(signature: str) -> tuple[str, list[tuple[str | None, str]], str | None]:
    """(name, [(C type or None, parameter name)], return type or None) of a signature line."""
    found = re.fullmatch(r"(\w+)\((.*)\)(?: -> (.+))?", signature.strip())
    if found is None:
        raise ValueError(f"not a binding signature: {signature!r}")
    name, inside, returns = found.groups()
    parameters: list[tuple[str | None, str]] = []
    for part in filter(None, (p.strip() for p in inside.split(","))):
        match = _PARAMETER.match(part)
        if match is None:
            raise ValueError(f"cannot read parameter {part!r} of {signature!r}")
        parameters.append((match["type"], match["name"]))
    return name, parameters, returns


def convert(value: Any, c_type: str, name: str) -> int:
    """``value`` as Cython converts an argument to ``c_type`` (TypeError, OverflowError)."""
    number = operator.index(value)
    low, high = _RANGES[c_type]
    if not low <= number <= high:
        raise OverflowError(f"value {number} of argument {name!r} is out of range for {c_type}")
    return number


def binding(signature: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare an emulated function by its real binding's signature line."""
    name, parameters, _ = parse(signature)

    def declare(function: Callable[..., Any]) -> Callable[..., Any]:
        if function.__name__ != name:
            raise AssertionError(f"{function.__name__} declared as {name}")
        python = inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for _, p in parameters]
        )

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = python.bind(*args, **kwargs)
            values = [
                value if c_type is None else convert(value, c_type, parameter)
                for (c_type, parameter), value in zip(parameters, bound.args)
            ]
            return function(*values)

        call.__doc__ = signature
        call.__signature__ = python  # type: ignore[attr-defined]
        call.__c_signature__ = signature  # type: ignore[attr-defined]
        return call

    return declare


def declared(module: Any) -> dict[str, str]:
    """Every function of ``module`` declared with :func:`binding`: name -> signature line."""
    return {
        name: value.__c_signature__
        for name, value in vars(module).items()
        if callable(value) and hasattr(value, "__c_signature__")
    }
