"""Run a GEMM lowering (gpu_tc.gemm) with numpy.matmul on views and packed buffers."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_tc.backend import PlanDefaults, Scalars
from gpu_tc.gemm import (
    BroadcastOperand,
    GemmLowering,
    MultiplyLowering,
    lower,
)
from gpu_tc.problem import ContractionProblem

from . import cblas, kernels
from .fresh_call import fresh_call, gives_scalar, outer_extents
from .mkl import MklEngine
from .permute import write_scaled
from .stacks import Stack
from .tiled_run import TiledRun, looped
from .tiling import Tiling, adds_in_place, choose, copy_bytes


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
                run = self._tiled[False] = looped(problem, policy, loop, CpuContractionPlan,
                                                  engine, budget)
                peaks.append(run.split_bytes)
                if run.workers > 1:
                    self.reason += f"; split over {run.workers} threads, MKL on one thread each"
                continue
            peak = sum(copy_bytes(low, problem, staged, blas_adds))
            if budget is not None and peak > budget:
                tiling = choose(problem, policy, budget, staged, blas_adds)
                peak = tiling.peak_bytes
                if tiling.tiles > 1:
                    self._tiled[staged] = TiledRun(problem, policy, tiling,
                                                   CpuContractionPlan, engine)
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
        """Write the result into ``d``; ``c`` (D's shape) is read when beta != 0, A and B
        when alpha != 0 (as BLAS's gemm: whatever they hold, D = beta * C)."""
        a, b = inputs
        alpha, beta = scalars.alpha, scalars.beta
        if alpha == 0:
            write_scaled(None, d, alpha, beta, c)
            return
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


def _numpy_matmul(a_mat: Any, b_mat: Any, out: Any) -> None:
    """``out = a_mat @ b_mat`` by numpy.matmul (NumPy's BLAS)."""
    np.matmul(a_mat, b_mat, out=out)


def _small_k_module() -> Any:
    """cpu_fallback.small_k, or None (with a warning, once) where it does not import."""
    return kernels.load("small_k", "small-K products run on BLAS")


def _broadcast(x: Any, spec: BroadcastOperand) -> Any:
    return x.transpose(spec.perm).reshape(spec.shape)
