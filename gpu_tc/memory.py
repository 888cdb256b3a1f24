"""The temporaries of a composed plan, counted before it runs, against a memory limit.

A call holds, besides its result: operands cast or reduced ahead of the contractions,
intermediates of a chain, a result computed in another dtype than the caller gets, and
each primitive plan's own copies (``PrimitivePlan.temporary_bytes``). A :class:`Ledger`
follows a plan's stages in the order they run: it gives each primitive plan the budget
left by what is held at that moment, records the peak, and refuses, before any work, a
plan whose peak exceeds ``Options(memory_limit=...)``.
"""

from __future__ import annotations

import numpy as np

from .errors import MemoryLimitError
from .problem import TensorSpec


def nbytes(spec: TensorSpec) -> int:
    """The bytes of a dense array laid out as ``spec``."""
    return spec.size * np.dtype(spec.dtype).itemsize


class Ledger:
    """The peak of temporaries over a plan's stages.

    Args:
        limit: ``Options.memory_limit`` (None: no limit).
        context: Names the call in the error.

    Example:
        >>> ledger = Ledger(100, "einsum('ij,jk->ik')")
        >>> ledger.budget(held=60)
        40
        >>> ledger.record(held=60, plan_bytes=30)
        >>> ledger.peak
        90
    """

    def __init__(self, limit: int | None, context: str) -> None:
        self.limit = limit
        self.context = context
        self.peak = 0

    def budget(self, held: int) -> int | None:
        """What a primitive plan may take while ``held`` bytes are held (None: no limit)."""
        return None if self.limit is None else max(0, self.limit - held)

    def record(self, held: int, plan_bytes: int) -> None:
        """A stage runs while ``held`` bytes are held and its plan takes ``plan_bytes``."""
        self.peak = max(self.peak, held + plan_bytes)

    def check(self) -> None:
        """Raise when the peak exceeds the limit.

        Raises:
            MemoryLimitError: naming the limit and the smallest need found.
        """
        if self.limit is not None and self.peak > self.limit:
            raise MemoryLimitError(
                f"{self.context}: memory_limit={self.limit} bytes is below what it needs at "
                f"least, {self.peak} bytes of temporaries (copies of operands, "
                f"intermediates, workspace) with the smallest tiles",
                self.peak,
            )
