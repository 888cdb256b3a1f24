"""A categorised corpus of einsum expressions, crossed with dtype and backend.

Each case is checked against gpu_tc.reference (values) and numpy.einsum (result dtype,
shape and kind), like opt_einsum's test_contract.py. The special call forms
(interleaved sublists, Python lists and scalars, mixed dtypes, ``out=``) follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from helpers import (
    BACKENDS,
    DTYPES,
    assert_close,
    check_einsum,
    check_result_type,
    random_array,
    reference_einsum,
    to_backend,
    to_numpy,
)

import gpu_tc


def extent(label: str) -> int:
    """Small extents, different for neighbouring letters so transposes show (2 to 6)."""
    return 2 + ord(label) % 5


def shapes_of(subscripts: str) -> tuple[tuple[int, ...], ...]:
    """Operand shapes from the per-label extents (expressions without '...')."""
    lhs = subscripts.split("->")[0]
    return tuple(tuple(extent(x) for x in term) for term in lhs.split(","))


def case(category: str, subscripts: str, *shapes: Sequence[int], name: str = "") -> Any:
    """One corpus entry; shapes default to :func:`shapes_of`."""
    given = tuple(tuple(s) for s in shapes) if shapes else shapes_of(subscripts)
    label = name or subscripts.replace("...", "~") or "<empty>"
    return pytest.param(subscripts, given, id=f"{category}:{label}")


# TCCG cases (expr_rowmajor of ../shared/bench/tccg.json, ids 1, 3, 6, 9, 13, 20, 31, 40)
# at small extents.
TCCG = [
    "adb,cd->cba",
    "aebd,ce->dcba",
    "dabfe,fc->edcba",
    "ae,dcbe->dcba",
    "dca,cbd->ba",
    "fbea,ecfd->dcba",
    "aged,cbfg->fedcba",
    "badg,cgfe->fedcba",
]

CORPUS = [
    # scalar-like
    case("scalar", "i,i"),
    case("scalar", "i,i->"),
    case("scalar", ",", (), ()),
    case("scalar", ",->", (), ()),
    case("scalar", "i,->i", (3,), ()),
    case("scalar", ",i->i", (), (4,)),
    case("scalar", "->", ()),
    case("scalar", "i->"),
    case("scalar", "ij,ij->"),
    case("scalar", "ij,ij"),
    case("scalar", "ij,ji"),
    # Hadamard-like
    case("hadamard", "i,i->i"),
    case("hadamard", "ij,ij->ij"),
    case("hadamard", "ij,ji->ij"),
    case("hadamard", "ij,ij->ji"),
    case("hadamard", "ijk,ijk->ijk"),
    case("hadamard", "ijk,kji->jik"),
    case("hadamard", "ij,ij,ij->ij"),
    # outer products
    case("outer", "i,j->ij"),
    case("outer", "i,j->ji"),
    case("outer", "i,j"),
    case("outer", "ij,k->ijk"),
    case("outer", "ij,k->kji"),
    case("outer", "ab,cd->cadb"),
    # GEMM-like
    case("gemm", "ij,jk->ik"),
    case("gemm", "ij,kj->ik"),
    case("gemm", "ji,jk->ik"),
    case("gemm", "ji,jk->ki"),
    case("gemm", "ji,kj->ki"),
    case("gemm", "ij,jk->ki"),
    case("gemm", "ij,j->i"),
    case("gemm", "i,ij->j"),
    case("gemm", "j,ij->i"),
    case("gemm", "abc,cd->abd"),
    case("gemm", "abc,bcd->ad"),
    case("gemm", "abc,cbd->da"),
    case("gemm", "ab,bcd->acd"),
    case("gemm", "abcd,dbea->ec"),
    # batched
    case("batched", "bij,bjk->bik"),
    case("batched", "ijb,jkb->ikb"),
    case("batched", "bij,bkj->bki"),
    case("batched", "ibj,jbk->kib"),
    case("batched", "abij,abjk->abik"),
    case("batched", "abij,bajk->ikba"),
    case("batched", "bi,bi->b"),
    case("batched", "ib,bj->bij"),
    # TCCG shapes
    *[case("tccg", expr) for expr in TCCG],
    # traces and diagonals
    case("trace", "ii", (4, 4)),
    case("trace", "ii->", (4, 4)),
    case("trace", "ii->i", (4, 4)),
    case("trace", "iii->i", (3, 3, 3)),
    case("trace", "iij->j", (3, 3, 4)),
    case("trace", "iij->ij", (3, 3, 4)),
    case("trace", "iji->j", (3, 4, 3)),
    case("trace", "ijji->", (2, 3, 3, 2)),
    case("trace", "ijji->ij", (2, 3, 3, 2)),
    case("trace", "ijij->ji", (2, 3, 2, 3)),
    case("trace", "...ii->...i", (2, 3, 4, 4)),
    case("trace", "i...i->...", (3, 2, 4, 3)),
    case("trace", "ii,i->i", (3, 3), (3,)),
    case("trace", "ij,jj->i", (2, 3), (3, 3)),
    case("trace", "ii,jj->ij", (2, 2), (3, 3)),
    case("trace", "ii,ij->j", (3, 3), (3, 4)),
    # labels summed out of one operand
    case("summed", "ij,jk->k"),
    case("summed", "ij,jk->i"),
    case("summed", "ij,kl->jl"),
    case("summed", "ijk->"),
    case("summed", "ijk->j"),
    case("summed", "ijk->ki"),
    case("summed", "abc,cd->d"),
    case("summed", "ij,j,k->i"),
    # implicit outputs
    case("implicit", "ij,jk"),
    case("implicit", "ba"),
    case("implicit", "ij"),
    case("implicit", "Ba,ab"),
    case("implicit", "aB,Ba"),
    case("implicit", "bA,Ab"),
    case("implicit", "ij,jk,kl"),
    case("implicit", "...ij,...jk", (2, 3, 4), (2, 4, 5)),
    # ellipsis broadcasting
    case("ellipsis", "...ij,...jk->...ik", (2, 3, 3, 4), (3, 4, 5), name="ranks-4-3"),
    case("ellipsis", "...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2), name="size1-broadcast"),
    case("ellipsis", "...ij,...jk->...ik", (3, 4), (2, 4, 5), name="ranks-2-3"),
    case("ellipsis", "...ij,...jk->ik...", (2, 3, 4), (1, 4, 5), name="out-last"),
    case("ellipsis", "ij...,jk...->ik...", (2, 3, 4), (3, 5, 1), name="at-end"),
    case("ellipsis", "...,...->...", (2, 1, 3), (4, 1), name="hadamard"),
    case("ellipsis", "...i->...", (2, 3, 4), name="row-sum"),
    case("ellipsis", "i...->...", (2, 3, 4), name="col-sum"),
    case("ellipsis", "...->...", (), name="0-d"),
    case("ellipsis", "a...,a->...", (3, 2, 4), (3,), name="mid"),
    case("ellipsis", "...ij->...ji", (2, 3, 4), name="batched-transpose"),
    case("ellipsis", "...ij,jk->...ik", (3, 4), (4, 5), name="empty-ellipsis"),
    # labelled size-1 axes broadcast like numpy
    case("broadcast", "ij,jk->ik", (2, 1), (3, 4), name="j-1-vs-3"),
    case("broadcast", "ij,ij->ij", (1, 3), (2, 1), name="hadamard-1s"),
    case("broadcast", "i,i", (1,), (3,), name="dot-1-vs-3"),
    case("broadcast", "bij,bjk->bik", (1, 2, 3), (4, 3, 5), name="batch-1-vs-4"),
    # N operands
    case("n-ary", "ab,bc,cd->ad"),
    case("n-ary", "ab,bc,cd,de->ae"),
    case("n-ary", "ij,jk,kl,li->"),
    case("n-ary", "a,b,c,d->abcd"),
    case("n-ary", "a,b,c,d,e->ecadb"),
    case("n-ary", "ab,bc,cd,de,ef,fa->"),
    case("n-ary", "ab,ab,ab->ab"),
    case("n-ary", "i,i,i->"),
    case("n-ary", "ij,j,jk,k->i"),
    case("n-ary", "abc,bd,ce,a->de"),
    case("n-ary", "ea,fb,abcd,gc,hd->efgh"),
    # size-1 axes
    case("size1", "ij,jk->ik", (2, 1), (1, 4), name="k-1"),
    case("size1", "bij,bjk->bik", (1, 1, 3), (1, 3, 1), name="all-1"),
    case("size1", "ijk->kji", (1, 1, 1), name="permute-1s"),
    case("size1", "ii->i", (1, 1), name="diag-1"),
    # zero-size axes
    case("zero", "ij,jk->ik", (0, 3), (3, 4), name="free-0"),
    case("zero", "ij,jk->ik", (2, 0), (0, 4), name="contracted-0"),
    case("zero", "ij,jk,kl->il", (2, 3), (3, 0), (0, 4), name="chain-contracted-0"),
    case("zero", "bij,bjk->bik", (0, 2, 3), (0, 3, 4), name="batch-0"),
    case("zero", "ij->", (0, 3), name="sum-0"),
    case("zero", "ij->ji", (0, 3), name="permute-0"),
    case("zero", "ii->i", (0, 0), name="diag-0"),
    case("zero", "i,i", (0,), (0,), name="dot-0"),
    case("zero", "i,j->ij", (3,), (0,), name="outer-0"),
    case("zero", "ij,j->i", (3, 0), (0,), name="gemv-0"),
    # 0-d operands
    case("0-d", ",ij->ij", (), (2, 3)),
    case("0-d", "ij,->ji", (2, 3), ()),
    case("0-d", ",,->", (), (), ()),
    case("0-d", ",ij,jk->ki", (), (2, 3), (3, 4)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("subscripts, shapes", CORPUS)
def test_corpus(subscripts, shapes, dtype, backend, rng):
    operands = [random_array(rng, shape, dtype) for shape in shapes]
    check_einsum(subscripts, *operands, backend=backend)


def test_handcomputed_values():
    """A few results written out by hand, independent of the reference kernel."""
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([[5.0, 6.0], [7.0, 8.0]])
    np.testing.assert_array_equal(gpu_tc.einsum("ij,jk->ik", a, b), [[19, 22], [43, 50]])
    np.testing.assert_array_equal(gpu_tc.einsum("ij,kj->ik", a, b), [[17, 23], [39, 53]])
    np.testing.assert_array_equal(gpu_tc.einsum("ji,jk->ik", a, b), [[26, 30], [38, 44]])
    np.testing.assert_array_equal(gpu_tc.einsum("ii->i", a), [1, 4])
    assert gpu_tc.einsum("ii", a) == 5
    assert gpu_tc.einsum("ij->", a) == 10
    np.testing.assert_array_equal(gpu_tc.einsum("ba", a), [[1, 3], [2, 4]])
    np.testing.assert_array_equal(gpu_tc.einsum("ij,jk->k", a, b), [4 * 5 + 6 * 7, 4 * 6 + 6 * 8])
    np.testing.assert_array_equal(
        gpu_tc.einsum("ij,jk->ik", np.zeros((2, 0)), np.zeros((0, 3))), np.zeros((2, 3))
    )
    z = np.array([1 + 1j, 2 - 1j])
    assert gpu_tc.einsum("i,i", z, z) == (1 + 1j) ** 2 + (2 - 1j) ** 2


# --- the interleaved (sublist) form -------------------------------------------------

SUBLIST_CASES = [
    pytest.param(((2, 3), [0, 1], (3, 4), [1, 2], [0, 2]), id="gemm"),
    pytest.param(((2, 3), [0, 1], (3, 4), [1, 2]), id="gemm-implicit"),
    pytest.param(((3, 3), [0, 0]), id="trace"),
    pytest.param(((3, 3), [0, 0], [0]), id="diagonal"),
    pytest.param(((2, 3), [1, 0], [0, 1]), id="transpose"),
    pytest.param(((5, 2, 3), [..., 0, 1], (3, 4), [1, 2], [..., 0, 2]), id="ellipsis"),
    pytest.param(((2, 3), [30, 2], (3, 4), [2, 51], [51, 30]), id="high-labels"),
    pytest.param(((2,), [0], (3,), [1], (4,), [2], [2, 0, 1]), id="three-operands"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", SUBLIST_CASES)
def test_interleaved_form(spec, dtype, backend, rng):
    args = list(spec)
    host = [random_array(rng, x, dtype) if isinstance(x, tuple) else x for x in args]
    expected_numpy = np.einsum(*host)
    subscripts, operands = gpu_tc.expression.from_interleaved(host)
    exact, scale = reference_einsum(subscripts, *operands)
    got = gpu_tc.einsum(*[to_backend(x, backend) if isinstance(x, np.ndarray) else x for x in host])
    check_result_type(got, expected_numpy, backend)
    assert_close(got, exact, dtype, scale)
    assert_close(got, expected_numpy, dtype, scale)


# --- Python lists and scalars as operands -------------------------------------------


@pytest.mark.parametrize(
    "subscripts, operands",
    [
        pytest.param("i,i", ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]), id="float-lists"),
        pytest.param("ij,jk", ([[1.0, 2.0], [3.0, 4.0]], [[1.0], [2.0]]), id="nested-lists"),
        pytest.param(",", (2.0, 3.5), id="float-scalars"),
        pytest.param(",i->i", (2, [1.5, -1.0]), id="int-scalar-float-list"),
        pytest.param("i,i", ([1 + 2j, 3], [2, 1j]), id="complex-lists"),
        pytest.param("i,i->i", ([1, 2], [0.5, 0.25]), id="int-list-float-list"),
        pytest.param(",->", (1j, 2.0), id="complex-scalar"),
        pytest.param("ii", ([[1.0, 9.0], [9.0, 2.0]],), id="trace-of-list"),
    ],
)
def test_lists_and_scalars(subscripts, operands):
    check_einsum(subscripts, *operands)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_with_array(dtype, backend, rng):
    a = random_array(rng, (3, 4), dtype)
    check_einsum(",ij->ji", 2.5, a, backend=backend)


# --- mixed dtypes --------------------------------------------------------------------

MIXED = [
    ("float32", "float64"),
    ("float64", "float32"),
    ("float32", "complex64"),
    ("float32", "complex128"),
    ("float64", "complex64"),
    ("complex64", "complex128"),
    ("int64", "float32"),
    ("int32", "float64"),
    ("int8", "float32"),
    ("int16", "complex64"),
    ("uint8", "float64"),
    ("bool", "float32"),
    ("float32", "int64"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("subscripts", ["ij,jk->ik", "ij,ij->ji", "ii,i->"])
@pytest.mark.parametrize("dtypes", [pytest.param(m, id="+".join(m)) for m in MIXED])
def test_mixed_dtypes(dtypes, subscripts, backend, rng):
    shapes = {
        "ij,jk->ik": [(3, 4), (4, 5)],
        "ij,ij->ji": [(3, 4), (3, 4)],
        "ii,i->": [(3, 3), (3,)],
    }
    a, b = (random_array(rng, s, d) for s, d in zip(shapes[subscripts], dtypes))
    got = check_einsum(subscripts, a, b, backend=backend)
    assert got.dtype == np.result_type(a, b)


# --- out= ----------------------------------------------------------------------------


def _out_buffer(kind: str, shape: tuple[int, ...], dtype: Any, backend: str) -> tuple[Any, Any]:
    """An ``out`` array of ``shape`` (and its base) laid out as ``kind`` says."""
    if kind == "C":
        base = to_backend(np.full(shape, np.nan, dtype), backend)
        return base, base
    if kind == "F":
        base = to_backend(np.asfortranarray(np.full(shape, np.nan, dtype)), backend)
        return base, base
    if kind == "T":
        base = to_backend(np.full(shape[::-1], np.nan, dtype), backend)
        return base.T, base
    big = to_backend(np.full(tuple(2 * n + 1 for n in shape), np.nan, dtype), backend)
    return big[tuple(slice(1, None, 2) for _ in shape)], big


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["C", "F", "T", "strided"])
@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        pytest.param("ij,jk->ik", [(3, 4), (4, 5)], id="gemm"),
        pytest.param("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], id="batched"),
        pytest.param("ij->ji", [(3, 4)], id="permute"),
        pytest.param("ijk->ki", [(3, 4, 5)], id="reduce"),
        pytest.param("ii->i", [(4, 4)], id="diagonal"),
        pytest.param("ij,jk,kl->li", [(2, 3), (3, 4), (4, 5)], id="chain"),
        pytest.param("ij,jk->ik", [(2, 0), (0, 3)], id="contracted-0"),
    ],
)
def test_out(subscripts, shapes, kind, dtype, backend, rng):
    operands = [random_array(rng, s, dtype) for s in shapes]
    shape = np.einsum(subscripts, *operands).shape
    out, base = _out_buffer(kind, shape, dtype, backend)
    got = check_einsum(subscripts, *operands, backend=backend, out=out)
    assert got is out  # a view of base: the values checked above live in base
    if kind == "strided":  # the elements between the view's must be untouched
        host = to_numpy(base)
        mask = np.ones(host.shape, bool)
        mask[tuple(slice(1, None, 2) for _ in shape)] = False
        assert np.isnan(host[mask]).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_out_0d(dtype, backend, rng):
    a, b = random_array(rng, (4,), dtype), random_array(rng, (4,), dtype)
    out = to_backend(np.zeros((), dtype), backend)
    got = check_einsum("i,i->", a, b, backend=backend, out=out)
    assert got.shape == ()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "subscripts, which",
    [
        pytest.param("ij,jk->ik", 0, id="gemm-out-is-a"),
        pytest.param("ij,jk->ik", 1, id="gemm-out-is-b"),
        pytest.param("ij,jk->ki", 0, id="gemm-transposed-out-is-a"),
        pytest.param("ij->ji", 0, id="transpose-in-place"),
        pytest.param("ij,ij->ij", 1, id="hadamard-out-is-b"),
        pytest.param("ij,jk,kl->il", 2, id="chain-out-is-last"),
    ],
)
def test_out_overlaps_input(subscripts, which, dtype, backend, rng):
    n = 5
    host = [random_array(rng, (n, n), dtype) for _ in subscripts.split("->")[0].split(",")]
    exact, scale = reference_einsum(subscripts, *host)
    device = [to_backend(x, backend) for x in host]
    got = gpu_tc.einsum(subscripts, *device, out=device[which])
    assert got is device[which]
    assert_close(got, exact, dtype, scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_partially_overlaps_input(backend, rng):
    """out is a shifted window of the buffer an operand is also a window of."""
    base = to_backend(random_array(rng, (6, 6), np.float64), backend)
    a = base[:4, :4]
    b = to_backend(random_array(rng, (4, 4), np.float64), backend)
    exact, scale = reference_einsum("ij,jk->ik", to_numpy(a), to_numpy(b))
    out = base[1:5, 1:5]
    got = gpu_tc.einsum("ij,jk->ik", a, b, out=out)
    assert got is out
    assert_close(got, exact, np.float64, scale)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "subscripts, window",
    [
        pytest.param("ij,jk->ik", (slice(None, None, -1),), id="gemm-rows-reversed"),
        pytest.param("ij->ji", (slice(None, None, -1),), id="transpose-rows-reversed"),
        pytest.param("ij,ij->ij", (slice(None), slice(None, None, -1)),
                     id="hadamard-cols-reversed"),
        pytest.param("ij->i", (slice(None, None, -1), 0), id="row-sums-into-a-reversed-column"),
    ],
)
def test_out_overlaps_input_backwards(subscripts, window, backend, rng):
    """out is a window of an operand that runs backwards (negative strides): computed
    aside, then written into it, as numpy.einsum does."""
    host = [random_array(rng, (4, 4), np.float64) for _ in subscripts.split("->")[0].split(",")]
    exact, scale = reference_einsum(subscripts, *host)
    original = host[0].copy()
    device = [to_backend(x, backend) for x in host]
    out = device[0][window]
    for _ in range(2):  # cold, then warm
        device[0][...] = to_backend(original, backend)
        got = gpu_tc.einsum(subscripts, *device, out=out)
        assert got is out
        assert_close(got, exact, np.float64, scale)


# --- results are new arrays; wide expressions ---------------------------------------


@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        pytest.param("ij,jk->ik", [(3, 4), (4, 5)], id="gemm"),
        pytest.param("i,j->ij", [(3,), (4,)], id="outer"),
        pytest.param(",ij->ij", [(), (3, 4)], id="scalar-times"),
        pytest.param("ij,ij->ij", [(3, 4), (3, 4)], id="hadamard"),
        pytest.param("ij->i", [(3, 4)], id="row-sums"),
    ],
)
def test_result_is_a_new_array(subscripts, shapes, rng):
    """Writing into a result never changes an operand, on cold and warm calls."""
    operands = [rng.standard_normal(s) for s in shapes]
    saved = [x.copy() for x in operands]
    for _ in range(2):
        got = gpu_tc.einsum(subscripts, *operands)
        assert not any(np.shares_memory(got, x) for x in operands)
        got[...] = 123.0
        for x, before in zip(operands, saved):
            np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize(
    "subscripts, shape",
    [
        pytest.param("ij->ij", (3, 4), id="identity"),
        pytest.param("ij->ji", (3, 4), id="transpose"),
        pytest.param("ii->i", (3, 3), id="diagonal"),
        pytest.param("jii->ij", (2, 3, 3), id="diagonal-reordered"),
        pytest.param("...ii->...i", (2, 3, 3), id="diagonal-ellipsis"),
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int8, np.bool_])
def test_one_operand_reordered_is_a_view_as_in_numpy(subscripts, shape, dtype):
    """numpy.einsum returns a writable view of the operand when the result only reorders
    or diagonalises it (same base, same values), whatever the dtype (float16 included,
    though it computes in float32); so does gpu_tc, cold and warm."""
    for _ in range(2):
        a = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
        got, expected = gpu_tc.einsum(subscripts, a), np.einsum(subscripts, a)
        owner = a if a.base is None else a.base
        assert got.base is owner and expected.base is owner
        np.testing.assert_array_equal(got, expected)
        assert got.strides == expected.strides
        got[...] = 0  # written through, as numpy's view is
        np.testing.assert_array_equal(np.einsum(subscripts, a), 0)


def test_one_operand_reorder_honours_dtype_and_order(rng):
    """dtype= and order= are honoured: a new array of that dtype and layout. (numpy
    ignores both here and returns a view in the operand's dtype, against its docs.)"""
    a = rng.standard_normal((3, 4))
    for kwargs in ({"dtype": np.complex128}, {"order": "C"}, {"order": "F"}):
        got = gpu_tc.einsum("ij->ji", a, **kwargs)
        assert not np.shares_memory(got, a)
        assert got.dtype == kwargs.get("dtype", a.dtype)
        assert got.flags[f"{kwargs.get('order', 'C')}_CONTIGUOUS"]
        np.testing.assert_array_equal(got, a.T)
    read_only = a.copy()
    read_only.flags.writeable = False
    view = gpu_tc.einsum("ij->ji", read_only)
    assert np.shares_memory(view, read_only) and not view.flags.writeable


def test_many_labels_and_operands(rng):
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    a = rng.standard_normal([2] * 16)
    check_einsum(letters[:16] + "->" + letters[:16][::-1], a)
    check_einsum(letters[:16] + "," + letters[:16][::-1] + "->", a, a)
    chain = [
        rng.standard_normal((2, 3)) if i % 2 else rng.standard_normal((3, 2)) for i in range(12)
    ]
    terms = ",".join(letters[i] + letters[i + 1] for i in range(12))
    check_einsum(terms + "->a" + letters[12], *chain)
    # 26 labels through '...' plus 26 letters: more than 52 distinct labels in one call
    b = rng.standard_normal([1] * 26 + [2, 1])
    c = rng.standard_normal([1] * 26 + [2, 2])
    check_einsum(letters[:26] + "...," + letters[26:] + "...->...", b, c)
