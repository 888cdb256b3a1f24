"""numpy.einsum's and numpy.trace's full signatures on the CPU backend: every keyword,
every dtype numpy computes, judged against numpy itself (same value, same dtype, and
an error of numpy's class where numpy refuses)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import gpu_tc

INTEGER_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                  np.uint64]
NUMERIC_DTYPES = [np.bool_, *INTEGER_DTYPES, np.float16, np.float32, np.float64,
                  np.complex64, np.complex128]


def _values(rng, shape, dtype):
    """Small values of ``dtype`` (exact in every dtype, so sums compare exactly)."""
    x = rng.integers(0, 4, size=shape)
    if np.dtype(dtype).kind == "c":
        return (x + 1j * rng.integers(0, 4, size=shape)).astype(dtype)
    return x.astype(dtype)


def _same(got, expected, exact=True):
    """Same dtype, shape and values (close for float16, which sums in float32)."""
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    assert np.shape(got) == np.shape(expected)
    if exact:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(expected, np.float64),
                                   rtol=2e-3)


def _outcome(call):
    """(result, None) or (None, the exception)."""
    try:
        return call(), None
    except Exception as err:  # noqa: BLE001 - compared with numpy's outcome
        return None, err


def _agree(ours, numpys):
    """gpu_tc succeeds where numpy does, with its value, and fails where numpy fails, with
    an instance of the class numpy raised (or of TypeError/ValueError it derives from)."""
    (got, our_error), (expected, numpy_error) = _outcome(ours), _outcome(numpys)
    if numpy_error is not None:
        assert our_error is not None, f"numpy raised {numpy_error!r}; gpu_tc returned {got!r}"
        base = TypeError if isinstance(numpy_error, TypeError) else type(numpy_error)
        assert isinstance(our_error, base), (our_error, numpy_error)
        return
    assert our_error is None, f"numpy returned {expected!r}; gpu_tc raised {our_error!r}"
    _same(got, expected, exact=np.asarray(expected).dtype != np.float16)


# --- integers, bool, float16: numpy's result dtype and exact arithmetic ---------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ij,ij->ij", [(3, 4), (3, 4)]),
        ("ij->", [(3, 4)]),
        ("ii->i", [(4, 4)]),
        ("ij->ji", [(3, 4)]),
        ("i,j,k->ijk", [(2,), (3,), (4,)]),
        ("abc,cd,db->a", [(2, 3, 4), (4, 5), (5, 3)]),
    ],
)
def test_every_numeric_dtype_as_numpy(rng, dtype, subscripts, shapes):
    operands = [_values(rng, s, dtype) for s in shapes]
    got = gpu_tc.einsum(subscripts, *operands)
    expected = np.einsum(subscripts, *operands)
    _same(got, expected, exact=np.dtype(dtype) != np.float16)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_integers_are_exact_past_2_to_the_53(dtype):
    """No float detour: 2**62 + 1 survives a contraction, a sum and a trace."""
    big = np.array([[2**62 + 1, 3], [5, 2**61 + 7]], dtype=dtype)
    one = np.eye(2, dtype=dtype)
    _same(gpu_tc.einsum("ij,jk->ik", big, one), big)
    _same(gpu_tc.einsum("ij->", big[:1]), np.einsum("ij->", big[:1]))
    _same(gpu_tc.trace(big), np.trace(big))
    assert int(gpu_tc.einsum("ij,jk->ik", big, one)[0, 0]) == 2**62 + 1


def test_integer_overflow_wraps_as_numpy(rng):
    """Fixed-width integers wrap around exactly as numpy's do, whatever the order of sums."""
    a = rng.integers(-128, 127, size=(6, 40)).astype(np.int8)
    b = rng.integers(-128, 127, size=(40, 7)).astype(np.int8)
    _same(gpu_tc.einsum("ij,jk->ik", a, b), np.einsum("ij,jk->ik", a, b))
    u = np.full((3, 300), 255, np.uint8)
    _same(gpu_tc.einsum("ij->i", u), np.einsum("ij->i", u))


