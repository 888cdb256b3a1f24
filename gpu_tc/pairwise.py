"""The pairwise order of an einsum: numpy's ``optimize`` argument read as a path
choice, and the path it gives as contractions of two tensors at a time.

gpu_tc contracts every einsum of several operands two tensors at a time (each pair one
GEMM-like primitive). A named choice asks opt_einsum for the path; an explicit path
(numpy.einsum_path's output) is followed as numpy follows it, with a step of more than
two tensors contracted pairwise in opt_einsum's "auto" order.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from opt_einsum import paths as oe_paths

from .errors import OptionsTypeError, PathError, PathNameError

# "auto" or another opt_einsum path name; (name, memory limit); or an explicit path
# ("einsum_path", (i, j), ...). Always hashable: it joins the plan's cache key.
PathChoice = str | tuple[Any, ...]

EXPLICIT = "einsum_path"
DEFAULT: PathChoice = "auto"


def path_choice(optimize: Any) -> PathChoice:
    """numpy.einsum's ``optimize`` as a hashable path choice.

    None and False give "auto": numpy's False means "no path search", but gpu_tc
    always contracts in pairs, and the search runs once per cached plan. True gives
    "greedy", as in numpy. A path name ("greedy", "optimal", or any opt_einsum has:
    "dp", ...; looked up only when a search runs, as numpy does) and numpy's
    ``(name, memory_limit)`` pair are taken as they are, and so is an explicit path
    ``["einsum_path", (0, 1), ...]``.

    Raises:
        OptionsTypeError: ``optimize`` is none of these (numpy raises TypeError).
    """
    if optimize is None or optimize is False:
        return DEFAULT
    if optimize is True:
        return "greedy"
    if isinstance(optimize, str):
        return optimize
    try:
        items = list(optimize)
    except TypeError:
        raise OptionsTypeError(f"Did not understand the path: optimize={optimize!r}") from None
    if items and isinstance(items[0], str) and items[0] == EXPLICIT:
        return (EXPLICIT, *(_entry(x, optimize) for x in items[1:]))
    if len(items) == 2 and isinstance(items[0], str) and isinstance(items[1], (int, float)):
        return (items[0], int(items[1]))
    raise OptionsTypeError(f"Did not understand the path: optimize={optimize!r}")


def _path_function(name: str) -> Any:
    try:
        return oe_paths.get_path_fn(name)
    except KeyError:
        known = ", ".join(repr(x) for x in sorted(oe_paths._PATH_OPTIONS))
        raise PathNameError(f"Path name {name!r} not found (known: {known})") from None


def _entry(step: Any, optimize: Any) -> tuple[int, ...]:
    try:
        return tuple(operator.index(x) for x in step)
    except TypeError:
        raise OptionsTypeError(
            f"step {step!r} of the path {optimize!r} is not a sequence of operand positions"
        ) from None


def contraction_pairs(
    choice: PathChoice, inputs: Sequence[str], output: str, extents: dict[str, int],
    context: str,
) -> list[tuple[int, int]]:
    """The contractions that ``choice`` gives, two tensors at a time.

    Args:
        choice: From :func:`path_choice`.
        inputs: Each operand's labels.
        output: The output's labels.
        extents: Every label's extent.
        context: Names the call in messages.

    Returns:
        Pairs of tensor ids: ids 0 to n-1 are the operands, and the result of the k-th
        pair is tensor n + k.

    Raises:
        PathError: an explicit path names an operand that is not there, names one
            twice, or leaves operands uncontracted.
        PathNameError: a search of an unknown name would run (three operands or more).
    """
    walk = _Walk([frozenset(x) for x in inputs], frozenset(output), extents, context)
    if isinstance(choice, tuple) and choice[:1] == (EXPLICIT,):
        path: Sequence[tuple[int, ...]] = choice[1:]
    elif len(inputs) < 3:  # nothing to search, as numpy
        path = [tuple(range(len(inputs)))] if len(inputs) == 2 else []
    else:
        name, limit = (choice, None) if isinstance(choice, str) else choice
        path = _path_function(name)(list(walk.labels), walk.output, dict(extents), limit)
    pending = walk.follow(path, list(range(len(inputs))), walk.output)
    if len(pending) != 1:
        raise PathError(
            f"Invalid einsum_path is specified: {len(pending) - 1} more operands has to be "
            f"contracted, in {context}"
        )
    return walk.pairs


class _Walk:
    """Follows a path over tensor ids, recording each pairwise contraction."""

    def __init__(
        self, labels: list[frozenset[str]], output: frozenset[str], extents: dict[str, int],
        context: str,
    ) -> None:
        self.labels = labels  # by tensor id; each contraction appends its result's
        self.output = output
        self.extents = extents
        self.context = context
        self.pairs: list[tuple[int, int]] = []

    def follow(
        self, path: Sequence[tuple[int, ...]], pending: list[int], output: frozenset[str]
    ) -> list[int]:
        """Run ``path`` (numpy's convention: each step removes the tensors at its
        positions and appends their product) over ``pending``; returns what is left."""
        for number, step in enumerate(path):
            if not step:
                raise PathError(
                    f"step {number} of the path names no operand, in {self.context}"
                )
            for position in step:
                if not 0 <= position < len(pending) or step.count(position) > 1:
                    raise PathError(
                        f"step {number} of the path, {step!r}, names position {position} "
                        f"{'twice' if step.count(position) > 1 else 'out of range'}: "
                        f"{len(pending)} tensors are left, in {self.context}"
                    )
            group = [pending[p] for p in step]
            for position in sorted(step, reverse=True):
                del pending[position]
            needed = output.union(*(self.labels[x] for x in pending))
            pending.append(self._contract(group, needed))
        return pending

    def _contract(self, group: list[int], needed: frozenset[str]) -> int:
        """Contract the tensors ``group`` (one: nothing to do); returns the result's id."""
        if len(group) == 1:
            return group[0]
        kept = frozenset().union(*(self.labels[x] for x in group)) & needed
        if len(group) > 2:  # pairwise, in opt_einsum's order for the group
            sub = oe_paths.auto([self.labels[x] for x in group], kept, dict(self.extents))
            (result,) = self.follow(sub, list(group), kept)
            return result
        self.pairs.append((group[0], group[1]))
        self.labels.append(kept)
        return len(self.labels) - 1
