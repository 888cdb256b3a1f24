"""The GEMMs of a loop on views as bare BLAS calls (cblas.GemmLoop): each later tile of
a loop adds ``alpha * A B`` into D with the pointers moved, through NumPy's BLAS or MKL;
checked against the reference kernel, and where it must not be used."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, random_array, reference_einsum
from test_looped import EXTENTS, LONG_K, _operands, _problem, _tiled

from cpu_fallback import cblas, mkl, stacks
from cpu_fallback.contraction import CpuContractionPlan
from cpu_fallback.tiling import Cut, Tiling
from gpu_tc.backend import Scalars

DTYPES = ["float32", "float64", "complex64", "complex128"]


def _loop_of(engine: str):
    """The GemmLoop maker of NumPy's BLAS or of MKL (skips where MKL is not installed)."""
    if engine == "blas":
        return cblas.gemm_loop
    found = mkl.engine()
    if found is None:
        pytest.skip("MKL is not installed here (the optional `mkl` package)")
    return found.gemm_loop


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("engine", ["blas", "mkl"])
@pytest.mark.parametrize("d_order", ["C", "F"])
@pytest.mark.parametrize("a_transposed", [False, True])
def test_each_add_moves_the_matrices_by_its_offsets(dtype, engine, d_order, a_transposed):
    """Tiles i of stacks A (i, m, k) and B (i, k, n), added into one D at the offsets of
    tile i: D = D0 + alpha * sum_i A_i B_i, a column-major D (A, B swapped) included."""
    rng = np.random.default_rng(0)
    count, m, k, n = 5, 7, 6, 9
    a = random_array(rng, (count, k, m), dtype).transpose(0, 2, 1) if a_transposed \
        else random_array(rng, (count, m, k), dtype)
    b = random_array(rng, (count, k, n), dtype)
    start = random_array(rng, (m, n), dtype)
    d = np.array(start, order=d_order)
    alpha = 1.5 - (0.5j if np.dtype(dtype).kind == "c" else 0)
    loop = _loop_of(engine)(a[0], b[0], d, alpha)
    assert loop is not None
    for i in range(count):
        loop.add(i * a.strides[0], i * b.strides[0], 0)
    exact, scale = reference_einsum("imk,ikn->mn", a, b)
    assert_close(d, start + alpha * exact, dtype, abs(alpha) * scale + abs(start))


def test_offsets_move_d_too():
    """Each tile adds into its own block of D where the offsets move D."""
    rng = np.random.default_rng(1)
    a, b = random_array(rng, (3, 4, 5), "float64"), random_array(rng, (3, 5, 6), "float64")
    d = np.zeros((3, 4, 6))
    loop = cblas.gemm_loop(a[0], b[0], d[0], 1)
    for i in range(3):
        loop.add(i * a.strides[0], i * b.strides[0], i * d.strides[0])
    assert_close(d, np.einsum("imk,ikn->imn", a, b), "float64", np.ones(d.shape) * 10)


@pytest.mark.parametrize("engine", ["blas", "mkl"])
def test_none_where_gemm_would_not_take_the_matrices(engine):
    make = _loop_of(engine)
    a, b, d = np.ones((4, 5)), np.ones((5, 6)), np.zeros((4, 6))
    assert make(a[:, ::2], b[:3], d, 1) is None  # no unit stride
    assert make(a, b.astype(np.float32), d, 1) is None  # mixed dtypes
    assert make(a, b, d, 1j) is None  # a complex alpha with real matrices
    assert make(a[:0], b, d[:0], 1) is None  # nothing to compute
    assert make(a.astype(np.int64), b.astype(np.int64), d.astype(np.int64), 1) is None
    assert make(np.ones((2, 4, 5)), np.ones((2, 5, 6)), np.zeros((2, 4, 6)), 1) is None


@pytest.mark.parametrize("engine", ["blas", "mkl"])
def test_a_loop_runs_its_first_tile_by_its_plan_and_the_rest_as_calls(engine, monkeypatch):
    """Case 13's form, 23 chunks of 'c': the first tile written through the tile plan,
    the second through it into a GemmLoop, the other 21 as the loop's calls alone."""
    by = None if engine == "blas" else _loop_of(engine).__self__
    problem = _problem(LONG_K, EXTENTS)
    run = _tiled(problem, Tiling(Cut("c", 23, 1), None, 0, 0), by)
    through_plans, adds = [], []
    multiply, add = CpuContractionPlan.multiply, cblas.GemmLoop.add
    monkeypatch.setattr(CpuContractionPlan, "multiply",
                        lambda self, *args: through_plans.append(1) or multiply(self, *args))
    monkeypatch.setattr(cblas.GemmLoop, "add",
                        lambda self, *args: adds.append(args) or add(self, *args))
    a, b = _operands(LONG_K, EXTENTS, "float64")
    exact, scale = reference_einsum(LONG_K, a, b)
    d = np.full((36, 40), np.nan)
    run.execute(a, b, d, Scalars(-2.0, 0.0), None)
    assert_close(d, -2.0 * exact, "float64", 2 * scale)
    assert len(through_plans) == 1 and len(adds) == 22
    assert adds[0] == (0, 0, 0) and adds[1] == (a.strides[1], b.strides[0], 0)


def test_a_tile_whose_matrix_would_be_a_copy_runs_through_its_plan(monkeypatch):
    """Where a tile's matrix is not a view of the operand (the loop would move pointers
    into a copy), every tile runs through its plan, and the result stays right."""
    plain = stacks.Stack.of
    monkeypatch.setattr(stacks.Stack, "of", lambda self, x: plain(self, x).copy())
    problem = _problem(LONG_K, EXTENTS)
    run = _tiled(problem, Tiling(Cut("c", 23, 1), None, 0, 0))
    adds = []
    add = cblas.GemmLoop.add
    monkeypatch.setattr(cblas.GemmLoop, "add",
                        lambda self, *args: adds.append(args) or add(self, *args))
    a, b = _operands(LONG_K, EXTENTS, "float64")
    exact, scale = reference_einsum(LONG_K, a, b)
    d = np.full((36, 40), np.nan)
    run.execute(a, b, d, Scalars(1.0, 0.0), None)
    assert_close(d, exact, "float64", scale)
    assert adds == []
