"""A tensor network contracted in slices, each small enough for one worker.

:func:`plan` finds the pairwise order (opt_einsum's path; cotengra's search when that
path's largest intermediate exceeds ``memory_limit``) and the labels to slice
(cotengra), so that no intermediate of one slice exceeds ``memory_limit`` bytes. A
slice fixes the index of every sliced label; the slices' results add up to the result.
:meth:`SlicedPlan.execute` sends the operands to the workers once, runs every slice as
a task through a gpu_tc plan held per worker (built by the first slice a worker runs,
reused by the rest: all slices share shapes and strides) and sums the slices in a tree.

Example:
    >>> import numpy as np
    >>> from gpu_tc import distributed
    >>> a = np.ones((8, 8))
    >>> p = distributed.plan("ab,bc,ca->", a, a, a, memory_limit=8 * 8)
    >>> p.sliced != "" and p.largest_bytes <= 64
    True
    >>> float(p.execute(a, a, a))
    512.0
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any

import numpy as np
import opt_einsum

from ..api import einsum, prepare
from ..call import bind
from ..errors import OptionsError, PathNameError, ShapeError, TransferError
from ..expression import expand, parse
from ..options import Options
from ..plan import Plan
from .executor import LocalClient, tree_sum

# More slices than this is a limit too small to be useful: refused.
MAX_SLICES = 1 << 20
# Times the operands are sent and the slices run before a loss of the operands' every
# copy on the cluster (workers lost: dask's active memory manager keeps one replica of
# scattered data, which no task can recompute) is raised to the caller.
SEND_ATTEMPTS = 3
# cotengra's search: repeats of its greedy optimiser, each tree sliced and reconfigured
# in turns (fewer redundant FLOPs than slicing a finished tree); ~0.5 s for 25 tensors.
SEARCH_REPEATS = 16


@dataclass(frozen=True)
class SliceJob:
    """What a worker needs to run one slice (small: sent with every task)."""

    expression: str  # the sliced labels removed
    terms: tuple[str, ...]  # the operands' labels, sliced labels included
    sliced: str
    extents: tuple[int, ...]  # of the sliced labels
    path: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class SlicedPlan:
    """A contraction in slices, known before anything runs.

    Attributes:
        subscripts: The einsum expression as given.
        expression: The network contracted: each operand's diagonals and the labels
            summed out of one operand are taken first, on the client.
        peak_bytes: The most bytes of tensors alive at once in one slice (its slices
            of the operands included).
        largest_bytes: The largest intermediate of one slice (at most ``memory_limit``).
        operand_bytes: The bytes of the operands each worker holds.
        flops: Floating-point operations of all slices together (multiply and add).
        memory_limit: The bound asked for (None: no slicing).
        job: What each slice's task receives (the sliced labels, their extents, the path).
    """

    subscripts: str
    expression: str
    peak_bytes: int
    largest_bytes: int
    operand_bytes: int
    flops: int
    memory_limit: int | None
    job: SliceJob
    reductions: tuple[str | None, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def path(self) -> tuple[tuple[int, ...], ...]:
        """The pairwise order (opt_einsum's linear form)."""
        return self.job.path

    @property
    def sliced(self) -> str:
        """The sliced labels ("" when one slice holds the whole)."""
        return self.job.sliced

    @property
    def slices(self) -> int:
        """How many slices (tasks) run."""
        return math.prod(self.job.extents)

    def execute(self, *operands: Any, client: Any = None) -> Any:
        """The result, as an array of the operands' kind.

        Args:
            *operands: Arrays of the shapes the plan was made for.
            client: A ``distributed.Client``; None runs the slices in this process.

        Raises:
            ShapeError: the operands' shapes differ from the plan's.
            TransferError: an operand cannot be sent to the workers.
        """
        context = f"distributed.contract({self.subscripts!r})"
        arrays = bind(operands, None, context).operands
        shapes = tuple(tuple(x.shape) for x in arrays)
        if shapes != self.shapes:
            raise ShapeError(f"{context} was planned for shapes {self.shapes}, got {shapes}")
        reduced = [x if r is None else einsum(r, x) for x, r in zip(arrays, self.reductions)]
        runner = LocalClient() if client is None else client
        if client is not None:
            _check_sendable(reduced, context)
        for _ in range(SEND_ATTEMPTS - 1):
            try:
                return self._run(runner, reduced)
            except CancelledError as err:
                if not _lost_operands(err):
                    raise
        return self._run(runner, reduced)

    def _run(self, runner: Any, operands: list[Any]) -> Any:
        """Send the operands, run every slice and add the results up."""
        remote = runner.scatter(operands, broadcast=True, hash=False)
        tasks = [(run_slice, (self.job, index, *remote)) for index in range(self.slices)]
        return tree_sum(runner, tasks).result()


def plan(
    subscripts: str, *operands: Any, memory_limit: int | None = None, optimize: Any = "auto"
) -> SlicedPlan:
    """Plan a sliced contraction of ``operands`` (see the module's description).

    Args:
        subscripts: An explicit or implicit einsum expression ("..." allowed).
        *operands: The arrays (or objects with ``shape`` and ``dtype``).
        memory_limit: Bytes no intermediate of one slice may exceed; None: no slicing.
        optimize: opt_einsum's path choice when no slicing is needed.

    Raises:
        ShapeError: a label's extents differ between operands.
        OptionsError: ``memory_limit`` is not an int or None, or is below what any
            slicing reaches.
        PathNameError: ``optimize`` names no path search of opt_einsum.
    """
    context = f"distributed.contract({subscripts!r})"
    memory_limit = Options(memory_limit=memory_limit).memory_limit  # its checks, as an int
    operands = _as_arrays(operands)
    shapes = tuple(tuple(int(n) for n in x.shape) for x in operands)
    expression = expand(parse(subscripts), tuple(len(s) for s in shapes)).lettered()
    extents = _extents(expression.terms, shapes, context)
    itemsize = np.result_type(*[x.dtype for x in operands]).itemsize
    counts = "".join(expression.terms) + expression.output
    kept = tuple("".join(dict.fromkeys(x for x in term if counts.count(x) > term.count(x)
                                       or x in expression.output)) for term in expression.terms)
    reductions = tuple(None if k == t else f"{t}->{k}" for t, k in zip(expression.terms, kept))
    tree = _tree(kept, expression.output, extents, memory_limit, itemsize, optimize, context)
    sliced = "".join(sorted(tree.sliced_inds))
    job = SliceJob(
        expression=",".join("".join(x for x in t if x not in sliced) for t in kept)
        + "->" + expression.output,
        terms=kept, sliced=sliced, extents=tuple(extents[x] for x in sliced),
        path=tuple(tuple(step) for step in tree.get_path()),
    )
    operand_bytes = sum(math.prod(extents[x] for x in term) for term in kept) * itemsize
    return SlicedPlan(
        subscripts=subscripts, expression=",".join(kept) + "->" + expression.output,
        peak_bytes=int(tree.peak_size()) * itemsize, largest_bytes=int(tree.max_size()) * itemsize,
        operand_bytes=operand_bytes, flops=2 * int(tree.total_flops()),
        memory_limit=memory_limit, job=job, reductions=reductions, shapes=shapes,
    )


def contract(subscripts: str, *operands: Any, client: Any = None,
             memory_limit: int | None = None, optimize: Any = "auto") -> Any:
    """``plan(subscripts, *operands, ...).execute(*operands, client=client)``.

    Example:
        >>> import numpy as np
        >>> from gpu_tc import distributed
        >>> a = np.arange(4.0).reshape(2, 2)
        >>> distributed.contract("ij,jk->ik", a, a, memory_limit=32).tolist()
        [[2.0, 3.0], [6.0, 11.0]]
    """
    operands = _as_arrays(operands)
    sliced = plan(subscripts, *operands, memory_limit=memory_limit, optimize=optimize)
    return sliced.execute(*operands, client=client)


def _as_arrays(operands: Sequence[Any]) -> tuple[Any, ...]:
    """Arrays (anything with a shape and dtype) as they are, array-likes (nested lists,
    scalars) as NumPy arrays, as einsum takes them."""
    return tuple(x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)
                 for x in operands)


