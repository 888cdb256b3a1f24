"""The loop of GEMMs on views (tiling.uncopied, routes "...:looped"): where a lowering
copies an operand, the tiling that copies nothing, timed beside it; its results against
the reference kernel at every alpha, beta and dtype, and where it is not offered."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers import assert_close, call_until_reason, random_array, reference_einsum

import gpu_tc
from cpu_fallback import mkl, openmp, tiling, workers
from cpu_fallback.contraction import CpuContractionPlan
from cpu_fallback.tiled_run import TiledRun
from cpu_fallback.tiling import Cut, Tiling, copy_bytes, uncopied
from gpu_tc.backend import Scalars
from gpu_tc.gemm import lower
from gpu_tc.problem import ContractionProblem, contiguous_spec, dtype_char

# TCCG case 13's form: B's contracted labels 'c' and 'd' do not merge (b lies between),
# so the GEMM packs B; a loop over 'c' reads A[:, c, :] and B[c] where they lie.
LONG_K = "dca,cbd->ba"
EXTENTS = {"a": 40, "b": 36, "c": 23, "d": 38}  # above the lowering's small-GEMM bound


def _problem(expr: str, extents: dict[str, int], dtype: str = "float64") -> ContractionProblem:
    inputs, output = expr.split("->")
    specs = [contiguous_spec(t, [extents[x] for x in t], dtype_char(dtype))
             for t in (*inputs.split(","), output)]
    return ContractionProblem(*specs)


def _tiled(problem: ContractionProblem, tiling: Tiling, engine: mkl.MklEngine | None = None,
           count: int = 1) -> TiledRun:
    """A TiledRun of CpuContractionPlans, as the backend's plans make it."""
    return TiledRun(problem, "heuristic", tiling, CpuContractionPlan, engine, count)


