"""Operand and output layouts: correctness on every kind of view, and no copies where
strides allow (gpu_tc/gemm.py: a GEMM group that merges into one axis with a unit stride
and a valid leading dimension is read in place; batch axes may have any stride)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import BACKENDS, DTYPES, check_einsum, random_array, to_backend, to_numpy

import gpu_tc


def xp_of(backend: str) -> Any:
    """The array module of a backend."""
    if backend == "cpu":
        return np
    import cupy

    return cupy


LAYOUTS = [
    "C",
    "F",
    "T",  # every axis reversed: .T of a C-ordered base
    "stepped",  # a[::2, ::3, ::2, ...]
    "negative",  # a[::-1, ::-1, ...]
    "negative-stepped",  # a[::-2, ::-2, ...]
    "sliced",  # a window of a bigger array
    "broadcast-first",  # stride 0 on the first axis
    "broadcast-last",  # stride 0 on the last axis
    "transposed-negative-stepped",  # b[::-2, ::-2, ...].T
]


def make(layout: str, shape: tuple[int, ...], dtype: Any, backend: str, rng: Any) -> Any:
    """An operand of ``shape`` and ``dtype`` laid out as ``layout``, built on ``backend``."""
    xp = xp_of(backend)

    def base(s: tuple[int, ...]) -> Any:
        return to_backend(random_array(rng, s, dtype), backend)

    shape = tuple(shape)
    rank = len(shape)
    if layout == "C":
        x = base(shape)
    elif layout == "F":
        x = xp.asfortranarray(base(shape))
    elif layout == "T":
        x = base(shape[::-1]).T
    elif layout == "stepped":
        steps = [2 + i % 2 for i in range(rank)]
        x = base(tuple(n * k for n, k in zip(shape, steps)))[
            tuple(slice(None, None, k) for k in steps)
        ]
    elif layout == "negative":
        x = base(shape)[(slice(None, None, -1),) * rank]
    elif layout == "negative-stepped":
        x = base(tuple(2 * n for n in shape))[(slice(None, None, -2),) * rank]
    elif layout == "sliced":
        x = base(tuple(n + 3 for n in shape))[tuple(slice(1, 1 + n) for n in shape)]
    elif layout == "broadcast-first":
        x = xp.broadcast_to(base((1,) + shape[1:]), shape)
    elif layout == "broadcast-last":
        x = xp.broadcast_to(base(shape[:-1] + (1,)), shape)
    else:  # transposed-negative-stepped
        x = base(tuple(2 * n for n in shape[::-1]))[(slice(None, None, -2),) * rank].T
    assert tuple(x.shape) == shape
    return x


def check_views(subscripts: str, operands: list[Any], backend: str) -> Any:
    """check_einsum on operands that already live on the backend, views kept as they are."""
    host = [to_numpy(x) for x in operands]
    by_id = {id(h): x for h, x in zip(host, operands)}
    return check_einsum(subscripts, *host, backend=backend, convert=lambda h, _: by_id[id(h)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
@pytest.mark.parametrize("layout_a", LAYOUTS)
def test_gemm_every_layout_pair(layout_a, layout_b, backend, rng):
    a = make(layout_a, (5, 6), np.float64, backend, rng)
    b = make(layout_b, (6, 7), np.float64, backend, rng)
    check_views("ij,jk->ik", [a, b], backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
@pytest.mark.parametrize("layout_a", LAYOUTS)
def test_large_gemm_every_layout_pair(layout_a, layout_b, backend, rng):
    """Above gemm.SMALL_FLOPS, so the direct/batched/packed lowerings are exercised."""
    a = make(layout_a, (3, 33, 34), np.float32, backend, rng)
    b = make(layout_b, (3, 34, 35), np.float32, backend, rng)
    check_views("bij,bjk->bik", [a, b], backend)
    check_views("bij,bjk->ikb", [a, b], backend)


LAYOUT_EXPRESSIONS = [
    pytest.param("ij,kj->ik", [(5, 6), (7, 6)], id="gemm-nt"),
    pytest.param("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], id="batched"),
    pytest.param("abc,cbd->ad", [(3, 4, 5), (5, 4, 6)], id="merged-k"),
    pytest.param("abcd,dbea->ec", [(2, 3, 4, 5), (5, 3, 4, 2)], id="tccg-like"),
    pytest.param("ij,ij->ij", [(5, 6), (5, 6)], id="hadamard"),
    pytest.param("i,j->ij", [(5,), (6,)], id="outer"),
    pytest.param("ijk->kij", [(4, 5, 6)], id="permute"),
    pytest.param("ijk->j", [(4, 5, 6)], id="reduce"),
    pytest.param("ii->i", [(5, 5)], id="diagonal"),
    pytest.param("iji->j", [(4, 5, 4)], id="trace"),
    pytest.param("bii->b", [(3, 4, 4)], id="batched-trace"),
    pytest.param("ijkj->ki", [(3, 4, 5, 4)], id="partial-trace-transposed"),
    pytest.param("iijj->", [(3, 3, 4, 4)], id="double-trace"),
    pytest.param("iiji->ij", [(3, 3, 4, 3)], id="triple-diagonal"),
    pytest.param("ab,bc,cd->da", [(3, 4), (4, 5), (5, 6)], id="chain"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("subscripts, shapes", LAYOUT_EXPRESSIONS)
def test_every_operand_in_layout(subscripts, shapes, layout, dtype, backend, rng):
    operands = [make(layout, s, dtype, backend, rng) for s in shapes]
    check_views(subscripts, operands, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["C", "F", "T", "stepped", "negative", "sliced"])
@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        pytest.param("ij,jk->ik", [(0, 4), (4, 5)], id="free-0"),
        pytest.param("ij,jk->ik", [(3, 0), (0, 5)], id="contracted-0"),
        pytest.param("bij,bjk->bik", [(0, 3, 4), (0, 4, 5)], id="batch-0"),
        pytest.param("ij->ji", [(0, 4)], id="permute-0"),
        pytest.param("ij->j", [(0, 4)], id="reduce-0"),
    ],
)
def test_zero_size_layouts(subscripts, shapes, layout, backend, rng):
    operands = [make(layout, s, np.float64, backend, rng) for s in shapes]
    check_views(subscripts, operands, backend)


def test_zero_size_slice_of_nonempty_array(rng):
    a = random_array(rng, (4, 6), np.float64)
    b = random_array(rng, (6, 3), np.float64)
    check_einsum("ij,jk->ik", a[:, :0], b[:0], backend="cpu")
    check_einsum("ij,jk->ik", a[:0:-1], b, backend="cpu")
    check_einsum("ij,jk->ik", a[:, ::-1][:, 6:], b[:0, ::2], backend="cpu")


def test_broadcast_scalar_view(rng):
    """Every stride 0: one element seen as a whole matrix."""
    a = np.broadcast_to(np.array(2.0), (40, 50))
    b = random_array(rng, (50, 60), np.float64)
    check_einsum("ij,jk->ik", a, b, backend="cpu")
    check_einsum("ii->i", np.broadcast_to(np.array(3.0), (5, 5)), backend="cpu")


# --- output layouts ---------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS[:-3] + ["transposed-negative-stepped"])
@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        pytest.param("ij,jk->ik", [(5, 6), (6, 7)], id="gemm-small"),
        pytest.param("ij,jk->ik", [(40, 41), (41, 42)], id="gemm-large"),
        pytest.param("bij,bjk->bik", [(3, 33, 34), (3, 34, 35)], id="batched-large"),
        pytest.param("ijk->kji", [(3, 4, 5)], id="permute"),
        pytest.param("ijk->ik", [(3, 4, 5)], id="reduce"),
    ],
)
def test_out_layouts(subscripts, shapes, layout, backend, rng):
    operands = [random_array(rng, s, np.float64) for s in shapes]
    shape = np.einsum(subscripts, *operands).shape
    out = make(layout, shape, np.float64, backend, rng)
    check_einsum(subscripts, *operands, backend=backend, out=out)


# --- copy-free where strides allow (CPU routes; gpu_tc/gemm.py) -------------------


def peak_bytes(call: Callable[[], Any]) -> int:
    """The peak of memory traced while ``call`` runs (NumPy reports its buffers)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