def test_bool_is_or_of_ands(rng):
    a, b = rng.random((5, 6)) < 0.2, rng.random((6, 7)) < 0.2
    _same(gpu_tc.einsum("ij,jk->ik", a, b), np.einsum("ij,jk->ik", a, b))
    _same(gpu_tc.einsum("ij->i", a), np.einsum("ij->i", a))
    _same(gpu_tc.einsum("i,i", a[0], a[1]), np.einsum("i,i", a[0], a[1]))


@pytest.mark.parametrize(
    "dtypes",
    [(np.bool_, np.int8), (np.int8, np.uint8), (np.int32, np.float32), (np.uint64, np.int64),
     (np.float16, np.float32), (np.int16, np.complex64), (np.bool_, np.float16)],
    ids=lambda ds: "-".join(np.dtype(d).name for d in ds),
)
def test_mixed_dtypes_promote_as_numpy(rng, dtypes):
    a, b = (_values(rng, s, d) for s, d in zip([(3, 4), (4, 2)], dtypes))
    _agree(lambda: gpu_tc.einsum("ij,jk", a, b), lambda: np.einsum("ij,jk", a, b))


def test_float16_accumulates_in_float32(rng):
    """numpy sums float16 in float32 and returns float16; so does gpu_tc. 2049 ones sum
    to 2049 (float16 steps by 2 there, so a float16 accumulator would stop at 2048)."""
    ones = np.ones(2049, np.float16)
    got = gpu_tc.einsum("i,i", ones, ones)
    assert got.dtype == np.float16
    assert got == np.float16(np.float32(2049))
    a = rng.standard_normal((8, 300)).astype(np.float16)
    b = rng.standard_normal((300, 5)).astype(np.float16)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    _same(gpu_tc.einsum("ij,jk", a, b), exact, exact=False)