def _operands(expr: str, extents: dict[str, int], dtype: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [random_array(rng, [extents[x] for x in t], dtype)
            for t in expr.split("->")[0].split(",")]


@pytest.fixture
def small_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loops of tiles of any size offered: small problems test them quickly."""
    monkeypatch.setattr(tiling, "LOOP_MIN_TILE_FLOPS", 1)


def test_the_loop_replaces_the_packed_operand_by_a_cut_of_chunks_of_one(small_loops):
    extents = EXTENTS
    problem = _problem(LONG_K, extents)
    assert copy_bytes(lower(problem), problem, False, True)[1] > 0  # B packed
    loop = uncopied(problem, "heuristic", True)
    assert loop is not None and loop.peak_bytes == 0 == loop.copied_bytes
    assert (loop.outer, loop.inner) == (Cut("c", 23, 1), None)


def test_where_it_is_not_offered(small_loops, monkeypatch):
    extents = EXTENTS
    # Nothing copied: a plain GEMM.
    assert uncopied(_problem("ik,kj->ij", {"i": 8, "j": 9, "k": 10}), "heuristic", True) is None
    # A contracted chunk needs D staged where BLAS does not add into it in place: the
    # loop over free label 'a' (a matrix-vector product per column of D) is left.
    problem = _problem(LONG_K, extents)
    loop = uncopied(problem, "heuristic", False)
    assert loop is not None and (loop.outer, loop.inner) == (Cut("a", 40, 1), None)
    assert not tiling.accumulates(problem, loop.outer)
    # More tiles than LOOP_MAX_TILES, or tiles under LOOP_MIN_TILE_FLOPS.
    monkeypatch.setattr(tiling, "LOOP_MAX_TILES", 22)
    assert uncopied(_problem(LONG_K, extents), "heuristic", True) is None
    monkeypatch.setattr(tiling, "LOOP_MAX_TILES", 23)
    monkeypatch.setattr(tiling, "LOOP_MIN_TILE_FLOPS", 2 * 40 * 36 * 38 + 1)
    assert uncopied(_problem(LONG_K, extents), "heuristic", True) is None


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (-2.5, 0.0), (1.0, 0.5), (0.5, -1.0)])
@pytest.mark.parametrize("engine", ["blas", "mkl"])
def test_the_loop_computes_the_reference(small_loops, dtype, alpha, beta, engine):
    """Every tile after the first adds into D; beta != 0 runs the plain lowering."""
    by = mkl.engine() if engine == "mkl" else None
    if engine == "mkl" and (by is None or not by.serves(dtype)):
        pytest.skip("MKL is not installed here (the optional `mkl` package)")
    extents = EXTENTS
    problem = _problem(LONG_K, extents, dtype)
    loop = uncopied(problem, "heuristic", True)
    assert loop is not None
    plan = CpuContractionPlan(problem, "heuristic", None, engine=by, loop=loop)
    assert plan.route == f"{engine}:looped" and "copies at most 0 bytes" in plan.reason
    a, b = _operands(LONG_K, extents, dtype)
    c = _operands("ba->ba", extents, dtype, seed=2)[0]
    exact, scale = reference_einsum(LONG_K, a, b)
    d = np.full_like(c, np.nan)
    plan.execute((a, b), d, Scalars(alpha, beta), c if beta else None)
    assert_close(d, alpha * exact + beta * c, dtype, abs(alpha) * scale + abs(beta * c))


def test_views_of_any_layout_loop_where_they_lie(small_loops):
    """Operands reversed and strided, D a strided view: nothing outside D written."""
    extents = EXTENTS
    big_a, big_b = _operands("dca,cbd->ba", {x: 2 * n for x, n in extents.items()}, "float64")
    a, b = big_a[::2, ::-2, 1::2], big_b[1::2, ::2, ::-2]
    exact, scale = reference_einsum(LONG_K, a, b)
    memory = np.full((36, 3, 40), np.nan)
    d = memory[:, 1, :]
    plan = gpu_tc.prepare(LONG_K, a, b, out=d)
    problem = plan._plan.program.final
    loop = uncopied(problem, "heuristic", True)
    assert loop is not None
    CpuContractionPlan(problem, "heuristic", None, loop=loop).execute((a, b), d, Scalars(1, 0),
                                                                      None)
    assert_close(d, exact, "float64", scale)
    assert np.isnan(memory[:, [0, 2], :]).all()


def test_einsum_times_the_loop_beside_the_packed_gemm(small_loops):
    """The measured plan offers the loop on each engine and stays right on every call."""
    extents = {"a": 96, "b": 96, "c": 12, "d": 96}
    a, b = _operands(LONG_K, extents, "float64")
    exact, scale = reference_einsum(LONG_K, a, b)
    plan = gpu_tc.prepare(LONG_K, a, b)
    call_until_reason(plan, "measured",
                      lambda: assert_close(plan.execute(a, b), exact, "float64", scale), 4000)
    assert "blas:looped" in plan.reason and "blas:packed" in plan.reason
    if mkl.engine() is not None:
        assert "mkl:looped" in plan.reason


def _mkl_engine():
    engine = mkl.engine()
    if engine is None:
        pytest.skip("MKL is not installed here (the optional `mkl` package)")
    return engine


@pytest.mark.parametrize("cut", [("c", 23), ("a", 40), ("d", 38)])
@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("dtype", ["float64", "complex64"])
def test_a_loop_split_over_threads_computes_the_reference(cut, workers, dtype):
    """The outer chunks shared by threads running MKL on one thread each: contracted
    cuts ('c', 'd') add each thread's own D into D at the end; a free cut ('a') writes
    its slices of D; beta != 0 runs the tiles in turn."""
    engine = _mkl_engine()
    problem = _problem(LONG_K, EXTENTS, dtype)
    run = _tiled(problem, Tiling(Cut(cut[0], cut[1], 1), None, 0, 0), engine,
                   workers)
    assert run.workers == workers
    a, b = _operands(LONG_K, EXTENTS, dtype)
    c = _operands("ba->ba", EXTENTS, dtype, seed=2)[0]
    exact, scale = reference_einsum(LONG_K, a, b)
    for alpha, beta in [(1.0, 0.0), (-0.5, 0.0), (2.0, 0.25)]:
        d = np.full_like(c, np.nan)
        run.execute(a, b, d, Scalars(alpha, beta), c if beta else None)
        assert_close(d, alpha * exact + beta * c, dtype, abs(alpha) * scale + abs(beta * c))


def test_one_thread_is_this_threads_alone_and_undone_after():
    engine = _mkl_engine()
    before = engine.threads()
    with pytest.raises(ValueError), engine.one_thread():
        assert engine.threads() == 1
        with engine.one_thread():
            assert engine.threads() == 1
        assert engine.threads() == 1
        elsewhere = workers.pool().submit(engine.threads).result()
        assert elsewhere != 1 or before == 1  # another thread keeps its own count
        raise ValueError
    assert engine.threads() == before


def test_the_mkl_loop_is_split_where_threads_and_memory_allow(small_loops):
    engine = _mkl_engine()
    if engine.threads() < 2:
        pytest.skip("MKL runs one thread here: nothing to split")
    problem = _problem(LONG_K, EXTENTS)
    loop = uncopied(problem, "heuristic", True)
    plan = CpuContractionPlan(problem, "heuristic", None, engine=engine, loop=loop)
    assert "split over" in plan.reason
    d_bytes = 36 * 40 * 8
    staged = CpuContractionPlan(problem, "heuristic", None, engine=engine)  # beta != 0
    assert plan.temporary_bytes == max((min(engine.threads(), 23) - 1) * d_bytes,
                                       staged.temporary_bytes)
    tight = CpuContractionPlan(problem, "heuristic", d_bytes - 1, engine=engine, loop=loop)
    assert "split" not in tight.reason
    assert "split" not in CpuContractionPlan(problem, "heuristic", None, loop=loop).reason


@pytest.mark.parametrize("layout", ["reordered", "strided"])
def test_the_threads_own_d_is_laid_out_as_d(layout):
    """D's labels a and e merge into one matrix axis in D's memory ('b' innermost), not
    in C order of D's labels 'abe', with or without gaps: the threads' own sums, laid
    out as D, are added into it right (C-ordered ones lost them: their matrix view was
    a copy)."""
    engine = _mkl_engine()
    expr, extents = "dcae,cbd->abe", {"a": 8, "b": 36, "c": 23, "d": 38, "e": 5}
    a, b = _operands(expr, extents, "float64")
    exact, scale = reference_einsum(expr, a, b)
    memory = np.full((8, 5, 36, 2) if layout == "strided" else (8, 5, 36), np.nan)
    d = (memory[..., 1] if layout == "strided" else memory).transpose(0, 2, 1)
    problem = gpu_tc.prepare(expr, a, b, out=d)._plan.program.final
    run = _tiled(problem, Tiling(Cut("c", 23, 1), None, 0, 0), engine, 2)
    assert run.workers == 2
    run.execute(a, b, d, Scalars(1.0, 0.0), None)
    assert_close(d, exact, "float64", scale)
    if layout == "strided":
        assert np.isnan(memory[..., 0]).all()


def test_a_full_contraction_split_over_threads_adds_their_sums():
    engine = _mkl_engine()
    extents = {"a": 9, "b": 40, "c": 38}
    problem = _problem("abc,bac->", extents)
    a, b = _operands("abc,bac->", extents, "float64")
    exact, scale = reference_einsum("abc,bac->", a, b)
    d = np.array(np.nan)
    _tiled(problem, Tiling(Cut("a", 9, 1), None, 0, 0), engine, 2).execute(
        a, b, d, Scalars(1.0, 0.0), None)
    assert_close(d, exact, "float64", scale)


def test_the_threads_are_capped_by_the_chunks_and_by_mkl_now(monkeypatch):
    engine = _mkl_engine()
    problem = _problem(LONG_K, EXTENTS)
    assert _tiled(problem, Tiling(Cut("c", 23, 8), None, 0, 0), engine,
                    50).workers == 3
    run = _tiled(problem, Tiling(Cut("c", 23, 1), None, 0, 0), engine, 2)
    a, b = _operands(LONG_K, EXTENTS, "float64")
    exact, scale = reference_einsum(LONG_K, a, b)

    def no_pool():
        raise AssertionError("split where it should run on the calling thread")

    monkeypatch.setattr(workers, "pool", no_pool)
    for case in ("mkl limited to one thread", "forked child"):
        with monkeypatch.context() as patch:
            if case == "forked child":
                patch.setattr(openmp, "forked", lambda: True)
            else:
                patch.setattr(engine, "threads", lambda: 1)
            d = np.full((36, 40), np.nan)
            run.execute(a, b, d, Scalars(1.0, 0.0), None)
            assert_close(d, exact, "float64", scale)


def test_a_thread_that_fails_fails_the_call_after_every_thread_ended(monkeypatch):
    """The caller's first chunk fails while another thread's is still running: the call
    raises only once that chunk has ended (none writes D after it returns), and no
    thread takes a chunk after the failure."""
    engine = _mkl_engine()
    problem = _problem(LONG_K, EXTENTS)
    run = _tiled(problem, Tiling(Cut("c", 23, 1), None, 0, 0), engine, 2)
    plain = TiledRun._run
    caller = threading.current_thread()
    finished = []

    def failing(self, a, b, d, scalars, c, chunks, serial):
        if threading.current_thread() is caller:
            next(iter(chunks))
            time.sleep(0.05)  # the other thread has started its chunk
            raise RuntimeError("the caller's chunk")

        def slow():
            for chunk in chunks:
                time.sleep(0.3)
                yield chunk
                finished.append(chunk[0])  # asked for the next: this one has run

        plain(self, a, b, d, scalars, c, slow(), serial)

    monkeypatch.setattr(TiledRun, "_run", failing)
    monkeypatch.setattr(engine, "threads", lambda: 2)
    a, b = _operands(LONG_K, EXTENTS, "float64")
    with pytest.raises(RuntimeError, match="the caller's chunk"):
        run.execute(a, b, np.empty((36, 40)), Scalars(1.0, 0.0), None)
    assert len(finished) == 1


def test_threads_take_the_chunks_as_they_finish(monkeypatch):
    """A slow thread takes fewer chunks; the sums of those that took any are added (the
    caller's own D written first where it took none)."""
    engine = _mkl_engine()
    problem = _problem(LONG_K, EXTENTS)
    run = _tiled(problem, Tiling(Cut("c", 23, 1), None, 0, 0), engine, 3)
    plain = TiledRun._run
    caller = threading.current_thread()
    taken: dict[str, int] = {}

    def slow_caller(self, a, b, d, scalars, c, chunks, serial):
        def counted():
            for chunk in chunks:
                if threading.current_thread() is caller:
                    time.sleep(0.5)
                name = threading.current_thread().name
                taken[name] = taken.get(name, 0) + 1
                yield chunk

        plain(self, a, b, d, scalars, c, counted(), serial)

    monkeypatch.setattr(TiledRun, "_run", slow_caller)
    monkeypatch.setattr(engine, "threads", lambda: 3)
    a, b = _operands(LONG_K, EXTENTS, "float64")
    exact, scale = reference_einsum(LONG_K, a, b)
    d = np.full((36, 40), np.nan)
    run.execute(a, b, d, Scalars(-1.5, 0.0), None)
    assert_close(d, -1.5 * exact, "float64", 1.5 * scale)
    assert taken.get(caller.name, 0) <= 1 and sum(taken.values()) == 23