BIG = 300
A_VIEWS = {
    "C": lambda r: r.standard_normal((BIG, 40)),
    "F": lambda r: np.asfortranarray(r.standard_normal((BIG, 40))),
    "T": lambda r: r.standard_normal((40, BIG)).T,
    "rows-stepped": lambda r: r.standard_normal((2 * BIG, 40))[::2],
    "sliced": lambda r: r.standard_normal((BIG + 5, 50))[2 : BIG + 2, 3:43],
    "T-sliced": lambda r: r.standard_normal((50, BIG + 5))[3:43, 2 : BIG + 2].T,
}


@pytest.mark.parametrize("view", list(A_VIEWS))
def test_gemm_reads_blas_views_in_place(view, rng):
    a = A_VIEWS[view](rng)
    b = rng.standard_normal((40, 8))
    plan = gpu_tc.prepare("ij,jk->ik", a, b)
    assert "direct" in plan.route, plan
    assert "packed" not in plan.route
    check_einsum("ij,jk->ik", a, b)
    # No buffer the size of A: the view goes to BLAS as it is.
    assert peak_bytes(lambda: gpu_tc.einsum("ij,jk->ik", a, b)) < a.nbytes // 4


@pytest.mark.parametrize("view", ["C", "F", "T", "rows-stepped", "sliced"])
def test_gemm_reads_b_views_in_place(view, rng):
    a = rng.standard_normal((8, 40))
    b = A_VIEWS[view](rng).T  # (40, BIG)
    plan = gpu_tc.prepare("ij,jk->ik", a, b)
    assert "direct" in plan.route, plan
    check_einsum("ij,jk->ik", a, b)
    assert peak_bytes(lambda: gpu_tc.einsum("ij,jk->ik", a, b)) < b.nbytes // 4


