"""A contraction of a small inner extent computed where its operands lie: the small-K
kernel (cpu_fallback.small_k) finds every element of A, B and D by offset tables, so
no operand is packed and no result staged, whatever the layouts.

The GEMM lowerings (gpu_tc.gemm) copy an operand whose labels do not merge into a
matrix, then multiply the copy: with a few dozen terms per element of D the copy can
cost as much as the product (TCCG's ``be,dcea->dcba`` at 36^5: B permuted in 0.7 ms,
the product 1.3 ms). The kernel packs panels of B anyway, so it gathers them straight
from B's layout; A's elements are read in place and D's written in place, its tiles
as vectors where D's columns lie consecutively. The plan is offered beside the
lowerings and kept only where it measures faster (cpu_fallback.measure).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.memory import nbytes
from gpu_tc.problem import ContractionProblem

from . import kernels
from .contraction import CpuContractionPlan
from .raw_memory import memory_extent

# Bytes of B one thread's packed panel takes at most (small_k.c's PANEL_BYTES), and
# its columns' offsets and run bits (at most 16 bytes a column) beside it.
PANEL_BYTES = 512 * 1024
# The most columns of a tile of D (small_k.c's CB, at most 63).
TILE_COLUMNS = 63


def gathered_plans(
    problem: ContractionProblem, fallback: CpuContractionPlan, budget: int | None
) -> list[GatheredPlan]:
    """The gathered plans of ``problem`` where the kernel serves it and its temporaries
    fit ``budget`` (bytes; None: no bound): one by the kernel's widest build and one by
    each of its narrower builds worth timing (small_k.narrower_builds), or none. A
    product that sums nothing (K = 1) takes them only where its offset tables are small
    beside D (not for a scale by a scalar, whose tables would list every element of D)."""
    module = kernels.load("small_k", "small-K products run on BLAS")
    if module is None:
        return []
    groups = _groups(problem)
    if groups is None:
        return []
    k = math.prod(problem.a.extent(x) for x in groups.k)
    if not module.serves(problem.d.dtype, k):
        return []
    plan = GatheredPlan(problem, groups, fallback, module)
    if budget is not None and plan.temporary_bytes > budget:
        return []
    d_bytes = nbytes(problem.d)
    if k == 1 and plan.table_bytes > d_bytes // 4:  # a product by a scalar or a short vector
        return []
    return [plan, *(GatheredPlan(problem, groups, fallback, module, build)
                    for build in module.narrower_builds())]


@dataclass(frozen=True)
class Groups:
    """The labels of each role, ordered as the kernel walks them: ``rows`` from the
    operand the kernel calls A, ``cols`` from its B (whose free labels hold D's
    unit-stride label), ``batch`` and ``k``; ``swap``: the kernel's A is the problem's B."""

    rows: str
    cols: str
    batch: str
    k: str
    swap: bool


def _groups(problem: ContractionProblem) -> Groups | None:
    """The kernel's label groups of ``problem``; None where it cannot serve the problem
    (mixed dtypes, an empty or zero-stride D, D's unit stride on a batch label or
    none)."""
    a, b, d = problem.a, problem.b, problem.d
    if not a.dtype == b.dtype == d.dtype or 0 in d.extents + a.extents + b.extents:
        return None
    if 0 in d.strides or not d.labels:
        return None
    roles = problem.roles
    fastest = min(d.labels, key=lambda x: abs(d.stride(x)))
    if d.stride(fastest) != 1 or fastest in roles.batch:
        return None
    swap = fastest in roles.free_a
    rows, cols = (roles.free_b, roles.free_a) if swap else (roles.free_a, roles.free_b)
    by_d = sorted(d.labels, key=lambda x: -abs(d.stride(x)))
    packed = a if swap else b
    return Groups(
        rows="".join(x for x in by_d if x in rows),
        cols="".join(x for x in by_d if x in cols),
        batch="".join(x for x in by_d if x in roles.batch),
        k="".join(sorted(roles.contracted, key=lambda x: -abs(packed.stride(x)))),
        swap=swap,
    )


class GatheredPlan(PlanDefaults):
    """D = alpha * A * B by the small-K kernel on the operands where they lie, by its
    widest build or the narrower one ``build`` names (route "small-k-avx2:gathered"); a
    call with beta != 0, a complex alpha or a stride of a fraction of an element runs
    ``fallback`` (a lowering's plan)."""

    def __init__(
        self, problem: ContractionProblem, groups: Groups,
        fallback: CpuContractionPlan, kernel: Any, build: str | None = None,
    ) -> None:
        self.problem = problem
        self.route = f"small-k-{build}:gathered" if build else "small-k:gathered"
        self._kernel = kernel
        self._build = build
        self._groups = groups
        self._fallback = fallback
        d = problem.d
        self._counts = tuple(
            math.prod(problem.a.extent(x) if x in problem.a.labels else d.extent(x)
                      for x in labels)
            for labels in (groups.rows, groups.cols, groups.k, groups.batch)
        )
        m, n, k, batches = self._counts
        itemsize = np.dtype(d.dtype).itemsize
        # A panel holds at most PANEL_BYTES, and no more columns than B has (rounded up
        # to whole tiles of at most TILE_COLUMNS).
        columns = min(PANEL_BYTES // (k * itemsize), n + TILE_COLUMNS)
        threads = max(os.cpu_count() or 1, int(kernel.max_threads()))
        # The tables of the last layout called: (its strides, the tables or None).
        self._tables: tuple[Any, np.ndarray | None] | None = None
        self.table_bytes = 8 * (2 * (m + n + k) + 3 * batches)
        panel = min(PANEL_BYTES, k * columns * itemsize)
        self.temporary_bytes = max(threads * (panel + 16 * columns + 128) + self.table_bytes,
                                   fallback.temporary_bytes)
        operands = "B, A" if groups.swap else "A, B"
        self.reason = (
            f"the small-K kernel (K = {k}) reads {operands} where they lie "
            f"({_labels('rows', groups.rows)}, {_labels('columns', groups.cols)} gathered "
            f"into its panels, {_labels('batch', groups.batch)}) and writes D in place: "
            "no copies" + (f"; its {build.upper()} build" if build else "")
        )

    def __repr__(self) -> str:
        return f"GatheredPlan(reason={self.reason!r})"

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        """Write the result into ``d``; a call adding beta * ``c`` runs the fallback."""
        a, b = inputs
        if self._groups.swap:
            a, b = b, a
        key = (a.strides, b.strides, d.strides)
        if self._tables is None or self._tables[0] != key:
            self._tables = key, self._offsets(a, b, d)
        tables, alpha = self._tables[1], scalars.alpha
        if tables is None or scalars.beta != 0 or np.imag(alpha) != 0:
            self._fallback.execute(inputs, d, scalars, c)
            return
        self._kernel.gathered(a, b, d, self._counts, tables, float(np.real(alpha)),
                              self._build)

    def _offsets(self, a: Any, b: Any, d: Any) -> np.ndarray | None:
        """The kernel's offset tables for these arrays, from each one's lowest address
        (see small_k.gathered); None where a stride is not a whole number of elements."""
        if any(s % x.itemsize for x in (a, b, d) for s in x.strides):
            return None
        problem, groups = self.problem, self._groups
        specs = (problem.b, problem.a) if groups.swap else (problem.a, problem.b)
        arrays = {"a": (specs[0], a), "b": (specs[1], b), "d": (problem.d, d)}

        def table(operand: str, labels: str) -> np.ndarray:
            spec, array = arrays[operand]
            strides = [array.strides[spec.labels.index(x)] // array.itemsize for x in labels]
            return _grid([spec.extent(x) for x in labels], strides)

        def batch(operand: str) -> np.ndarray:  # from the operand's lowest address
            array = arrays[operand][1]
            base, _ = memory_extent(array.shape, tuple(s // array.itemsize
                                                       for s in array.strides))
            return table(operand, groups.batch) + base

        return np.concatenate([
            table("a", groups.rows), table("d", groups.rows),
            table("b", groups.cols), table("d", groups.cols),
            table("a", groups.k), table("b", groups.k),
            batch("a"), batch("b"), batch("d"),
        ])


def _grid(extents: list[int], strides: list[int]) -> np.ndarray:
    """The offsets of every position of labels with these extents and strides, the
    last label fastest (one zero offset for no labels)."""
    offsets = np.zeros(1, dtype=np.int64)
    for extent, stride in zip(extents, strides):
        offsets = (offsets[:, None] + np.arange(extent, dtype=np.int64) * stride).reshape(-1)
    return offsets


def _labels(role: str, labels: str) -> str:
    """"rows labels 'ab'" (a form the caller's labels replace: gpu_tc.compose.relabel),
    or "no rows label"."""
    return f"{role} labels '{labels}'" if labels else f"no {role} label"