def _extents(terms: tuple[str, ...], shapes: tuple[tuple[int, ...], ...],
             context: str) -> dict[str, int]:
    extents: dict[str, int] = {}
    for index, (term, shape) in enumerate(zip(terms, shapes)):
        for label, extent in zip(term, shape):
            if extents.setdefault(label, extent) != extent:
                raise ShapeError(
                    f"label {label!r} has extent {extents[label]} and, in operand {index}, "
                    f"{extent} in {context}"
                )
    return extents


def _tree(terms: tuple[str, ...], output: str, extents: dict[str, int], memory_limit: int | None,
          itemsize: int, optimize: Any, context: str) -> Any:
    """cotengra's contraction tree of the path, sliced to fit ``memory_limit``."""
    import cotengra

    inputs = [tuple(t) for t in terms]
    shapes = [tuple(extents[x] for x in t) for t in terms]
    if len(terms) == 1:
        path: list[tuple[int, ...]] = [(0,)]
    else:
        text = ",".join(terms) + "->" + output
        try:
            path = opt_einsum.contract_path(text, *shapes, shapes=True, optimize=optimize)[0]
        except KeyError:
            raise PathNameError(
                f"optimize={optimize!r} names no path search of opt_einsum in {context}"
            ) from None
    sizes = dict(extents)
    tree = cotengra.ContractionTree.from_path(inputs, tuple(output), sizes, path=path)
    if memory_limit is None:
        return tree
    target = memory_limit // itemsize
    if target < 1:
        raise OptionsError(f"memory_limit={memory_limit} holds no element of {itemsize} "
                           f"bytes in {context}")
    if tree.max_size() <= target:
        return tree
    result = math.prod(extents[x] for x in output)
    if result > target:  # every slice computes the whole result
        raise OptionsError(f"memory_limit={memory_limit} is below the result's "
                           f"{result * itemsize} bytes in {context}")
    options = {"target_size": target, "allow_outer": False}
    search = cotengra.HyperOptimizer(methods=["greedy"], max_repeats=SEARCH_REPEATS,
                                     slicing_reconf_opts=options, parallel=False,
                                     progbar=False)
    try:
        found = [tree.slice(**options), search.search(inputs, tuple(output), sizes)]
    except RuntimeError as err:  # cotengra: no label left to slice
        raise OptionsError(f"memory_limit={memory_limit} is below any slice of {context}: "
                           f"{err}") from err
    fitting = [t for t in found if t.max_size() <= target and t.nslices <= MAX_SLICES]
    if not fitting:
        need = min(t.max_size() for t in found) * itemsize
        raise OptionsError(f"memory_limit={memory_limit} is below the smallest slice found "
                           f"({need} bytes, or more than {MAX_SLICES} slices) in {context}")
    return min(fitting, key=lambda t: (t.total_flops(), t.nslices))