@pytest.mark.parametrize(
    "make_a",
    [
        pytest.param(lambda r: r.standard_normal((6, 40, 50)), id="C"),
        pytest.param(lambda r: r.standard_normal((6, 40, 50))[::-1], id="batch-negative"),
        pytest.param(lambda r: r.standard_normal((12, 40, 50))[::2], id="batch-stepped"),
        pytest.param(
            lambda r: r.standard_normal((40, 6, 50)).transpose(1, 0, 2), id="batch-middle"
        ),
        pytest.param(
            lambda r: np.broadcast_to(r.standard_normal((1, 40, 50)), (6, 40, 50)),
            id="batch-broadcast",
        ),
    ],
)
def test_batched_gemm_reads_views_in_place(make_a, rng):
    a = make_a(rng)
    b = rng.standard_normal((6, 50, 30))
    plan = gpu_tc.prepare("bij,bjk->bik", a, b)
    assert "batched" in plan.route, plan
    assert "packed" not in plan.route
    result = check_einsum("bij,bjk->bik", a, b)
    # The result is the only buffer: no packed copy of A (6 * 40 * 50 doubles).
    a_bytes = 6 * 40 * 50 * 8
    assert peak_bytes(lambda: gpu_tc.einsum("bij,bjk->bik", a, b)) < result.nbytes + a_bytes // 4


def test_merged_groups_read_in_place(rng):
    """Labels of one group (M or K) that are adjacent in memory merge into one axis."""
    a = rng.standard_normal((6, 8, 40))
    b = rng.standard_normal((40, 56))
    assert "direct" in gpu_tc.prepare("abc,cd->abd", a, b).route
    check_einsum("abc,cd->abd", a, b)
    a2 = rng.standard_normal((30, 8, 5))
    b2 = rng.standard_normal((8, 5, 56))
    assert "direct" in gpu_tc.prepare("abc,bcd->ad", a2, b2).route
    check_einsum("abc,bcd->ad", a2, b2)


@pytest.mark.parametrize(
    "out_view",
    [
        pytest.param(lambda: np.zeros((BIG, BIG + 20))[:, 10 : BIG + 10], id="column-window"),
        pytest.param(lambda: np.zeros((2 * BIG, BIG))[::2], id="rows-stepped"),
        pytest.param(lambda: np.zeros((BIG, BIG), order="F"), id="F"),
        pytest.param(lambda: np.zeros((BIG + 20, BIG)).T[:, 5 : BIG + 5], id="T-window"),
    ],
)
def test_out_view_written_in_place(out_view, rng):
    a = rng.standard_normal((BIG, 40))
    b = rng.standard_normal((40, BIG))
    out = out_view()
    base = out.base if out.base is not None else out
    assert "direct" in gpu_tc.prepare("ij,jk->ik", a, b, out=out).route
    got = check_einsum("ij,jk->ik", a, b, out=out)
    assert got is out and np.shares_memory(got, base)
    # Neither a temporary result nor a packed copy: nothing near out's size is allocated.
    assert peak_bytes(lambda: gpu_tc.einsum("ij,jk->ik", a, b, out=out)) < out.nbytes // 4


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_held_plan_writes_an_out_of_either_layout_in_place(rng, order, monkeypatch):
    """A plan made without ``out`` picks its new results' layout by measurement; an
    ``out`` of the other layout gets a plan of its own, not a temporary and a copy."""
    from cpu_fallback.backend import CpuBackend

    def no_copy(self, source, destination):
        raise AssertionError("the result went through a temporary")

    a, b = rng.standard_normal((300, 200)), rng.standard_normal((200, 250))
    out = np.zeros((300, 250), order=order)
    with gpu_tc.prepare("ij,jk->ik", a, b) as plan:
        for _ in range(500):  # through the layout trial's measurement, both layouts
            plan.execute(a, b)
            if "measuring" not in plan.reason:
                break
        assert "GEMM orientation and lowering" in plan.reason
        assert "measuring" not in plan.reason
        monkeypatch.setattr(CpuBackend, "copy_into", no_copy)
        assert plan.execute(a, b, out=out) is out
        np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def test_an_out_differing_only_in_a_size_one_stride_is_written_in_place(rng):
    """A held plan made without ``out`` writes into an ``out`` whose one difference from
    its own layout is the stride of an extent-1 axis (it moves no element)."""
    n = 50_000
    a, b = rng.standard_normal((1, 8)), rng.standard_normal((8, n))
    out = np.zeros((n, 1)).T  # strides (8, 8); a new (1, n) result has (8 * n, 8)
    with gpu_tc.prepare("ij,jk->ik", a, b) as plan:
        assert plan.execute(a, b, out=out) is out
        np.testing.assert_allclose(out, a @ b)
        assert peak_bytes(lambda: plan.execute(a, b, out=out)) < out.nbytes // 4


