"""Run a GEMM lowering (gpu_tc.gemm) with numpy.matmul on views and packed buffers."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.gemm import (
    BroadcastOperand,
    GemmLowering,
    MultiplyLowering,
    lower,
)
from gpu_tc.problem import ContractionProblem, TensorSpec

from . import cblas, kernels, openmp, workers
from .fresh_call import fresh_call, gives_scalar, outer_extents
from .mkl import MklEngine
from .permute import write_scaled
from .stacks import Stack
from .tile_grid import TileGrid, tile_offsets, tile_sizes
from .tiling import (
    Tiling,
    accumulates,
    adds_in_place,
    choose,
    copy_bytes,
    hoisted,
    tile_problem,
)


class CpuContractionPlan(PlanDefaults):
    """D = alpha * A * B + beta * C on the CPU; ``route`` and ``reason`` say how.

    Args:
        problem: The contraction.
        policy: The lowering policy (gpu_tc.gemm.POLICIES) of the whole and its tiles.
        budget: Bytes the copies of one call may take (packed operands, a staged D);
            above it the plan runs in tiles (cpu_fallback.tiling). None: no bound.
        small_k: The GEMM by the small-K kernel (cpu_fallback.small_k) where it serves:
            True for its widest build, or the name of one of its narrower builds
            (route "small-k-avx2:...").
        engine: Whose GEMMs: None for NumPy's BLAS (numpy.matmul, cpu_fallback.cblas),
            or MKL's (cpu_fallback.mkl; route "mkl:...").
        loop: Tiles that copy nothing (tiling.uncopied): calls with beta = 0 run as this
            loop of GEMMs on views of the operands (route "...:looped").
    """

    def __init__(
        self, problem: ContractionProblem, policy: str = "heuristic", budget: int | None = None,
        small_k: bool | str = False, engine: MklEngine | None = None,
        loop: Tiling | None = None,
    ) -> None:
        self.problem = problem
        self.policy = policy
        self.engine = engine
        # The engine's D = A @ B and D = alpha A B + beta D (cblas.gemm's contract).
        self._matmul = _numpy_matmul if engine is None else engine.matmul
        self._gemm = cblas.gemm if engine is None else engine.gemm
        self._gemm_loop = cblas.gemm_loop if engine is None else engine.gemm_loop
        self.lowering = lower(problem, policy)
        build = small_k if isinstance(small_k, str) else None
        prefix = (f"small-k-{build}:" if build else "small-k:" if small_k
                  else "blas:" if engine is None else f"{engine.name}:")
        self.route = prefix + ("looped" if loop else self.lowering.route)
        self.reason = ("a loop of GEMMs on views of the operands" if loop
                       else self.lowering.reason)
        if engine is not None:
            self.reason += f"; the GEMMs by {engine.name.upper()}"
        # The small-K kernel (cpu_fallback.small_k) computes the product instead of BLAS.
        self._small_k = None
        self._small_k_build = build
        if small_k and isinstance(self.lowering, GemmLowering):
            self._small_k = _small_k_module()
            self.reason += f"; the GEMM by the small-K kernel (K = {self.lowering.a.shape[-1]}"
            self.reason += f", its {build.upper()} build)" if build else ")"
        # A new result by numpy.matmul alone, where it writes D's layout (not the kernel's
        # nor another engine's).
        self.fresh = (None if self._small_k or engine else fresh_call(self.lowering, problem))
        low = self.lowering
        # An outer product runs as numpy.dot on NumPy's BLAS, as its warm call does.
        self._outer = (outer_extents(problem)
                       if isinstance(low, MultiplyLowering) and engine is None else None)
        # D's axes from the (batch, rows, cols) order of an unpacked temporary.
        self._d_order = tuple(np.argsort(low.d.perm)) if isinstance(low, GemmLowering) else ()
        self._stacks: tuple[Stack, ...] = ((Stack(low.a), Stack(low.b), Stack(low.d))
                        if isinstance(low, GemmLowering) else ())
        # Untiled copies when beta == 0 and when beta != 0 (D staged), and tiles where
        # they exceed the budget.
        self._tiled: dict[bool, TiledRun | None] = {False: None, True: None}
        # BLAS's gemm adds a product into D in place (beta), where it serves the dtype.
        blas_adds = (cblas.available(problem.d.dtype) if engine is None
                     else engine.serves(problem.d.dtype))
        self._adds_in_place = (blas_adds and isinstance(low, GemmLowering)
                               and adds_in_place(low, problem))
        peaks = []
        for staged in (False, True):
            if loop is not None and not staged:
                run = self._tiled[False] = _looped(problem, policy, loop, engine, budget)
                peaks.append(run.split_bytes)
                if run.workers > 1:
                    self.reason += f"; split over {run.workers} threads, MKL on one thread each"
                continue
            peak = sum(copy_bytes(low, problem, staged, blas_adds))
            if budget is not None and peak > budget:
                tiling = choose(problem, policy, budget, staged, blas_adds)
                peak = tiling.peak_bytes
                if tiling.tiles > 1:
                    self._tiled[staged] = TiledRun(problem, policy, tiling, engine)
            peaks.append(peak)
        self.temporary_bytes = max(peaks)
        plain, scaled = self._tiled[False], self._tiled[True]
        if plain is not None:
            self.fresh = None
            self.reason += "; " + plain.tiling.describe()
        elif scaled is not None:
            self.reason += "; with beta != 0: " + scaled.tiling.describe()
        self.fresh_scalar = self.fresh is not None and gives_scalar(low, problem)

    def __repr__(self) -> str:
        return f"CpuContractionPlan(route={self.route!r}, reason={self.reason!r})"

    def execute(self, inputs: Any, d: Any, scalars: Scalars, c: Any) -> None:
        """Write the result into ``d``; ``c`` (D's shape) is read when beta != 0."""
        a, b = inputs
        alpha, beta = scalars.alpha, scalars.beta
        tiled = self._tiled[beta != 0]
        if tiled is not None:
            tiled.execute(a, b, d, scalars, c)
            return
        low = self.lowering
        if isinstance(low, GemmLowering):
            stack_a, stack_b, _ = self._stacks
            self.multiply(stack_a.of(a), stack_b.of(b), d, alpha, beta, c)
        elif isinstance(low, MultiplyLowering):
            if self._outer is not None and beta == 0 and d.flags.c_contiguous:
                m, n = self._outer
                np.dot(a.reshape(m, 1), b.reshape(1, n), out=d.reshape(m, n))
                write_scaled(d, d, alpha, beta, c)
                return
            product = np.multiply(
                _broadcast(a, low.a), _broadcast(b, low.b), out=None if beta else d
            )
            write_scaled(product, d, alpha, beta, c)
        elif not low.d_empty:
            write_scaled(None, d, alpha, beta, c)

    @property
    def rearranges(self) -> bool:
        """Whether this plan's product copies an operand, stages D or loops over GEMMs."""
        low = self.lowering
        return isinstance(low, GemmLowering) and (
            low.a.pack or low.b.pack or low.d.pack or len(low.d.shape) > 2)

    @property
    def gemms(self) -> bool:
        """Whether this plan's product is a GEMM (not a broadcast multiply, not empty)."""
        return isinstance(self.lowering, GemmLowering)

    @property
    def multiplies(self) -> bool:
        """Whether this plan's product is a broadcast multiply (nothing summed)."""
        return isinstance(self.lowering, MultiplyLowering)

    def small_k_serves(self) -> bool:
        """Whether this plan's product may go through the small-K kernel instead: one
        GEMM (no batch), untiled, D not staged, and an inner extent and dtype the
        kernel takes (where it was built)."""
        low = self.lowering
        if not (isinstance(low, GemmLowering) and len(low.a.shape) == 2 and not low.d.pack
                and self._tiled[False] is None and kernels.built("_small_k")):
            return False
        module = _small_k_module()
        return module is not None and module.serves(self.problem.d.dtype, low.a.shape[-1])

    def small_k_builds(self) -> tuple[bool | str, ...]:
        """The ``small_k`` arguments of the plans that run this plan's product by the
        small-K kernel: True (its widest build) and its narrower builds, where it serves."""
        if not self.small_k_serves():
            return ()
        return (True, *_small_k_module().narrower_builds())

    def pack(self, x: Any, operand: str) -> Any:
        """Operand ``operand`` ("a" or "b") of a GEMM lowering as its matrix stack."""
        return self._stacks[0 if operand == "a" else 1].of(x)

    def adding_loop(self, a: Any, b: Any, d: Any, alpha: complex) -> cblas.GemmLoop | None:
        """A cblas.GemmLoop from operands of this plan's problem that adds ``alpha * A B``
        into D, as ``execute`` with beta = 1 and C = D does, where that is one BLAS call
        on views (nothing packed); else None."""
        low = self.lowering
        if not (isinstance(low, GemmLowering) and self._adds_in_place
                and not (low.a.pack or low.b.pack or low.d.pack)):
            return None
        stack_a, stack_b, _ = self._stacks
        mats = (stack_a.of(a), stack_b.of(b), self._d_matrix(d))
        # A reshape that could not be a view copied: the loop moves pointers into x itself.
        if any(m.ctypes.data != x.ctypes.data for m, x in zip(mats, (a, b, d))):
            return None
        return self._gemm_loop(*mats, alpha)

    def _d_matrix(self, d: Any) -> Any:
        """D as the GEMM lowering's matrix, a view (D not staged)."""
        low = self.lowering
        assert isinstance(low, GemmLowering)
        return d.transpose(low.d.perm).reshape(low.d.shape)

    def multiply(
        self, a_mat: Any, b_mat: Any, d: Any, alpha: complex, beta: complex, c: Any
    ) -> None:
        """D = alpha * a_mat @ b_mat + beta * C for matrix stacks of this GEMM lowering."""
        low = self.lowering
        assert isinstance(low, GemmLowering)
        if not low.d.pack and beta == 0:
            d_mat = self._d_matrix(d)
            if self._small_k is not None and self._small_k.gemm(a_mat, b_mat, d_mat, alpha,
                                                                self._small_k_build):
                return
            self._matmul(a_mat, b_mat, d_mat)
            if alpha != 1:
                np.multiply(d_mat, alpha, out=d_mat)
            return
        if self._adds_in_place:  # D = beta * C first, then BLAS adds the product into it
            if c is not d:
                np.multiply(c, beta, out=d)
                c, beta = d, 1
            if self._gemm(a_mat, b_mat, self._d_matrix(d), alpha, beta):
                return
        temp, unmerged = self._stacks[2].buffer(d.dtype)
        self._matmul(a_mat, b_mat, temp)
        write_scaled(unmerged.transpose(self._d_order), d, alpha, beta, c)


class TiledRun:
    """A contraction run tile by tile (see cpu_fallback.tiling): per tile size, a
    CpuContractionPlan of the tile; the operand of an outer chunk is packed once; the
    chunks of a contracted label after the first add into their D tile.

    With ``workers`` > 1 (MKL's engine, calls with beta = 0), that many threads
    (cpu_fallback.workers) take the outer chunks one at a time as they finish, each
    running MKL on itself alone (MklEngine.one_thread): no OpenMP launch per tile. Where
    the outer label is contracted, each thread but the caller's adds its chunks into a D
    of its own, added into D at the end.
    """

    def __init__(self, problem: ContractionProblem, policy: str, tiling: Tiling,
                 engine: MklEngine | None = None, workers: int = 1) -> None:
        self.tiling = tiling
        self._engine = engine
        workers = min(workers, tiling.outer.count) if tiling.outer is not None else 1
        self._serial = engine.serial() if engine is not None and workers > 1 else None
        self.workers = workers if self._serial is not None else 1
        self._held = hoisted(problem, tiling.inner)
        self._cuts = [c for c in (tiling.outer, tiling.inner) if c is not None]
        self._accumulating = [accumulates(problem, c) for c in self._cuts]
        self._grid = TileGrid(problem, self._cuts)
        self._plans: dict[tuple[tuple[int, ...], bool], CpuContractionPlan] = {}
        self._problem, self._policy = problem, policy
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
        return (self.workers - 1) * _bytes(self._problem.d)

    def _plan(self, sizes: tuple[int, ...], serial: bool) -> CpuContractionPlan:
        plan = self._plans.get((sizes, serial))
        if plan is None:
            tile = tile_problem(self._problem, {c.label: n for c, n in zip(self._cuts, sizes)})
            plan = self._plans[sizes, serial] = CpuContractionPlan(
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


def _looped(problem: ContractionProblem, policy: str, loop: Tiling, engine: MklEngine | None,
            budget: int | None) -> TiledRun:
    """The loop of GEMMs on views: split over MKL's thread count (NumPy's BLAS sets its
    threads for the whole process: one thread runs its loop), fewer where ``budget`` has
    room for fewer of the threads' own copies of D (TiledRun caps it by the chunks)."""
    assert loop.outer is not None
    count = engine.threads() if engine is not None else 1
    if budget is not None and accumulates(problem, loop.outer):
        count = min(count, budget // max(1, _bytes(problem.d)) + 1)
    return TiledRun(problem, policy, loop, engine, count)


def _bytes(spec: TensorSpec) -> int:
    return math.prod(spec.extents) * np.dtype(spec.dtype).itemsize


def _numpy_matmul(a_mat: Any, b_mat: Any, out: Any) -> None:
    """``out = a_mat @ b_mat`` by numpy.matmul (NumPy's BLAS)."""
    np.matmul(a_mat, b_mat, out=out)


def _small_k_module() -> Any:
    """cpu_fallback.small_k, or None (with a warning, once) where it does not import."""
    return kernels.load("small_k", "small-K products run on BLAS")


def _broadcast(x: Any, spec: BroadcastOperand) -> Any:
    return x.transpose(spec.perm).reshape(spec.shape)