def _check_sendable(arrays: list[Any], context: str) -> None:
    """Serialize each operand as dask would; a failure is a TransferError here."""
    from distributed.protocol import serialize

    for index, x in enumerate(arrays):
        try:
            serialize(x, on_error="raise")
        except Exception as err:  # noqa: BLE001 - any failure to serialize is the answer
            raise TransferError(f"operand {index} ({type(x).__name__}) cannot be sent to "
                                f"the workers in {context}: {err}") from err


_PLANS: dict[tuple[Any, ...], Plan] = {}
_PLANS_LOCK = threading.Lock()


def held_plan(job: SliceJob, views: list[Any]) -> Plan:
    """This process's plan for the slices of ``job`` with these layouts (built once)."""
    key = (job, tuple((x.shape, x.strides, x.dtype.str, type(x)) for x in views))
    with _PLANS_LOCK:
        found = _PLANS.get(key)
        if found is None:
            found = _PLANS[key] = prepare(job.expression, *views,
                                          optimize=["einsum_path", *job.path])
        return found


def run_slice(job: SliceJob, index: int, *operands: Any) -> Any:
    """The contraction of slice ``index`` (run on a worker)."""
    positions = dict(zip(job.sliced, np.unravel_index(index, job.extents))) if job.sliced else {}
    views = []
    for operand, term in zip(operands, job.terms):
        views.append(operand[tuple(int(positions[label]) if label in positions else slice(None)
                                   for label in term)])
    return held_plan(job, views).execute(*views)


def _lost_operands(err: CancelledError) -> bool:
    """Whether dask cancelled a task because data it needed is gone from the cluster
    (``FutureCancelledError`` with reason "lost dependencies"), which sending the
    operands again repairs."""
    return "lost dependencies" in str(getattr(err, "reason", None) or err)
