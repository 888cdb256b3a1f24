"""The operations besides einsum: contract, permute, reduce, element-wise, trace, and
held plans from prepare(); each checked against gpu_tc.reference or numpy."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest
from helpers import (
    BACKENDS,
    DTYPES,
    assert_close,
    random_array,
    reference_einsum,
    to_backend,
    to_numpy,
)

import gpu_tc
from gpu_tc import BinaryOp, ReduceOp, UnaryOp, reference

ORDERED = frozenset({ReduceOp.MAX, ReduceOp.MIN, BinaryOp.MAX, BinaryOp.MIN})
REAL_ONLY_UNARY = frozenset({UnaryOp.RELU, UnaryOp.CEIL, UnaryOp.FLOOR, UnaryOp.SIGMOID})


def with_dtypes(combos: list[tuple[Any, ...]], real_only: frozenset) -> list[Any]:
    """``combos`` crossed with the dtypes, leaving out complex dtypes for operators that
    order values or are real-only (their rejection is tested in test_errors.py)."""
    params = []
    for combo in combos:
        for dtype in (p.values[0] for p in DTYPES):
            if dtype.kind == "c" and any(op in real_only for op in combo):
                continue
            ident = "-".join(op.name for op in combo)
            params.append(pytest.param(*combo, dtype, id=f"{ident}-{dtype.name}"))
    return params


def scalars_for(dtype: Any) -> list[complex]:
    """Scalars to try: complex ones only where the dtype is complex."""
    values: list[complex] = [1, 2.5, -0.5, 0]
    return values + ([1.5 - 2j, 1j] if np.dtype(dtype).kind == "c" else [])


def in_domain(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, op: UnaryOp) -> Any:
    """Values inside ``op``'s real domain: (0.1, 0.9), or (1.1, 1.9) for ACOSH."""
    dtype = np.dtype(dtype)
    values = rng.uniform(0.1, 0.9, shape)
    if dtype.kind == "c":
        values = values + 1j * rng.uniform(0.1, 0.9, shape)
    if op is UnaryOp.ACOSH:
        values = values + 1
    return values.astype(dtype)


def scale_of(*arrays: Any) -> float:
    """A problem scale for element-wise results: the largest magnitude involved."""
    return max([1.0] + [float(np.max(np.abs(a))) for a in arrays if np.size(a)])


# --- contract ----------------------------------------------------------------------

