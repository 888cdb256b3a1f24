"""The emulated cuTENSOR's objects (handles, descriptors, preferences, plans) and switches.

Every object lives in one registry under a fake address; a destroyed, unknown or
wrong-kind address is INVALID_VALUE (a real library would crash or corrupt memory).

Switches, read from the environment at import:
- ``GPU_DOUBLE_STRICT=1``: accept only what ``cutensor.h`` documents, demand that C's
  descriptor *is* D's (``descC == descD``) where the header says "identical", and that
  work runs on CuPy's current stream (gpu_tc's contract: off it, work races).
- ``GPU_DOUBLE_MISSING=cutensor``: libcutensor cannot be loaded (as nvmath reports it).
- ``GPU_DOUBLE_REFUSE=permutation:OP_EXP,...``: NOT_SUPPORTED for that operator in that
  kind of operation, standing in for the real support matrix this double cannot know.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from . import memory
from .cutensor_types import Operator, Status, fail

STRICT = os.environ.get("GPU_DOUBLE_STRICT", "") == "1"
MISSING = "cutensor" in os.environ.get("GPU_DOUBLE_MISSING", "").split(",")
REFUSED: set[tuple[str, int]] = {
    (kind, int(Operator[name]))
    for kind, _, name in (
        item.partition(":") for item in os.environ.get("GPU_DOUBLE_REFUSE", "").split(",") if item
    )
}


class LibraryNotFound(RuntimeError):
    """How nvmath's loader (cuda.pathfinder) reports a shared library it cannot find."""


def require_library() -> None:
    """Raise as nvmath does when libcutensor cannot be loaded."""
    if MISSING:
        raise LibraryNotFound(
            'Failure finding "libcutensor.so.2": No such file: libcutensor.so.2 '
            "(emulated: GPU_DOUBLE_MISSING=cutensor)"
        )


@dataclass
class Handle:
    """A handle's device and plan cache (see cutensor_cache): its capacity, and the
    signatures of the operations whose plans it holds, oldest first."""

    device: int
    cache_lines: int = 64
    cached: dict[str, None] = field(default_factory=dict)


@dataclass(frozen=True)
class Tensor:
    """A tensor descriptor's content."""

    handle: int
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    data_type: int
    alignment: int

    def region(self, pointer: int, itemsize: int) -> memory.Region:
        return memory.Region(pointer, itemsize, self.extents, self.strides)


@dataclass(frozen=True)
class Term:
    """One tensor of an operation: its descriptor address and content, modes, unary op."""

    desc: int
    tensor: Tensor
    modes: tuple[int, ...]
    op: int


@dataclass(frozen=True)
class Operation:
    """An operation descriptor's content; ``terms`` by role ("A", "B", "C", "D")."""

    kind: str
    handle: int
    terms: dict[str, Term]
    binary_ops: tuple[int, ...]
    compute: str
    scalar_type: int


@dataclass
class Preference:
    algo: int
    jit: int
    attributes: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    operation: Operation
    device: int
    required_workspace: int


# Re-entrant: the garbage collector may run a finalizer that takes it (a freed
# allocation, a destroyed object) while this thread holds it.
lock = threading.RLock()
_objects: dict[int, tuple[str, Any]] = {}
_addresses = itertools.count(1)


def new(kind: str, value: Any) -> int:
    """Register an object; returns its fake address."""
    with lock:
        address = 0x7D00_0000_0000 + 0x80 * next(_addresses)
        _objects[address] = (kind, value)
    return address


def get(address: int, kind: str, what: str) -> Any:
    """The live object of ``kind`` at ``address`` (INVALID_VALUE otherwise)."""
    entry = _objects.get(address)
    if entry is None or entry[0] != kind:
        raise fail(Status.INVALID_VALUE, f"{what} {address:#x} is not a live {kind}")
    return entry[1]


def destroy(address: int, kind: str) -> None:
    """Destroy an object exactly once (a second destroy is INVALID_VALUE here)."""
    with lock:
        entry = _objects.get(address)
        if entry is None or entry[0] != kind:
            raise fail(Status.INVALID_VALUE, f"destroying {address:#x}: not a live {kind}")
        del _objects[address]


def live_objects() -> Counter[str]:
    """How many objects of each kind are alive (leak checks)."""
    with lock:
        # Copied in one C call first: counting allocates, so the collector may run a
        # finalizer that destroys an object while the generator walks the dict.
        snapshot = _objects.copy()
    return Counter(kind for kind, _ in snapshot.values())