def test_float16_overflow_is_inf_without_a_warning():
    """numpy.einsum's float16 loops overflow to inf silently; so does gpu_tc's cast back."""
    tens = np.full(1000, 10, np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = gpu_tc.einsum("i,i", tens, tens)
        out = np.zeros((), np.float16)
        gpu_tc.einsum("i,i", tens.astype(np.float32), tens.astype(np.float32), out=out,
                      casting="unsafe")
    assert got.dtype == np.float16 and np.isinf(got) and np.isinf(out)
    assert np.isinf(np.einsum("i,i", tens, tens))


def test_non_native_byte_order_operands(rng):
    a = rng.standard_normal((3, 4)).astype(">f8")
    b = rng.standard_normal((4, 2)).astype(">f4")
    _same(gpu_tc.einsum("ij,jk", a, b), np.einsum("ij,jk", a, b), exact=False)


# --- dtype= and casting= ---------------------------------------------------------------


@pytest.mark.parametrize("casting", ["no", "equiv", "safe", "same_kind", "unsafe"])
@pytest.mark.parametrize(
    "operand_dtype, dtype",
    list(itertools.product([np.int32, np.float32, np.float64, np.complex64],
                           [None, np.int64, np.float32, np.float64, np.complex128])),
    ids=lambda d: "none" if d is None else np.dtype(d).name,
)
def test_dtype_and_casting_as_numpy(rng, operand_dtype, dtype, casting):
    a, b = _values(rng, (3, 4), operand_dtype), _values(rng, (4, 2), operand_dtype)
    kwargs = {"dtype": dtype, "casting": casting}
    _agree(lambda: gpu_tc.einsum("ij,jk->ik", a, b, **kwargs),
           lambda: np.einsum("ij,jk->ik", a, b, **kwargs))


@pytest.mark.parametrize("casting", ["no", "equiv", "safe", "same_kind", "unsafe"])
@pytest.mark.parametrize(
    "operand_dtype, out_dtype",
    [(np.float32, np.float64), (np.float64, np.complex128), (np.int32, np.float64),
     (np.float64, np.float32), (np.float64, np.int64), (np.complex128, np.float64),
     (np.int8, np.int64), (np.bool_, np.int32), (np.float16, np.float64)],
    ids=lambda d: np.dtype(d).name,
)
def test_out_of_another_dtype_as_numpy(rng, operand_dtype, out_dtype, casting):
    a, b = _values(rng, (3, 4), operand_dtype), _values(rng, (4, 2), operand_dtype)
    ours, theirs = np.full((3, 2), 9, out_dtype), np.full((3, 2), 9, out_dtype)
    (_, our_error), (_, numpy_error) = (
        _outcome(lambda: gpu_tc.einsum("ij,jk->ik", a, b, out=ours, casting=casting)),
        _outcome(lambda: np.einsum("ij,jk->ik", a, b, out=theirs, casting=casting)),
    )
    assert (our_error is None) == (numpy_error is None), (our_error, numpy_error)
    if numpy_error is None:
        np.testing.assert_array_equal(ours, theirs)
    else:
        assert isinstance(our_error, TypeError)
        np.testing.assert_array_equal(ours, 9)  # untouched


def test_an_integer_out_takes_the_finished_float_sum_cast_once(rng):
    """numpy.einsum casts its buffered partial sums into an integer ``out`` as it goes
    (here it wrote [478, 3872] for sums of 484.29 and 3879.16, NumPy 2.4); gpu_tc casts the
    finished sum, truncated as numpy's unsafe cast of the float result."""
    x = (np.random.default_rng(0).standard_normal((2, 64, 32)) * 3).astype(np.float16)
    y = np.random.default_rng(0).standard_normal((32, 64)) * 3
    ours = np.zeros(2, np.int32)
    gpu_tc.einsum("dac,cb->d", x, y, out=ours, casting="unsafe")
    exact = np.einsum("dac,cb->d", x.astype(np.float64), y)
    np.testing.assert_array_equal(ours, exact.astype(np.int32))


@pytest.mark.parametrize("casting", ["no", "equiv", "safe", "same_kind", "unsafe"])
@pytest.mark.parametrize(
    "out_dtype, dtype",
    [(np.float64, np.int64), (np.float16, np.int64), (np.int64, np.float64),
     (np.float32, np.float64), (np.float64, np.float32), (np.int8, np.bool_),
     (np.complex64, np.float64), (np.int64, np.int64)],
    ids=lambda d: np.dtype(d).name,
)
def test_out_and_dtype_together_as_numpy(casting, out_dtype, dtype):
    """With both, numpy also requires ``out``'s dtype to cast into ``dtype``."""
    a = np.arange(1, 5, dtype=np.int64).reshape(2, 2)
    ours, theirs = np.full(2, 9, out_dtype), np.full(2, 9, out_dtype)
    kwargs = {"dtype": dtype, "casting": casting}
    (_, our_error), (_, numpy_error) = (
        _outcome(lambda: gpu_tc.einsum("ij->i", a, out=ours, **kwargs)),
        _outcome(lambda: np.einsum("ij->i", a, out=theirs, **kwargs)),
    )
    assert (our_error is None) == (numpy_error is None), (our_error, numpy_error)
    if numpy_error is None:
        np.testing.assert_array_equal(ours, theirs)
    else:
        assert isinstance(our_error, TypeError)
        np.testing.assert_array_equal(ours, 9)


def test_out_of_another_dtype_in_a_strided_window(rng):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5))
    base = np.zeros((6, 10), np.complex128)
    window = base[::2, ::2]
    assert gpu_tc.einsum("ij,jk->ik", a, b, out=window) is window
    np.testing.assert_allclose(window, a.astype(np.float64) @ b)
    assert not base[1::2].any() and not base[:, 1::2].any()


def test_object_operands_with_a_dtype_as_numpy():
    """numpy casts an object array into ``dtype`` under casting='unsafe'; so does gpu_tc
    (without a dtype, object arrays are refused: see test_errors)."""
    a = np.arange(9, dtype=object)
    for dtype in (np.int8, np.int64, np.float64, np.complex64):
        _same(gpu_tc.einsum("i->", a, dtype=dtype, casting="unsafe"),
              np.einsum("i->", a, dtype=dtype, casting="unsafe"))
    _same(gpu_tc.einsum(a, [0], [], dtype=np.float32, casting="unsafe"), np.float32(36))