CONTRACTIONS = [
    pytest.param("ij,jk->ik", [(3, 4), (4, 5)], id="gemm"),
    pytest.param("ij,jk->ki", [(3, 4), (4, 5)], id="gemm-transposed-out"),
    pytest.param("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], id="batched"),
    pytest.param("abcd,dbea->ec", [(2, 3, 4, 5), (5, 3, 2, 2)], id="tccg-like"),
    pytest.param("ij,ij->ij", [(3, 4), (3, 4)], id="hadamard"),
    pytest.param("ij,jk->ik", [(3, 0), (0, 5)], id="contracted-0"),
    pytest.param("ij,jk->ik", [(40, 41), (41, 42)], id="gemm-large"),
    pytest.param("ijk,jkl->li", [(40, 6, 7), (6, 7, 42)], id="merged-large"),
    pytest.param("ikj,jkl->il", [(40, 6, 7), (7, 6, 42)], id="packed-large"),
    pytest.param("ij,jk->ki", [(40, 41), (41, 42)], id="transposed-out-large"),
    pytest.param("bij,bjk->ikb", [(3, 33, 34), (3, 34, 35)], id="d-packed-large"),
    pytest.param("i,i->", [(5,), (5,)], id="dot"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("subscripts, shapes", CONTRACTIONS)
def test_contract_alpha_beta(subscripts, shapes, dtype, backend, rng):
    a, b = (random_array(rng, s, dtype) for s in shapes)
    out_shape = np.einsum(subscripts, a, b).shape
    c = random_array(rng, out_shape, dtype)
    _, scale = reference_einsum(subscripts, a, b)
    for alpha in scalars_for(dtype):
        for beta in scalars_for(dtype):
            got = gpu_tc.contract(
                subscripts,
                to_backend(a, backend),
                to_backend(b, backend),
                alpha=alpha,
                beta=beta,
                c=to_backend(c, backend),
            )
            expected = reference.contract(subscripts, a, b, alpha, beta, c)
            assert got.dtype == dtype and tuple(got.shape) == out_shape
            assert_close(got, expected, dtype, abs(alpha) * scale + abs(beta) * np.abs(c))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("subscripts, shapes", CONTRACTIONS)
def test_contract_in_place_on_out(subscripts, shapes, dtype, backend, rng):
    """D = alpha * A B + beta * D with c given as out itself."""
    a, b = (random_array(rng, s, dtype) for s in shapes)
    d0 = random_array(rng, np.einsum(subscripts, a, b).shape, dtype)
    alpha, beta = scalars_for(dtype)[-1], -1.5
    d = to_backend(d0.copy(), backend)
    got = gpu_tc.contract(
        subscripts,
        to_backend(a, backend),
        to_backend(b, backend),
        alpha=alpha,
        beta=beta,
        c=d,
        out=d,
    )
    assert got is d
    _, scale = reference_einsum(subscripts, a, b)
    expected = reference.contract(subscripts, a, b, alpha, beta, d0)
    assert_close(d, expected, dtype, abs(alpha) * scale + abs(beta) * np.abs(d0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("out_kind", ["C", "F", "strided", "transposed-strided"])
@pytest.mark.parametrize("subscripts, shapes", CONTRACTIONS[:3] + CONTRACTIONS[6:11])
def test_contract_in_place_on_out_views(subscripts, shapes, out_kind, backend, rng):
    a, b = (random_array(rng, s, np.float64) for s in shapes)
    shape = np.einsum(subscripts, a, b).shape
    big = to_backend(random_array(rng, tuple(2 * n for n in shape), np.float64), backend)
    d = {
        "C": lambda: to_backend(random_array(rng, shape, np.float64), backend),
        "F": lambda: to_backend(np.asfortranarray(random_array(rng, shape, np.float64)), backend),
        "strided": lambda: big[(slice(None, None, 2),) * len(shape)],
        "transposed-strided": lambda: (
            to_backend(random_array(rng, tuple(2 * n for n in shape[::-1]), np.float64), backend)[
                (slice(1, None, 2),) * len(shape)
            ].T
        ),
    }[out_kind]()
    d0 = to_numpy(d).copy()
    got = gpu_tc.contract(
        subscripts, to_backend(a, backend), to_backend(b, backend), alpha=2.0, beta=0.5, c=d, out=d
    )
    assert got is d
    _, scale = reference_einsum(subscripts, a, b)
    expected = reference.contract(subscripts, a, b, 2.0, 0.5, d0)
    assert_close(d, expected, np.float64, 2 * scale + 0.5 * np.abs(d0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_contract_beta_zero_never_reads_c(backend, rng):
    """With beta = 0, c is ignored, as BLAS ignores C: NaNs in it do not leak."""
    a, b = random_array(rng, (3, 4), np.float64), random_array(rng, (4, 5), np.float64)
    c = to_backend(np.full((3, 5), np.nan), backend)
    got = gpu_tc.contract(
        "ij,jk->ik", to_backend(a, backend), to_backend(b, backend), alpha=1, beta=0, c=c
    )
    assert_close(got, reference.einsum("ij,jk->ik", a, b), np.float64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_contract_c_of_another_dtype_and_layout(backend, rng):
    a, b = random_array(rng, (3, 4), np.complex64), random_array(rng, (4, 5), np.complex64)
    c = np.asfortranarray(random_array(rng, (3, 5), np.float32))
    got = gpu_tc.contract(
        "ij,jk->ik",
        to_backend(a, backend),
        to_backend(b, backend),
        alpha=2j,
        beta=3,
        c=to_backend(c, backend),
    )
    assert got.dtype == np.complex64
    exact, scale = reference_einsum("ij,jk->ik", a, b)
    assert_close(got, 2j * exact + 3 * c, np.complex64, 2 * scale + 3 * np.abs(c))


def test_contract_handcomputed():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    c = np.array([[1.0, 1.0], [1.0, 1.0]])
    got = gpu_tc.contract("ij,jk->ik", a, np.eye(2), alpha=2, beta=-1, c=c)
    np.testing.assert_array_equal(got, [[1.0, 3.0], [5.0, 7.0]])
    z = np.array([[1j]])
    assert gpu_tc.contract("ij,jk->ik", z, z, alpha=1j).item() == -1j


@pytest.mark.parametrize("n", [3, 40, 200])
@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_alpha_zero_reads_neither_operand_on_any_route(n, bad):
    """As BLAS's gemm, whatever the route (before, small sizes gave nan and large ones
    1.0, by the engine a plan had timed): D = beta * C, the reference's answer too."""
    a, b, c = np.ones((n, n)), np.ones((n, n)), np.full((n, n), 2.0)
    a[0, 0] = bad
    expected = reference.contract("ij,jk->ik", a, b, 0, 3, c)
    np.testing.assert_array_equal(expected, 6.0)
    for _ in range(3):  # through a plan's measured variants
        got = gpu_tc.contract("ij,jk->ik", a, b, alpha=0, beta=3, c=c)
        np.testing.assert_array_equal(got, 6.0)
    np.testing.assert_array_equal(gpu_tc.contract("ij,jk->ik", a, b, alpha=0), 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scalar", [2 + 0j, np.complex128(2), np.complex64(2)],
                         ids=["complex", "complex128", "complex64"])
def test_a_complex_scalar_with_no_imaginary_part_scales_real_data(scalar, dtype):
    """As numpy's ``2 * x`` would not, but gpu_tc's check promises: a complex scalar
    whose imaginary part is 0 is its real part on real data, on every operation."""
    a = np.arange(12.0, dtype=dtype).reshape(3, 4)
    c = np.ones((3, 3), dtype)
    cases = [
        (gpu_tc.contract("ij,kj->ik", a, a, alpha=scalar, beta=scalar, c=c), 2 * (a @ a.T) + 2),
        (gpu_tc.permute("ij->ji", a, alpha=scalar), 2 * a.T),
        (gpu_tc.reduce("ij->i", a, alpha=scalar), 2 * a.sum(axis=1)),
        (gpu_tc.elementwise_binary("ij,ij->ij", a, a, alpha=scalar, gamma=scalar), 4 * a),
        (gpu_tc.elementwise_trinary("ij,ij,ij->ij", a, a, a, alpha=scalar, beta=scalar,
                                    gamma=scalar), 6 * a),
    ]
    for got, expected in cases:
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, expected, rtol=1e-6)


# --- permute -----------------------------------------------------------------------

PERMUTATIONS = [
    pytest.param("abcd->dcba", (2, 3, 4, 5), id="reverse-4"),
    pytest.param("ij->ji", (3, 4), id="transpose"),
    pytest.param("ijk->kij", (3, 4, 5), id="cycle"),
    pytest.param("ijk->ijk", (3, 4, 5), id="identity"),
    pytest.param("ii->i", (4, 4), id="diagonal"),
    pytest.param("...ij->...ji", (2, 3, 4), id="ellipsis"),
    pytest.param("->", (), id="0-d"),
    pytest.param("ij->ji", (0, 3), id="zero-size"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("subscripts, shape", PERMUTATIONS)
def test_permute(subscripts, shape, dtype, backend, rng):
    a = random_array(rng, shape, dtype)
    for alpha in scalars_for(dtype):
        got = gpu_tc.permute(subscripts, to_backend(a, backend), alpha=alpha)
        expected = reference.permute(subscripts, a, alpha)
        assert got.dtype == dtype
        assert tuple(got.shape) == np.einsum(subscripts, a).shape
        assert_close(got, expected, dtype, abs(alpha) * np.abs(expected / (alpha or 1)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, dtype", with_dtypes([(op,) for op in UnaryOp], REAL_ONLY_UNARY))
def test_permute_unary_ops(op, dtype, backend, rng):
    a = in_domain(rng, (3, 4, 5), dtype, op)
    got = gpu_tc.permute("abc->cab", to_backend(a, backend), alpha=2, op_a=op)
    expected = reference.permute("abc->cab", a, 2, op)
    assert got.dtype == dtype
    assert_close(got, expected, dtype, scale_of(expected))


def test_permute_unary_ops_handcomputed():
    a = np.array([[4.0, -1.0], [0.25, 9.0]])
    np.testing.assert_allclose(gpu_tc.permute("ij->ji", a, op_a=UnaryOp.NEG), -a.T)
    np.testing.assert_allclose(gpu_tc.permute("ij->ji", a, op_a=UnaryOp.ABS), np.abs(a).T)
    np.testing.assert_allclose(gpu_tc.permute("ij->ij", a, op_a=UnaryOp.RELU), [[4, 0], [0.25, 9]])
    np.testing.assert_allclose(
        gpu_tc.permute("ij->ij", np.abs(a), op_a=UnaryOp.SQRT, alpha=2), [[4, 2], [1, 6]]
    )
    z = np.array([1 + 2j, 3 - 4j])
    np.testing.assert_array_equal(gpu_tc.permute("i->i", z, op_a=UnaryOp.CONJ), [1 - 2j, 3 + 4j])
    np.testing.assert_allclose(gpu_tc.permute("i->i", z, op_a=UnaryOp.ABS), [5**0.5, 5])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["C", "F", "strided", "negative"])
def test_permute_out(kind, backend, rng):
    a = random_array(rng, (2, 3, 4, 5), np.complex128)
    shape = (5, 4, 3, 2)
    base = to_backend(np.zeros(tuple(2 * n for n in shape), np.complex128), backend)
    out = {
        "C": lambda: to_backend(np.zeros(shape, np.complex128), backend),
        "F": lambda: to_backend(np.zeros(shape, np.complex128, order="F"), backend),
        "strided": lambda: base[::2, 1::2, ::2, 1::2],
        "negative": lambda: base[::-2, ::-2, ::-2, ::-2],
    }[kind]()
    got = gpu_tc.permute("abcd->dcba", to_backend(a, backend), alpha=1j, op_a=UnaryOp.CONJ, out=out)
    assert got is out
    assert_close(out, 1j * np.conj(a).transpose(3, 2, 1, 0), np.complex128)


@pytest.mark.parametrize("backend", BACKENDS)
def test_permute_input_views(backend, rng):
    host = random_array(rng, (6, 8, 10), np.float32)
    x = to_backend(host, backend)
    for view, host_view in [
        (x[::-2, 1::3], host[::-2, 1::3]),
        (x.T, host.T),
        (x[:, :, ::-1], host[:, :, ::-1]),
    ]:
        got = gpu_tc.permute("abc->bca", view, alpha=-1)
        assert_close(got, -host_view.transpose(1, 2, 0), np.float32)


# --- reduce ------------------------------------------------------------------------

REDUCTIONS = [
    pytest.param("ijk->ik", (3, 4, 5), id="middle"),
    pytest.param("ijk->", (3, 4, 5), id="all"),
    pytest.param("ijk->kj", (3, 4, 5), id="first-permuted"),
    pytest.param("ij->ji", (3, 4), id="none-reduced"),
    pytest.param("ii->", (4, 4), id="trace"),
    pytest.param("iij->j", (3, 3, 4), id="partial-trace"),
    pytest.param("...i->...", (2, 3, 4), id="ellipsis"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, dtype", with_dtypes([(op,) for op in ReduceOp], ORDERED))
@pytest.mark.parametrize("subscripts, shape", REDUCTIONS)
def test_reduce(subscripts, shape, op, dtype, backend, rng):
    a = in_domain(rng, shape, dtype, UnaryOp.IDENTITY) * 2  # products of values near 1
    got = gpu_tc.reduce(subscripts, to_backend(a, backend), op=op)
    expected = reference.reduce(subscripts, a, op)
    assert got.dtype == dtype
    assert tuple(got.shape) == np.einsum(subscripts, a).shape
    assert_close(got, expected, dtype, scale_of(expected) * a.size)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, dtype", with_dtypes([(op,) for op in ReduceOp], ORDERED))
def test_reduce_alpha_beta_c_op_a(op, dtype, backend, rng):
    a = in_domain(rng, (3, 4, 5), dtype, UnaryOp.IDENTITY) - 0.5
    c = random_array(rng, (5, 3), dtype)
    alpha, beta = scalars_for(dtype)[-2], -0.5
    for op_a in (UnaryOp.IDENTITY, UnaryOp.NEG, UnaryOp.ABS, UnaryOp.EXP):
        got = gpu_tc.reduce(
            "ijk->ki",
            to_backend(a, backend),
            op=op,
            alpha=alpha,
            beta=beta,
            c=to_backend(c, backend),
            op_a=op_a,
        )
        expected = reference.reduce("ijk->ki", a, op, alpha, beta, c, op_a)
        assert got.dtype == dtype
        assert_close(got, expected, dtype, 10 * scale_of(expected, c))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduce_c_is_out(backend, rng):
    a = random_array(rng, (4, 5, 6), np.float64)
    d0 = random_array(rng, (6,), np.float64)
    d = to_backend(d0.copy(), backend)
    got = gpu_tc.reduce("ijk->k", to_backend(a, backend), alpha=2, beta=3, c=d, out=d)
    assert got is d
    assert_close(d, 2 * a.sum(axis=(0, 1)) + 3 * d0, np.float64, scale_of(a) * 40 + 3)


def test_reduce_handcomputed():
    a = np.array([[1.0, -5.0, 3.0], [4.0, 2.0, -6.0]])
    np.testing.assert_array_equal(gpu_tc.reduce("ij->j", a, op=ReduceOp.MAX), [4, 2, 3])
    np.testing.assert_array_equal(gpu_tc.reduce("ij->i", a, op=ReduceOp.MIN), [-5, -6])
    np.testing.assert_array_equal(gpu_tc.reduce("ij->i", a, op=ReduceOp.PROD), [-15, -48])
    np.testing.assert_array_equal(gpu_tc.reduce("ij->", a, op=ReduceOp.SUM), -1)
    np.testing.assert_array_equal(
        gpu_tc.reduce("ij->i", a, op=ReduceOp.MAX, op_a=UnaryOp.ABS), [5, 6]
    )


@pytest.mark.parametrize(
    "op, identity", [(ReduceOp.SUM, 0.0), (ReduceOp.PROD, 1.0)], ids=["SUM", "PROD"]
)
def test_reduce_over_zero_extent_gives_identity(op, identity):
    got = gpu_tc.reduce("ij->i", np.zeros((3, 0)), op=op)
    np.testing.assert_array_equal(got, [identity] * 3)


# --- element-wise ------------------------------------------------------------------

ELEMENTWISE = [
    pytest.param("ij,ij->ij", [(3, 4), (3, 4)], id="same"),
    pytest.param("ij,j->ij", [(3, 4), (4,)], id="c-broadcast"),
    pytest.param("j,ij->ji", [(4,), (3, 4)], id="a-broadcast"),
    pytest.param("ij,ji->ij", [(3, 4), (4, 3)], id="permuted"),
    pytest.param("ijk,ki->jik", [(2, 3, 4), (4, 2)], id="permuted-broadcast"),
    pytest.param("i,j->ij", [(3,), (4,)], id="outer"),
    pytest.param("ii,i->i", [(3, 3), (3,)], id="diagonal"),
    pytest.param(",ij->ij", [(), (3, 4)], id="0-d"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, dtype", with_dtypes([(op,) for op in BinaryOp], ORDERED))
@pytest.mark.parametrize("subscripts, shapes", ELEMENTWISE)
def test_elementwise_binary(subscripts, shapes, op, dtype, backend, rng):
    a, c = (random_array(rng, s, dtype) for s in shapes)
    for alpha, gamma in [(1, 1), (2.0, -0.5), (scalars_for(dtype)[-1], 0)]:
        got = gpu_tc.elementwise_binary(
            subscripts,
            to_backend(a, backend),
            to_backend(c, backend),
            alpha=alpha,
            gamma=gamma,
            op=op,
        )
        expected = reference.elementwise(
            subscripts, [a, c], [alpha, gamma], [UnaryOp.IDENTITY] * 2, [op]
        )
        assert got.dtype == dtype
        out_labels = subscripts.split("->")[1]
        assert got.ndim == len(out_labels)
        assert_close(got, expected, dtype, scale_of(a, c) * 3)


UNARY_PAIRS = [
    (UnaryOp.NEG, UnaryOp.IDENTITY),
    (UnaryOp.ABS, UnaryOp.SQRT),
    (UnaryOp.EXP, UnaryOp.LOG),
    (UnaryOp.CONJ, UnaryOp.TANH),
    (UnaryOp.RCP, UnaryOp.SIN),
    (UnaryOp.RELU, UnaryOp.FLOOR),
    (UnaryOp.SIGMOID, UnaryOp.CEIL),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op_a, op_c, dtype", with_dtypes(UNARY_PAIRS, REAL_ONLY_UNARY))
def test_elementwise_binary_unary_ops(op_a, op_c, dtype, backend, rng):
    a = in_domain(rng, (3, 4), dtype, op_a)
    c = in_domain(rng, (4,), dtype, op_c)
    for op in (BinaryOp.ADD, BinaryOp.MUL):
        got = gpu_tc.elementwise_binary(
            "ij,j->ji",
            to_backend(a, backend),
            to_backend(c, backend),
            alpha=0.5,
            gamma=2,
            op=op,
            op_a=op_a,
            op_c=op_c,
        )
        expected = reference.elementwise("ij,j->ji", [a, c], [0.5, 2], [op_a, op_c], [op])
        assert_close(got, expected, dtype, scale_of(expected) * 4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "op_ab, op_abc, dtype",
    with_dtypes([(x, y) for x in BinaryOp for y in BinaryOp], ORDERED),
)
def test_elementwise_trinary(op_ab, op_abc, dtype, backend, rng):
    a = random_array(rng, (2, 3, 4), dtype)
    b = random_array(rng, (4, 2), dtype)
    c = random_array(rng, (3,), dtype)
    subscripts = "ijk,ki,j->kji"
    alpha, beta, gamma = 1.5, scalars_for(dtype)[-1], -1
    got = gpu_tc.elementwise_trinary(
        subscripts,
        *(to_backend(x, backend) for x in (a, b, c)),
        alpha=alpha,
        beta=beta,
        gamma=gamma,
        op_ab=op_ab,
        op_abc=op_abc,
    )
    expected = reference.elementwise(
        subscripts, [a, b, c], [alpha, beta, gamma], [UnaryOp.IDENTITY] * 3, [op_ab, op_abc]
    )
    assert got.dtype == dtype and tuple(got.shape) == (4, 3, 2)
    assert_close(got, expected, dtype, scale_of(a, b, c) ** 2 * 8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_trinary_unary_ops_and_out(backend, rng):
    a = in_domain(rng, (3, 4), np.complex128, UnaryOp.IDENTITY)
    b = in_domain(rng, (4, 3), np.complex128, UnaryOp.IDENTITY)
    c = in_domain(rng, (3, 4), np.complex128, UnaryOp.IDENTITY)
    out = to_backend(np.zeros((4, 3), np.complex128, order="F"), backend)
    ops = (UnaryOp.CONJ, UnaryOp.EXP, UnaryOp.NEG)
    got = gpu_tc.elementwise_trinary(
        "ij,ji,ij->ji",
        *(to_backend(x, backend) for x in (a, b, c)),
        alpha=1j,
        beta=2,
        gamma=0.5,
        op_ab=BinaryOp.MUL,
        op_abc=BinaryOp.ADD,
        op_a=ops[0],
        op_b=ops[1],
        op_c=ops[2],
        out=out,
    )
    assert got is out
    expected = reference.elementwise(
        "ij,ji,ij->ji", [a, b, c], [1j, 2, 0.5], list(ops), [BinaryOp.MUL, BinaryOp.ADD]
    )
    assert_close(out, expected, np.complex128, scale_of(expected))


def test_elementwise_handcomputed():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    c = np.array([10.0, 20.0])
    np.testing.assert_array_equal(gpu_tc.elementwise_binary("ij,j->ij", a, c), [[11, 22], [13, 24]])
    np.testing.assert_array_equal(
        gpu_tc.elementwise_binary("ij,ji->ij", a, a, op=BinaryOp.MUL), [[1, 6], [6, 16]]
    )
    np.testing.assert_array_equal(
        gpu_tc.elementwise_binary("ij,j->ji", a, c, alpha=10, op=BinaryOp.MAX), [[10, 30], [20, 40]]
    )
    np.testing.assert_array_equal(
        gpu_tc.elementwise_trinary("ij,ij,j->ij", a, a, c, op_ab=BinaryOp.MUL, gamma=-1),
        [[-9, -16], [-1, -4]],
    )


# --- trace ----------------------------------------------------------------------------

TRACES = [
    pytest.param((4, 4), 0, 1, id="square"),
    pytest.param((4, 4), 1, 0, id="square-swapped"),
    pytest.param((3, 5), 0, 1, id="wide"),
    pytest.param((5, 3), 0, 1, id="tall"),
    pytest.param((3, 4, 3), 0, 2, id="rank3-outer"),
    pytest.param((3, 4, 5), 1, 2, id="rank3-inner"),
    pytest.param((3, 4, 5), -1, -2, id="negative-axes"),
    pytest.param((3, 4, 5), 0, -1, id="mixed-axes"),
    pytest.param((2, 3, 4, 5), 1, 3, id="rank4"),
    pytest.param((2, 3, 4, 5), 3, 0, id="rank4-reversed"),
    pytest.param((0, 3), 0, 1, id="empty"),
    pytest.param((3, 0, 2), 0, 2, id="empty-kept"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis1, axis2", TRACES)
def test_trace(shape, axis1, axis2, dtype, backend, rng):
    a = random_array(rng, shape, dtype)
    got = gpu_tc.trace(to_backend(a, backend), axis1=axis1, axis2=axis2)
    expected = np.trace(a.astype(np.complex128), axis1=axis1, axis2=axis2)
    expected_numpy = np.trace(a, axis1=axis1, axis2=axis2)
    assert got.dtype == expected_numpy.dtype
    assert tuple(got.shape) == np.shape(expected_numpy)
    bound = np.trace(np.abs(a), axis1=axis1, axis2=axis2)
    assert_close(got, expected, dtype, bound)


@pytest.mark.parametrize("backend", BACKENDS)
def test_trace_of_views_and_out(backend, rng):
    host = random_array(rng, (6, 7, 8), np.float32)
    x = to_backend(host, backend)
    for view, host_view in [
        (x[::-1, :, ::2], host[::-1, :, ::2]),
        (x.T, host.T),
        (x[1:, 2:, 3:], host[1:, 2:, 3:]),
    ]:
        out = to_backend(np.zeros((view.shape[1],), np.float32), backend)
        got = gpu_tc.trace(view, axis1=0, axis2=2, out=out)
        assert got is out
        assert_close(
            out,
            np.trace(host_view, axis1=0, axis2=2),
            np.float32,
            np.trace(np.abs(host_view), axis1=0, axis2=2),
        )


def test_trace_handcomputed():
    a = np.arange(12.0).reshape(3, 4)
    assert gpu_tc.trace(a) == 0 + 5 + 10
    got = gpu_tc.trace(np.arange(8.0).reshape(2, 2, 2), axis1=0, axis2=2)
    np.testing.assert_array_equal(got, [5, 9])


def test_trace_large_operand_reads_only_the_diagonal(rng):
    """2000 x 2000: a strided diagonal view is reduced, no copy of the operand."""
    a = rng.standard_normal((2000, 2000))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        got = gpu_tc.trace(a)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert abs(got - np.trace(a)) <= 1e-10 * np.abs(np.diagonal(a)).sum()
    assert peak < a.nbytes // 100
    got_t = gpu_tc.trace(a.T[::-1, ::-1])
    assert abs(got_t - np.trace(a.T[::-1, ::-1])) <= 1e-10 * np.abs(np.diagonal(a)).sum()


# --- prepare ---------------------------------------------------------------------------

PREPARED = [
    pytest.param("ij,jk->ik", [(3, 4), (4, 5)], id="gemm"),
    pytest.param("ij,jk->ik", [(40, 41), (41, 42)], id="gemm-large"),
    pytest.param("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)], id="chain"),
    pytest.param("ii->i", [(4, 4)], id="diagonal"),
    pytest.param("ijk->", [(2, 3, 4)], id="reduce"),
    pytest.param("ij,ij->ij", [(3, 4), (3, 4)], id="hadamard"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("subscripts, shapes", PREPARED)
def test_prepare_execute_matches_einsum(subscripts, shapes, backend, rng):
    host = [random_array(rng, s, np.float64) for s in shapes]
    ops = [to_backend(x, backend) for x in host]
    exact, scale = reference_einsum(subscripts, *host)
    plan = gpu_tc.prepare(subscripts, *ops)
    assert isinstance(plan, gpu_tc.Plan)
    assert isinstance(plan.route, str) and plan.route
    assert isinstance(plan.reason, str) and plan.reason
    text = repr(plan)
    assert subscripts in text and plan.route in text and plan.reason in text
    for _ in range(2):  # the same plan runs more than once, on fresh operands too
        got = plan.execute(*ops)
        assert_close(got, exact, np.float64, scale)
        assert_close(got, gpu_tc.einsum(subscripts, *ops), np.float64, scale)
    fresh = [random_array(rng, s, np.float64) for s in shapes]
    exact2, scale2 = reference_einsum(subscripts, *fresh)
    assert_close(plan.execute(*(to_backend(x, backend) for x in fresh)), exact2, np.float64, scale2)
    plan.free()


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepare_with_out(backend, rng):
    a, b = random_array(rng, (3, 4), np.float64), random_array(rng, (4, 5), np.float64)
    A, B = to_backend(a, backend), to_backend(b, backend)
    out = to_backend(np.zeros((5, 3)), backend).T
    with gpu_tc.prepare("ij,jk->ik", A, B, out=out) as plan:
        assert plan.execute(A, B, out=out) is out
        assert_close(out, a @ b, np.float64, np.abs(a) @ np.abs(b))
    with gpu_tc.prepare("ij,jk->ik", A, B) as plan:  # prepared without out
        out2 = to_backend(np.zeros((3, 5)), backend)
        assert plan.execute(A, B, out=out2) is out2
        assert_close(out2, a @ b, np.float64, np.abs(a) @ np.abs(b))


def test_prepare_route_reason_in_repr(rng):
    a = rng.standard_normal((40, 41))
    b = rng.standard_normal((41, 42))
    plan = gpu_tc.prepare("ij,jk->ik", a, b)
    assert plan.route == "blas:direct"
    assert "no copy" in plan.reason
    assert repr(plan).startswith("Plan('ij,jk->ik'")
    assert "blas:direct" in repr(plan) and plan.backend == "cpu"


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepare_context_manager_frees(backend, rng):
    a = to_backend(random_array(rng, (3, 3), np.float64), backend)
    with gpu_tc.prepare("ij,jk->ik", a, a) as plan:
        plan.execute(a, a)
    assert "freed" in repr(plan)
    with pytest.raises(gpu_tc.PlanStateError, match=r"ij,jk->ik.*freed"):
        plan.execute(a, a)
    with pytest.raises(gpu_tc.PlanStateError, match="freed"):
        _ = plan.route
    plan.free()  # freeing twice is harmless
    with pytest.raises(gpu_tc.PlanStateError):
        plan.execute(a, a)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda x: x[:, :2], id="shape"),
        pytest.param(lambda x: x.T, id="strides-transposed"),
        pytest.param(lambda x: x[::-1], id="strides-negative"),
        pytest.param(lambda x: x.astype("complex128"), id="dtype"),
    ],
)
@pytest.mark.parametrize("executed_first", [False, True], ids=["fresh", "after-a-call"])
def test_prepare_rejects_other_layouts(other, backend, executed_first, rng):
    """Also after a call passed the checks (later calls compare layout keys first)."""
    a = to_backend(random_array(rng, (3, 3), np.float64), backend)
    plan = gpu_tc.prepare("ij,jk->ik", a, a)
    if executed_first:
        plan.execute(a, a)
    with pytest.raises(gpu_tc.ShapeError, match=r"operand 1 .*'ij,jk->ik'"):
        plan.execute(a, other(a))
    with pytest.raises(gpu_tc.ShapeError, match=r"takes 2 operand\(s\), got 1"):
        plan.execute(a)


def test_prepare_converts_after_a_call_passed_the_checks(rng):
    """Operands that are not the plan's own kind of array (a list, big-endian data) are
    still converted after an earlier call skipped the checks' conversions."""
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    plan = gpu_tc.prepare("ij,jk->ik", a, b)
    np.testing.assert_allclose(plan.execute(a, b), a @ b)
    swapped = b.astype(b.dtype.newbyteorder(">"))
    np.testing.assert_allclose(plan.execute(a, swapped), a @ b)
    np.testing.assert_allclose(plan.execute(a.tolist(), b), a @ b)
    np.testing.assert_allclose(plan.execute(a, b), a @ b)
