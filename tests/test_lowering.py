"""The GEMM lowering's routes, each forced by layout and checked against the reference.

The einsum corpus uses small extents, which take the "small" route; these cases are
big enough (above gemm.SMALL_FLOPS) to take the direct, batched, looped and packed
routes, with and without ``out``.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, random_array, reference_einsum

import gpu_tc
import gpu_tc.gemm
from cpu_fallback import fresh_call
from gpu_tc import reference
from gpu_tc.backend import UNSCALED, backend_of_type
from gpu_tc.cache import PLAN_CACHE
from gpu_tc.gemm import SMALL_FLOPS, GemmLowering, lower
from gpu_tc.problem import ContractionProblem, contiguous_spec
from gpu_tc.result_layout import natural_output
from gpu_tc.run import allocate

# (expression, extents, expected route, packed operands, looped labels or "")
CASES = [
    ("ij,jk->ik", {"i": 40, "j": 50, "k": 30}, "blas:direct", "", ""),
    ("ji,jk->ik", {"i": 40, "j": 50, "k": 30}, "blas:direct", "", ""),
    ("bij,bjk->bik", {"b": 6, "i": 20, "j": 30, "k": 25}, "blas:batched", "", ""),
    # intensli-like: M labels a, b split by the contracted d in A: a is looped.
    ("adb,cd->cba", {"a": 36, "b": 40, "c": 8, "d": 44}, "blas:batched", "", "a"),
    # ccsd_t-like: six output labels, one looped label, no copy.
    (
        "aged,cbfg->fedcba",
        {"a": 6, "b": 4, "c": 4, "d": 6, "e": 8, "f": 4, "g": 6},
        "blas:batched",
        "",
        "a",
    ),
    # K labels do not merge in A or B: both are packed.
    ("abcd,dbea->ec", {"a": 8, "b": 9, "c": 10, "d": 11, "e": 12}, "blas:packed", "AB", ""),
    # The batch label is the unit-stride one: no BLAS matrix in place, A and B packed.
    ("ijb,jkb->ikb", {"i": 20, "j": 24, "k": 16, "b": 5}, "blas:packed", "AB", ""),
]


def _operands(expr: str, extents: dict[str, int], dtype: str, rng: np.random.Generator):
    terms = expr.split("->")[0].split(",")
    ops = []
    for term in terms:
        x = rng.standard_normal([extents[c] for c in term])
        if dtype in "FD":
            x = x + 1j * rng.standard_normal(x.shape)
        ops.append(x.astype(dtype))
    return ops


@pytest.fixture
def loop_small_operands(monkeypatch):
    """Loop labels even for small operands (the mechanics, not the size rule), with
    the plan cache cleared so no plan of this setting outlives the test."""
    monkeypatch.setattr(gpu_tc.gemm, "LOOP_MIN_ELEMENTS", 0)
    gpu_tc.plan_cache().clear()
    yield
    gpu_tc.plan_cache().clear()


def _tolerance(dtype: str) -> float:
    return 2e-4 if dtype in "fF" else 1e-11


@pytest.mark.parametrize("dtype", ["f", "d", "F", "D"])
@pytest.mark.parametrize("expr,extents,route,packed,looped", CASES, ids=[c[0] for c in CASES])
def test_route_and_values(expr, extents, route, packed, looped, dtype, rng, loop_small_operands):
    ops = _operands(expr, extents, dtype, rng)
    plan = gpu_tc.prepare(expr, *ops)
    assert plan.route == route, plan.reason
    for name in "AB":
        assert (f"{name} packed" in plan.reason) == (name in packed), plan.reason
    assert ("looped" in plan.reason) == bool(looped), plan.reason
    if looped:
        assert f"labels {looped!r} looped" in plan.reason
    expected = reference.einsum(expr, *ops)
    scale = np.abs(reference.einsum(expr, *[np.abs(x) for x in ops])).max()
    for result in (gpu_tc.einsum(expr, *ops), plan.execute(*ops)):
        assert result.shape == expected.shape and result.dtype == np.dtype(dtype)
        np.testing.assert_allclose(result, expected, rtol=0, atol=_tolerance(dtype) * scale)


@pytest.mark.parametrize("expr,extents,route,packed,looped", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("order", ["C", "F"])
def test_into_out_of_any_order(
    expr, extents, route, packed, looped, order, rng, loop_small_operands
):
    """With ``out`` the result goes to out's layout, whatever the GEMM prefers."""
    ops = _operands(expr, extents, "d", rng)
    expected = reference.einsum(expr, *ops)
    out = np.zeros(expected.shape, order=order)
    assert gpu_tc.einsum(expr, *ops, out=out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-11, atol=1e-11 * np.abs(expected).max())