# --- order= ---------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["C", "F", "A", "K", "c", "f", "a", "k", None])
@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize(
    "subscripts, shapes",
    [("...ft,mf->...mt", [(2, 3, 5), (4, 3)]), ("ij,jk->ki", [(3, 4), (4, 5)]),
     ("ijk->kij", [(2, 3, 4)]), ("ij,ij->ij", [(3, 4), (3, 4)])],
)
def test_order_sets_the_layout_of_a_new_result(rng, order, fortran, subscripts, shapes):
    operands = [rng.standard_normal(s) for s in shapes]
    if fortran:
        operands = [np.asfortranarray(x) for x in operands]
    got = gpu_tc.einsum(subscripts, *operands, order=order)
    expected = np.einsum(subscripts, *operands, order=order)
    np.testing.assert_allclose(got, expected)
    wanted = (order or "K").upper()
    if wanted == "A":
        wanted = "F" if fortran else "C"
    if wanted == "C":
        assert got.flags.c_contiguous
    if wanted == "F":
        assert got.flags.f_contiguous


# --- optimize= ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "optimize",
    [False, True, "greedy", "optimal", "dp", "branch-2", ("greedy", 10**6), ("optimal", 50),
     ["einsum_path", (0, 1), (0, 1), (0, 1)], ["einsum_path", (2, 3), (0, 2), (0, 1)],
     ["einsum_path", (0, 1, 2, 3)], ["einsum_path", (3,), (0, 2), (0, 1, 2)],
     ("einsum_path", (1, 3), (1, 2), (0, 1))],
    ids=str,
)
def test_optimize_fixes_the_pairwise_order(rng, optimize):
    shapes = [(4, 5), (5, 6), (6, 3), (3, 7)]
    operands = [rng.standard_normal(s) for s in shapes]
    expected = np.einsum("ab,bc,cd,de->ae", *operands)
    got = gpu_tc.einsum("ab,bc,cd,de->ae", *operands, optimize=optimize)
    np.testing.assert_allclose(got, expected)
    plan = gpu_tc.prepare("ab,bc,cd,de->ae", *operands, optimize=optimize)
    assert plan.route.count("+") == 2  # three pairwise contractions, whatever the path


def test_numpys_own_einsum_path_is_followed(rng):
    operands = [rng.standard_normal(s) for s in [(3, 8), (8, 2), (2, 9), (9, 3)]]
    path, _ = np.einsum_path("ij,jk,kl,lm->im", *operands, optimize="optimal")
    got = gpu_tc.einsum("ij,jk,kl,lm->im", *operands, optimize=path)
    np.testing.assert_allclose(got, np.einsum("ij,jk,kl,lm->im", *operands))


def test_path_names_are_looked_up_only_when_a_search_runs(rng):
    """As numpy: one or two operands need no search, so any name passes; with three an
    unknown name is a KeyError (numpy's class)."""
    a = rng.standard_normal((3, 3))
    np.testing.assert_allclose(gpu_tc.einsum("ij,jk", a, a, optimize="bogus"), a @ a)
    with pytest.raises(KeyError, match="Path name 'bogus' not found"):
        gpu_tc.einsum("ij,jk,kl", a, a, a, optimize="bogus")
    with pytest.raises(KeyError):
        np.einsum("ij,jk,kl", a, a, a, optimize="bogus")


def test_bytes_subscripts_as_numpy(rng):
    a = rng.standard_normal((3, 3))
    np.testing.assert_allclose(gpu_tc.einsum(b"ij,jk", a, a), np.einsum(b"ij,jk", a, a))


def test_a_path_for_one_operand_and_an_empty_path():
    a = np.arange(9.0).reshape(3, 3)
    assert gpu_tc.einsum("ii", a, optimize=["einsum_path", (0,)]) == 12.0
    assert gpu_tc.einsum("ii", a, optimize=["einsum_path"]) == 12.0
    with pytest.raises(RuntimeError, match="2 more operands"):
        gpu_tc.einsum("a,a,a->a", np.ones(2), np.ones(2), np.ones(2), optimize=["einsum_path"])


