"""Where slices run: a dask.distributed ``Client``, or this process.

:class:`LocalClient` has the three methods of ``distributed.Client`` that a sliced
contraction uses (``scatter``, ``submit`` and the futures' ``result``), so that
``client=None`` follows the same code path with no cluster. :func:`tree_sum` submits
the additions as soon as two partial sums of one level exist, so a balanced tree forms
while slices are submitted and a local run holds at most log2(slices) partial sums.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class Done:
    """A finished local task: its value, with ``result()`` as a future has."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self) -> Any:
        """The value."""
        return self._value


class LocalClient:
    """Runs every task at once in this process (the stand-in for a dask Client)."""

    def scatter(self, values: Sequence[Any], broadcast: bool = False, hash: bool = True
                ) -> list[Any]:
        """The values themselves: nothing to send (dask's options are ignored)."""
        return list(values)

    def submit(self, function: Callable[..., Any], *args: Any, pure: bool = True) -> Done:
        """Run ``function`` now, with finished tasks among ``args`` replaced by values
        (dask's ``pure`` is ignored)."""
        values = [x.result() if isinstance(x, Done) else x for x in args]
        return Done(function(*values))


def add(x: Any, y: Any) -> Any:
    """x + y as a new array (a task's inputs are never changed: dask may rerun it)."""
    return x + y


def tree_sum(client: Any, tasks: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> Any:
    """The sum of the results of ``tasks`` (function, args), added pairwise in a tree.

    Returns:
        The future (or :class:`Done`) of the sum.
    """
    stack: list[tuple[int, Any]] = []  # (level, future); levels strictly decrease
    for function, args in tasks:
        # Fresh keys each time: a key of a finished run may still be being released.
        item = (0, client.submit(function, *args, pure=False))
        while stack and stack[-1][0] == item[0]:
            level, other = stack.pop()
            item = (level + 1, client.submit(add, other, item[1], pure=False))
        stack.append(item)
    if not stack:
        raise ValueError("tree_sum needs at least one task")
    total = stack.pop()[1]
    while stack:
        total = client.submit(add, stack.pop()[1], total, pure=False)
    return total