def test_cases_are_above_the_small_route():
    for expr, extents, *_ in CASES:
        flops = 2 * int(np.prod(list(extents.values())))
        assert flops >= SMALL_FLOPS, expr


def test_small_operands_are_packed_rather_than_looped(rng):
    """Packing a small operand is cheap and gives one big GEMM: no loop below
    LOOP_MIN_ELEMENTS."""
    expr, extents = CASES[4][0], CASES[4][1]
    ops = _operands(expr, extents, "d", rng)
    assert ops[0].size < gpu_tc.gemm.LOOP_MIN_ELEMENTS
    gpu_tc.plan_cache().clear()
    plan = gpu_tc.prepare(expr, *ops)
    assert plan.route == "blas:packed" and "looped" not in plan.reason, plan.reason
    expected = reference.einsum(expr, *ops)
    np.testing.assert_allclose(plan.execute(*ops), expected, atol=1e-11 * np.abs(expected).max())


def test_new_result_is_the_gemm_layout_seen_in_output_order(loop_small_operands):
    """Like numpy.einsum(optimize=True), a new result may be a permuted view: here the
    output 'cba' is written as (c, a, b) in memory (M = 'ab' in A's order, after N
    because the output's last label is in M), so no permuted copy is made."""
    a = np.random.default_rng(1).standard_normal((36, 44, 40))
    b = np.random.default_rng(2).standard_normal((8, 44))
    result = gpu_tc.einsum("adb,cd->cba", a, b)
    assert result.strides == (36 * 40 * 8, 8, 40 * 8)
    np.testing.assert_allclose(result, np.einsum("adb,cd->cba", a, b), rtol=1e-12)


def test_natural_output_never_needs_a_temporary():
    """D in the natural layout always merges: the lowering never packs a new D."""
    exprs = ["adb,cd->cba", "aebd,ce->dcba", "dega,gfbc->abcdef", "ij,kj->ki", "bij,bjk->kib"]
    for expr in exprs:
        (ta, tb), out = expr.split("->")[0].split(","), expr.split("->")[1]
        sizes = {c: 5 + i for i, c in enumerate(sorted(set(ta + tb)))}
        a = contiguous_spec(ta, [sizes[c] for c in ta], "d")
        b = contiguous_spec(tb, [sizes[c] for c in tb], "d")
        d = natural_output(a, b, contiguous_spec(out, [sizes[c] for c in out], "d"))
        low = lower(ContractionProblem(a, b, d))
        assert isinstance(low, GemmLowering) and not low.d.pack, expr


def test_direct_route_reads_transposed_views_in_place():
    x = np.random.default_rng(3).standard_normal((64, 64))
    for a, b in [(x.T, x), (x, x.T), (x[::2].T, x[:32]), (x[::2], x[:, :48])]:
        plan = gpu_tc.prepare("ij,jk->ik", a, b)
        assert plan.route == "blas:direct", plan.reason
        np.testing.assert_allclose(plan.execute(a, b), a @ b, rtol=1e-12, atol=1e-12)


def test_inner_step_is_packed_because_blas_needs_a_unit_stride():
    x = np.random.default_rng(4).standard_normal((64, 64))
    a = x[:, ::2]  # (64, 32) with element strides (64, 2): no unit stride at all
    plan = gpu_tc.prepare("ij,jk->ik", a, x[:32])
    assert plan.route == "blas:packed"
    assert "A packed: no unit stride" in plan.reason and "B packed" not in plan.reason
    np.testing.assert_allclose(plan.execute(a, x[:32]), a @ x[:32], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "expr, shapes",
    [
        ("kl,ik->il", [(5, 3), (4, 5)]),  # matmul writes 'li': the operands swap instead
        ("i,i->", [(7,), (7,)]),  # numpy.dot's scalar
        ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)]),
        ("abcd,dbea->ec", [(2, 3, 4, 5), (5, 3, 6, 2)]),
        ("bij,bjk,bkl->bli", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
        ("i,ij,jk,kl->l", [(3,), (3, 4), (4, 5), (5, 2)]),
    ],
)
def test_a_warm_call_of_small_steps_is_their_matmuls_alone(expr, shapes, rng):
    """Small contractions on untouched operands: a call runs each step's own fast path
    (a matmul writing the layout the next step reads), the last one in the layout
    execute() writes, and agrees with the reference."""
    ops = [random_array(rng, s, np.float64) for s in shapes]
    gpu_tc.plan_cache().clear()
    got = gpu_tc.einsum(expr, *ops)
    backend = backend_of_type(np.ndarray)
    plan = PLAN_CACHE.programs.peek(backend.warm_key((expr, *ops)))
    assert plan is not None and plan.fast is not None, plan and plan.reason
    executed = allocate(backend, plan.output)
    plan.execute(ops, executed, UNSCALED, None)
    assert np.asarray(got).strides == executed.strides
    exact, scale = reference_einsum(expr, *ops)
    assert_close(got, exact, np.float64, scale)
    assert_close(executed, exact, np.float64, scale)