# --- sublists ---------------------------------------------------------------------------


def test_sublists_of_numpy_integers_and_arrays(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    expected = np.einsum(a, [0, 1], b, [1, 2], [0, 2])
    for labels in ([np.int64(0), np.int32(1)], np.array([0, 1]), (np.uint8(0), 1)):
        got = gpu_tc.einsum(a, labels, b, [1, 2], np.array([0, 2]))
        np.testing.assert_allclose(got, expected)
    c = rng.standard_normal((5, 2, 2))
    np.testing.assert_allclose(gpu_tc.einsum(c, [Ellipsis, np.int8(0), 0], [Ellipsis]),
                               np.einsum(c, [Ellipsis, 0, 0], [Ellipsis]))


@pytest.mark.parametrize("subscripts", ["ij, jk", " ij,jk -> ik ", "...ij, ...jk->...ik"])
def test_spaces_around_labels_as_numpy(rng, subscripts):
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    if "..." not in subscripts:
        a, b = a[0], b[0]
    np.testing.assert_allclose(gpu_tc.einsum(subscripts, a, b), np.einsum(subscripts, a, b))


@pytest.mark.parametrize("subscripts", [". ..ij,ij", "ij-> ..", "i\tj", "ij->i j>"])
def test_subscripts_numpy_refuses(subscripts):
    a = np.ones((2, 2))
    terms = subscripts.split("->")[0].count(",") + 1
    _agree(lambda: gpu_tc.einsum(subscripts, *[a] * terms),
           lambda: np.einsum(subscripts, *[a] * terms))


# --- trace ----------------------------------------------------------------------------


@pytest.mark.parametrize("offset", range(-5, 6))
@pytest.mark.parametrize(
    "shape, axis1, axis2",
    [((4, 4), 0, 1), ((3, 5), 0, 1), ((5, 3), 1, 0), ((2, 3, 4), 0, 2), ((2, 3, 4), 2, 1),
     ((3, 2, 3, 2), -1, 1), ((0, 3), 0, 1)],
)
def test_trace_offsets_as_numpy(rng, offset, shape, axis1, axis2):
    a = rng.standard_normal(shape)
    _same(gpu_tc.trace(a, offset, axis1, axis2), np.trace(a, offset, axis1, axis2), exact=False)
    keywords = {"offset": offset, "axis1": axis1, "axis2": axis2}
    _same(gpu_tc.trace(a, **keywords), np.trace(a, **keywords), exact=False)


def test_trace_second_positional_argument_is_the_offset():
    """gpu_tc.trace(a, 1, 0) is numpy.trace(a, offset=1, axis1=0): 6.0, not 12.0."""
    a = np.arange(9.0).reshape(3, 3)
    assert gpu_tc.trace(a, 1, 0) == np.trace(a, 1, 0) == 6.0


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("result_dtype", [None, np.int64, np.float32, np.complex128])
def test_trace_dtypes_as_numpy(rng, dtype, result_dtype):
    a = _values(rng, (4, 5, 4), dtype)
    _agree(lambda: gpu_tc.trace(a, 1, 0, 2, dtype=result_dtype),
           lambda: np.trace(a, 1, 0, 2, dtype=result_dtype))


@pytest.mark.parametrize(
    "dtype, out_dtype",
    [(np.float64, np.float32), (np.int32, np.float64), (np.bool_, np.int8),
     (np.float64, np.int64), (np.complex64, np.float64)],
    ids=lambda d: np.dtype(d).name,
)
def test_trace_out_as_numpy(rng, dtype, out_dtype):
    a = _values(rng, (3, 3, 2), dtype)
    ours, theirs = np.zeros(2, out_dtype), np.zeros(2, out_dtype)
    (_, our_error), (_, numpy_error) = (
        _outcome(lambda: gpu_tc.trace(a, out=ours)), _outcome(lambda: np.trace(a, out=theirs))
    )
    assert (our_error is None) == (numpy_error is None), (our_error, numpy_error)
    if numpy_error is None:
        np.testing.assert_array_equal(ours, theirs)
    else:
        assert isinstance(our_error, TypeError)