@pytest.mark.parametrize(
    "subscripts, shape",
    [
        pytest.param("ii->", (1000, 1000), id="trace"),
        pytest.param("ii", (1000, 1000), id="trace-implicit"),
        pytest.param("ii->i", (1000, 1000), id="diagonal"),
        pytest.param("iij->j", (300, 300, 4), id="partial-trace"),
        pytest.param("ij->", (1000, 1000), id="sum"),
    ],
)
def test_diagonals_and_reductions_do_not_copy(subscripts, shape, rng):
    a = rng.standard_normal(shape)
    swapped = np.swapaxes(a, 0, 1)  # F-like strides for the repeated labels
    for x in (a, swapped):
        check_einsum(subscripts, x)
        assert peak_bytes(lambda x=x: gpu_tc.einsum(subscripts, x)) < a.nbytes // 8


@pytest.mark.parametrize("term, shape, strides, calls, order", [
    ("ii", (4, 4), (4, 1), ((0, 1),), None),
    ("bii", (3, 4, 4), (16, 4, 1), ((1, 2),), None),
    ("ijkj", (2, 4, 5, 4), (80, 20, 4, 1), ((1, 3),), (0, 2, 1)),  # 'j' first: 'ijk'
    ("iijj", (3, 3, 4, 4), (48, 16, 4, 1), ((0, 1), (0, 1)), None),
    ("iii", (3, 3, 3), (1, 3, 9), ((0, 1), (0, 1)), None),
    ("iji", (4, 1, 4), (4, 4, 1), None, None),  # a broadcast 'j' dropped: no own calls
    ("ij", (4, 5), (5, 1), (), None),
])
def test_diagonal_calls_take_exactly_the_operand_s_view(term, shape, strides, calls, order):
    """The diagonal() calls and transpose a prepared operand runs in place of a view
    built from strides give that view (extents and strides), or are not used."""
    from gpu_tc.problem import OperandLayout, operand_spec
    from gpu_tc.program import view_calls

    extents = {"i": shape[0], "j": 7, "k": 5, "b": 3}
    extents.update({x: e for x, e in zip(term, shape) if e != 1})
    layout = OperandLayout(shape, strides, "float64")
    view = operand_spec(term, layout, extents)
    assert view_calls(term, layout, view) == (None if calls is None else (calls, order))
    if calls is not None:
        x = np.lib.stride_tricks.as_strided(np.zeros(1000), shape, [8 * s for s in strides])
        for first, second in calls:
            x = x.diagonal(0, first, second)
        x = x if order is None else x.transpose(order)
        assert (x.shape, tuple(s // 8 for s in x.strides)) == (view.extents, view.strides)


@pytest.mark.parametrize("dtype", ["float64", "int8", "complex64"])
def test_a_main_diagonal_is_read_in_every_layout(dtype, rng):
    """'ii' of a 2-D operand reads its main diagonal (the array's own view of it):
    C, F, reversed, stepped and swapped layouts, cold and warm calls, a call with
    ``out`` (the planned path), a cast by ``dtype``, and gpu_tc.trace, all as numpy."""
    base = (rng.standard_normal((12, 12)) * 10).astype(dtype)

    def same(got: Any, expected: Any) -> None:
        assert np.asarray(got).dtype == np.asarray(expected).dtype
        np.testing.assert_allclose(got, expected, rtol=1e-5)

    for x in (base, np.asfortranarray(base), base[::-1, ::-1], base[::2, 1::2], base.T):
        for _ in range(2):  # cold, then warm
            same(gpu_tc.einsum("ii->", x), np.einsum("ii->", x))
            same(gpu_tc.einsum("ii", x), np.einsum("ii", x))
        out = np.zeros((), dtype)
        assert gpu_tc.einsum("ii->", x, out=out) is out
        same(out, np.einsum("ii->", x))
        same(gpu_tc.einsum("ii->", x, dtype=np.complex128),
             np.einsum("ii->", x, dtype=np.complex128))
        same(gpu_tc.trace(x), np.trace(x))