@pytest.mark.parametrize(
    "expr, shapes, dtype, kernel",
    [
        ("ij,jk->ik", [(4, 5), (5, 3)], np.float64, np.dot),  # one product: numpy.dot
        ("ij,j->i", [(4, 5), (5,)], np.float64, np.dot),  # gemv on the vector as it is
        ("j,jk->k", [(5,), (5, 3)], np.float32, np.dot),
        ("ij,ij->", [(4, 5), (4, 5)], np.float64, np.vdot),  # both flattened by vdot
        ("ij,ij->", [(4, 5), (4, 5)], np.int64, np.vdot),
        ("ij,ij->", [(4, 5), (4, 5)], np.complex128, None),  # vdot would conjugate A
        ("ij,ji->", [(4, 5), (5, 4)], np.float64, None),  # B read transposed: no vdot
        ("bij,bjk->bik", [(2, 4, 5), (2, 5, 3)], np.float64, np.matmul),  # a stack
        ("ij,ij->", [(8, 5), (8, 5)], "stepped", None),  # strided: matmul, still a scalar
    ],
)
def test_a_warm_product_is_one_numpy_call_where_one_serves(expr, shapes, dtype, kernel, rng):
    """One product of arrays that fill their memory runs as numpy.dot (numpy.vdot for
    two real arrays read whole, in their own order), a stack as numpy.matmul; every
    result, a scalar for a 0-d one, as the reference's."""
    if dtype == "stepped":  # every other row of each operand: neither fills its memory
        dtype = np.float64
        ops = [random_array(rng, s, dtype)[::2] for s in shapes]
    else:
        ops = [random_array(rng, s, dtype) for s in shapes]
    gpu_tc.plan_cache().clear()
    got = gpu_tc.einsum(expr, *ops)
    plan = PLAN_CACHE.programs.peek(backend_of_type(np.ndarray).warm_key((expr, *ops)))
    assert plan is not None and plan.fast is not None, plan and plan.reason
    if kernel is not None:
        assert plan.fast is kernel
    else:
        assert plan.fast not in (np.dot, np.vdot, np.matmul)
    if np.dtype(dtype).kind == "i":
        assert np.array_equal(got, np.einsum(expr, *ops))  # integers: exact
    else:
        exact, scale = reference_einsum(expr, *ops)
        assert_close(got, exact, np.dtype(dtype), scale)
    assert np.asarray(got).shape == np.einsum(expr, *ops).shape
    if not np.ndim(got):
        assert type(got) is type(np.einsum(expr, *ops)), type(got)  # a NumPy scalar


@pytest.mark.parametrize("expr, shapes", [
    ("i,j->ij", [(4,), (5,)]),  # an outer product: a column times a row by numpy.dot
    ("ij,k->ijk", [(2, 3), (4,)]),
    ("k,ij->kij", [(4,), (2, 3)]),
    ("i,j", [(1,), (2,)]),  # extents of one: the first still needs its axis
    ("ij,j->ij", [(3, 4), (4,)]),
    ("j,ij->ij", [(4,), (3, 4)]),
    ("ij,k->kji", [(2, 3), (4,)]),
])
def test_a_warm_broadcast_product_has_numpys_shape_and_values(expr, shapes, rng):
    """A product with no label summed, warm, into a new result: numpy.einsum's shape
    and layout (C-ordered operands: the order of the one with every label, not the
    shared labels outermost) and the reference's values on every call."""
    ops = [random_array(rng, s, np.float64) for s in shapes]
    gpu_tc.plan_cache().clear()
    exact, scale = reference_einsum(expr, *ops)
    expected = np.einsum(expr, *ops)
    for _ in range(3):
        got = gpu_tc.einsum(expr, *ops)
        assert (got.shape, got.strides) == (expected.shape, expected.strides)
        assert_close(got, exact, np.float64, scale)
        assert np.array_equal(got, expected)  # one product an element: exact


