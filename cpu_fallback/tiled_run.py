"""A contraction run tile by tile, its tiles' plans made once per tile size."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from gpu_tc.backend import Scalars
from gpu_tc.gemm import GemmLowering, Lowering
from gpu_tc.memory import nbytes
from gpu_tc.problem import ContractionProblem

from . import cblas, openmp, workers
from .mkl import MklEngine
from .tile_grid import TileGrid, tile_offsets, tile_sizes
from .tiling import Tiling, accumulates, hoisted, tile_problem


class TilePlan(Protocol):
    """What a TiledRun asks of a tile's plan (contraction.CpuContractionPlan)."""

    lowering: Lowering

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None: ...

    def pack(self, x: Any, operand: str) -> Any: ...

    def multiply(self, a_mat: Any, b_mat: Any, d: Any, alpha: complex, beta: complex,
                 c: Any) -> None: ...

    def adding_loop(self, a: Any, b: Any, d: Any, alpha: complex) -> cblas.GemmLoop | None: ...


class TilePlanType(Protocol):
    """How a TiledRun makes a tile's plan: ``plan_type(tile, policy, engine=engine)``."""

    def __call__(self, problem: ContractionProblem, policy: str, *,
                 engine: MklEngine | None) -> TilePlan: ...


class TiledRun:
    """A contraction run tile by tile (see cpu_fallback.tiling): per tile size, a plan
    of the tile made by ``plan_type`` (contraction.CpuContractionPlan); the operand of
    an outer chunk is packed once; the chunks of a contracted label after the first add
    into their D tile.

    With ``workers`` > 1 (MKL's engine, calls with beta = 0), that many threads
    (cpu_fallback.workers) take the outer chunks one at a time as they finish, each
    running MKL on itself alone (MklEngine.one_thread): no OpenMP launch per tile. Where
    the outer label is contracted, each thread but the caller's adds its chunks into a D
    of its own, added into D at the end.
    """

    def __init__(self, problem: ContractionProblem, policy: str, tiling: Tiling,
                 plan_type: TilePlanType, engine: MklEngine | None = None,
                 workers: int = 1) -> None:
        self.tiling = tiling
        self._engine = engine
        workers = min(workers, tiling.outer.count) if tiling.outer is not None else 1
        self._serial = engine.serial() if engine is not None and workers > 1 else None
        self.workers = workers if self._serial is not None else 1
        self._held = hoisted(problem, tiling.inner)
        self._cuts = [c for c in (tiling.outer, tiling.inner) if c is not None]
        self._accumulating = [accumulates(problem, c) for c in self._cuts]
        self._grid = TileGrid(problem, self._cuts)
        self._plans: dict[tuple[tuple[int, ...], bool], TilePlan] = {}
        self._problem, self._policy, self._plan_type = problem, policy, plan_type
        if self.workers > 1:  # the threads' tile plans, made once here, not by each thread
            for sizes in itertools.product(*({hi - lo for lo, hi in c.chunks()}
                                             for c in self._cuts)):
                self._plan(sizes, True)

    @property
    def split_bytes(self) -> int:
        """The threads' own sums of D (all but the caller's), where the outer label is
        contracted and the run is split; else 0."""
        if self.workers == 1 or not self._accumulating[0]:
            return 0
        return (self.workers - 1) * nbytes(self._problem.d)

    def _plan(self, sizes: tuple[int, ...], serial: bool) -> TilePlan:
        plan = self._plans.get((sizes, serial))
        if plan is None:
            tile = tile_problem(self._problem, {c.label: n for c, n in zip(self._cuts, sizes)})
            plan = self._plans[sizes, serial] = self._plan_type(
                tile, self._policy, engine=self._serial if serial else self._engine)
        return plan

    def execute(self, a: Any, b: Any, d: Any, scalars: Scalars, c: Any) -> None:
        """Each tile: its chunks of A and B, its tile of D (and of C). Split over threads
        only as many as MKL's thread count now allows (threadpoolctl's limits), and not
        in a forked child (no worker threads there) nor on a worker thread itself."""
        outer = self.tiling.outer
        chunks = outer.chunks() if outer else [(0, 0)]
        engine = self._engine
        count = 1
        if (engine is not None and self.workers > 1 and scalars.beta == 0
                and not openmp.forked() and not workers.on_worker()):
            count = min(self.workers, engine.threads())
        if count == 1:
            self._run(a, b, d, scalars, c, chunks, False)
            return
        assert engine is not None
        adds = self._accumulating[0]
        # Each thread's own D, laid out as D (its tile plans were lowered for D's order).
        targets = [d] + [np.empty_like(d, order="K") if adds else d for _ in range(count - 1)]

        def run(k: int, taken: Iterator[tuple[int, int]]) -> None:
            """The chunks thread ``k`` takes: its first written into its D, the later
            ones added; MKL on the thread alone."""
            with engine.one_thread():
                self._run(a, b, targets[k], scalars, None, taken, True)

        ran = workers.share(chunks, count, run)
        sums = [target for target, done in zip(targets, ran) if done] if adds else []
        if sums and sums[0] is not d:
            np.copyto(d, sums[0])
        for target in sums[1:]:
            np.add(d, target, out=d)

    def _run(self, a: Any, b: Any, d: Any, scalars: Scalars, c: Any,
             chunks: Iterable[tuple[int, int]], serial: bool) -> None:
        """The tiles of the outer ``chunks`` (ascending; all of the inner ones), into
        ``d``: the first outer chunk's written, the later ones of a contracted outer
        label added.

        The tiles that add into D, from the second of the first one's sizes on, run as
        one cblas.GemmLoop where the tile plans allow: a BLAS call each, no views made.
        """
        alpha, beta = scalars.alpha, scalars.beta
        inner = self.tiling.inner
        inner_chunks = inner.chunks() if inner else [(0, 0)]
        firsts: tuple[int, int] | None = None  # a contracted chunk past these adds into D
        loop: cblas.GemmLoop | None = None  # adds the tiles of its first tile's sizes
        tried = False  # whether the first adding tile looked for a loop
        origin: list[tuple[int, int]] = []  # that tile's bounds
        origin_sizes: tuple[int, ...] = ()  # and its extents
        steps = self._grid.steps(a, b, d)
        for start, stop in chunks:
            held_mat = None
            firsts = (start, 0) if firsts is None else firsts
            for inner_start, inner_stop in inner_chunks:
                bounds = [(start, stop), (inner_start, inner_stop)][: len(self._cuts)]
                adds = any(acc and lo > first
                           for acc, (lo, _), first in zip(self._accumulating, bounds, firsts))
                sizes = tile_sizes(bounds)
                if adds and loop is not None and sizes == origin_sizes:
                    loop.add(*tile_offsets(bounds, origin, steps))
                    continue
                plan = self._plan(sizes, serial)
                a_t, b_t, d_t = (self._grid.view(x, i, bounds) for i, x in enumerate((a, b, d)))
                c_t = None if c is None else self._grid.view(c, 2, bounds)
                tile_beta = beta
                if adds:
                    tile_beta, c_t = 1, d_t  # a later chunk of a contracted label: add to D
                    if not tried:
                        tried, origin, origin_sizes = True, bounds, sizes
                        loop = plan.adding_loop(a_t, b_t, d_t, alpha)
                        if loop is not None:
                            loop.add(0, 0, 0)
                            continue
                low = plan.lowering
                if not isinstance(low, GemmLowering) or self._held is None:
                    plan.execute((a_t, b_t), d_t, Scalars(alpha, tile_beta), c_t)
                    continue
                spec = low.a if self._held == "a" else low.b
                if held_mat is None or held_mat[0] != spec:
                    held_mat = None  # the last chunk's copy goes before the next is made
                    held_mat = (spec, plan.pack(a_t if self._held == "a" else b_t, self._held))
                if self._held == "a":
                    plan.multiply(held_mat[1], plan.pack(b_t, "b"), d_t, alpha, tile_beta, c_t)
                else:
                    plan.multiply(plan.pack(a_t, "a"), held_mat[1], d_t, alpha, tile_beta, c_t)


def looped(problem: ContractionProblem, policy: str, loop: Tiling,
           plan_type: TilePlanType, engine: MklEngine | None,
           budget: int | None) -> TiledRun:
    """The loop of GEMMs on views: split over MKL's thread count (NumPy's BLAS sets its
    threads for the whole process: one thread runs its loop), fewer where ``budget`` has
    room for fewer of the threads' own copies of D (TiledRun caps it by the chunks)."""
    assert loop.outer is not None
    count = engine.threads() if engine is not None else 1
    if budget is not None and accumulates(problem, loop.outer):
        count = min(count, budget // max(1, nbytes(problem.d)) + 1)
    return TiledRun(problem, policy, loop, plan_type, engine, count)
