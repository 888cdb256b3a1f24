"""The keys of the plan cache's two levels: plain values only.

A key never holds a pointer, an ``id()`` or a ``hash()`` value (CuPy returned wrong
contractions from such keys: cupy#7318, #7812, #8149): labels are canonical, layouts are
shapes, strides and dtypes, and what else a plan depends on (device, alignment) is the
backend's ``key_extra``, itself plain values. Keys are NamedTuples: typed fields, and a
tuple's hashing and comparison (a frozen dataclass costs a microsecond more per call).
A backend's ``warm_key`` is the third kind: flat and uncanonicalised, for speed, over
the same values.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from .options import Options
from .problem import PrimitiveProblem


class ProgramKey(NamedTuple):
    """The key of a composed plan (the programs level).

    Attributes:
        kind: "einsum", "permute", "reduce", "elementwise" or "trace".
        subscripts: The canonical subscripts ("" for a trace).
        operands: Each planned operand's ``backend.layout_key``.
        out: ``out``'s ``backend.layout_key``, or None for a new result.
        extra: The backend's ``key_extra`` (device, alignments; () on the CPU).
        options: The plan options.
        operators: The operator arguments (a trace: its axes), in call order.
    """

    kind: str
    subscripts: str
    operands: tuple[Hashable, ...]
    out: Hashable | None
    extra: Hashable
    options: Options
    operators: tuple[Hashable, ...] = ()


class PrimitiveKey(NamedTuple):
    """The key of a backend's primitive plan (the primitive plans level): the problem
    with canonical labels, so equivalent problems share one plan."""

    problem: PrimitiveProblem
    backend: str
    extra: Hashable
    options: Options