def test_an_outer_product_into_an_out_is_exact_scaled_or_not(rng):
    """execute() of an outer product (what a measured plan times) runs numpy.dot as its
    warm call does, into a C-ordered out; a Fortran-ordered out, or beta, takes the
    broadcast multiply: every result as NumPy's."""
    a, b = rng.standard_normal(5), rng.standard_normal(7)
    expected = a[:, None] * b
    for order in "CF":
        out = np.zeros((5, 7), order=order)
        gpu_tc.einsum("i,j->ij", a, b, out=out)
        assert np.array_equal(out, expected)
    c = rng.standard_normal((5, 7))
    np.testing.assert_allclose(gpu_tc.contract("i,j->ij", a, b, alpha=2.0),
                               2.0 * expected, rtol=1e-15)
    np.testing.assert_allclose(gpu_tc.contract("i,j->ij", a, b, alpha=2.0, beta=0.5, c=c),
                               2.0 * expected + 0.5 * c, rtol=1e-12)


@pytest.mark.parametrize("expr, shapes", [
    ("ii->", [(4, 4)]),
    ("ij,jk->ik", [(4, 5), (5, 3)]),
    ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)]),
    ("i,ij,jk,kl->l", [(3,), (3, 4), (4, 5), (5, 2)]),
])
def test_the_warm_key_tells_layouts_and_dtypes_apart(expr, shapes, rng):
    """The CPU backend's flat key, for one to four operands: another layout or dtype of
    the last operand gives another key (and, through einsum, the right result); an
    operand that is not exactly a NumPy array gives none."""
    ops = [random_array(rng, s, np.float64) for s in shapes]
    gpu_tc.einsum(expr, *ops)  # the backend exists from its first call
    backend = backend_of_type(np.ndarray)
    key = backend.warm_key((expr, *ops))
    assert key is not None and key == backend.warm_key((expr, *[o.copy() for o in ops]))
    last = ops[-1]
    others = [np.asfortranarray(last), last.astype(np.float32)]
    if last.ndim == 2:
        others.append(np.ascontiguousarray(last.T).T)
    for other in others:
        changed = [*ops[:-1], other]
        if other.strides != last.strides or other.dtype != last.dtype:
            assert backend.warm_key((expr, *changed)) != key
        exact, scale = reference_einsum(expr, *changed)
        assert_close(gpu_tc.einsum(expr, *changed), exact, np.result_type(*changed), scale)
    assert backend.warm_key((expr, *ops[:-1], last.view(_Subclass))) is None
    assert backend.warm_key((expr, *ops[:-1], last.tolist())) is None


class _Subclass(np.ndarray):
    """An ndarray subclass: not exactly a NumPy array."""


@pytest.mark.parametrize(
    "expr, shapes, order",
    [
        ("kl,ik->il", [(5, 3), (4, 5)], "CC"),  # D = B @ A: the two arrays as they are
        ("kl,ik->il", [(5, 3), (4, 5)], "FF"),  # D = B @ A of transposed views
        ("bkl,bik->bil", [(2, 5, 3), (2, 4, 5)], "CC"),  # a batch of them
        ("kml,ik->iml", [(5, 2, 3), (4, 5)], "CC"),  # A's free labels merge
    ],
)
def test_a_product_matmul_writes_transposed_takes_the_operands_in_the_other_order(
    expr, shapes, order, rng
):
    """Where matmul(a, b) would write D transposed, the warm call computes b @ a from
    views of the operands (no transposes undone after the call; numpy.dot for one
    product of arrays that fill their memory), D in execute()'s layout, values as the
    reference."""
    ops = [np.asarray(random_array(rng, s, np.float64), order=o) for s, o in zip(shapes, order)]
    gpu_tc.plan_cache().clear()
    got = gpu_tc.einsum(expr, *ops)
    backend = backend_of_type(np.ndarray)
    plan = PLAN_CACHE.programs.peek(backend.warm_key((expr, *ops)))
    assert plan is not None and plan.fast is not None, plan and plan.reason
    if "m" not in expr and order == "CC":
        batched = expr.startswith("b")
        assert plan.fast is (fresh_call._reversed_matmul if batched else fresh_call._reversed_dot)
    executed = allocate(backend, plan.output)
    plan.execute(ops, executed, UNSCALED, None)
    assert np.asarray(got).strides == executed.strides
    exact, scale = reference_einsum(expr, *ops)
    assert_close(got, exact, np.float64, scale)
