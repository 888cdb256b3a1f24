"""gpu_tc.tensordot and gpu_tc.transpose against numpy.tensordot and numpy.transpose."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_tc
from gpu_tc import ShapeError, numpy_compat

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
RTOL = {np.float32: 1e-5, np.complex64: 1e-5, np.float64: 1e-12, np.complex128: 1e-12}


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@pytest.mark.parametrize(
    "shape_a, shape_b, axes",
    [
        ((2, 3, 4), (3, 4, 5), 2),
        ((2, 3), (3, 4), 1),
        ((2, 3), (4, 5), 0),
        ((3,), (3,), 1),
        ((2, 3, 4), (4, 3, 5), ([1, 2], [1, 0])),
        ((2, 3, 4), (4, 3, 5), ((2, 1), (0, 1))),
        ((2, 3, 4), (4, 3, 5), (2, 0)),
        ((2, 3, 4), (4, 3, 5), ([-1, -2], [0, -2])),
        ((5, 2, 3), (3, 6, 5), ([0, 2], [2, 0])),
        ((2, 3), (3, 2), ([], [])),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_tensordot_matches_numpy(rng, shape_a, shape_b, axes, dtype):
    a, b = _random(rng, shape_a, dtype), _random(rng, shape_b, dtype)
    got = gpu_tc.tensordot(a, b, axes)
    expected = np.tensordot(a, b, axes)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=RTOL[dtype], atol=RTOL[dtype] * 10)


def test_tensordot_default_axes_is_two(rng):
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 4, 5))
    np.testing.assert_allclose(gpu_tc.tensordot(a, b), np.tensordot(a, b), rtol=1e-12)


def test_tensordot_mixed_dtypes_promote_like_numpy(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 2))
    got = gpu_tc.tensordot(a, b, 1)
    assert got.dtype == np.tensordot(a, b, 1).dtype == np.float64


def test_tensordot_of_scalars():
    assert gpu_tc.tensordot(np.float64(2.0), np.float64(3.0), 0) == 6.0


@pytest.mark.parametrize(
    "axes, builtin, match",
    [
        (([0], [0]), ValueError, "differ"),
        (([1, 2], [0]), ValueError, "axes\\[0\\] has 2 axes but axes\\[1\\] has 1"),
        (([3], [0]), IndexError, "out of range"),
        (([1, 1], [0, 1]), ValueError, "repeats an axis"),
        (4, IndexError, "axes=4 is more than min\\(rank a, rank b\\) = 3"),
        ((1, 2, 3), ValueError, "int or a pair"),
        ("ab", TypeError, "axes\\[0\\] must be an int"),
        (([0.5], [0]), TypeError, "int or a sequence of ints, got \\[0.5\\]"),
        ((1.0, 0), TypeError, "axes\\[0\\] must be an int"),
        (1.0, TypeError, "int or a pair of axis sequences, got 1.0"),
        (None, TypeError, "int or a pair of axis sequences, got None"),
    ],
)
def test_tensordot_bad_axes_raise_what_numpy_raises(axes, builtin, match):
    a, b = np.ones((2, 3, 4)), np.ones((4, 3, 5))
    with pytest.raises(builtin):
        np.tensordot(a, b, axes)
    with pytest.raises(ShapeError, match=match) as info:
        gpu_tc.tensordot(a, b, axes)
    assert isinstance(info.value, builtin)


def test_tensordot_refuses_a_negative_count():
    """numpy.tensordot(a, b, -1) returns an outer product (range(-1) is empty), which
    its documentation does not describe; gpu_tc refuses it."""
    with pytest.raises(ShapeError, match="axes=-1 is negative"):
        gpu_tc.tensordot(np.ones((2, 3)), np.ones((3, 4)), -1)


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((2, 3, 4), None),
        ((2, 3, 4), (1, 2, 0)),
        ((2, 3, 4), [2, 0, 1]),
        ((2, 3, 4), (-1, 0, -2)),
        ((5,), None),
        ((), None),
        ((2, 3, 4, 5), (3, 1, 0, 2)),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_matches_numpy(rng, shape, axes, dtype):
    a = _random(rng, shape, dtype)
    got = gpu_tc.transpose(a, axes)
    expected = np.transpose(a, axes)
    assert np.shape(got) == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_transpose_returns_a_view_as_numpy(rng):
    a = rng.standard_normal((3, 4))
    got = gpu_tc.transpose(a)
    owner = a if a.base is None else a.base
    assert got.base is owner and np.transpose(a).base is owner
    assert got.strides == a.T.strides
    np.testing.assert_array_equal(got, a.T)
    got[0, 0] = 7.0  # writes through, as numpy's view does
    assert a[0, 0] == 7.0
    for zero_d in (np.array(3.0), np.float64(3.0), 3.0):  # what numpy gives back for each
        expected = np.transpose(zero_d)
        assert type(gpu_tc.transpose(zero_d)) is type(expected) and expected == 3.0


@pytest.mark.parametrize("dtype", [np.int64, np.float64, bool])
def test_tensordot_and_transpose_take_nested_lists(dtype):
    """numpy.asarray's inputs, as numpy (opt_einsum hands lists to its backend)."""
    a = np.arange(6).reshape(2, 3).astype(dtype)
    b = np.arange(12).reshape(3, 4).astype(dtype)
    got = gpu_tc.tensordot(a.tolist(), b.tolist(), axes=1)
    expected = np.tensordot(a.tolist(), b.tolist(), axes=1)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    got = gpu_tc.transpose(a.tolist(), (1, 0))
    expected = np.transpose(a.tolist(), (1, 0))
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    for args in (([1, 2], [3, 4], 1), (2, 3, 0)):  # 0-d arrays, not scalars, as numpy
        got, expected = gpu_tc.tensordot(*args), np.tensordot(*args)
        assert type(got) is type(expected) is np.ndarray and got == expected


def test_transpose_of_a_strided_view(rng):
    a = rng.standard_normal((6, 8, 4))[::2, ::-3]
    np.testing.assert_array_equal(gpu_tc.transpose(a, (2, 0, 1)), np.transpose(a, (2, 0, 1)))


@pytest.mark.parametrize(
    "axes, builtin, match",
    [((0, 0), ValueError, "repeats an axis"), ((0,), ValueError, "do not match"),
     (1, ValueError, "do not match"), ((0, 2), IndexError, "out of range"),
     ("ab", TypeError, "int or a sequence of ints"),
     ((1.0, 0), TypeError, "int or a sequence of ints")],
)
def test_transpose_bad_axes_raise_what_numpy_raises(axes, builtin, match):
    with pytest.raises(builtin):
        np.transpose(np.ones((2, 3)), axes)
    with pytest.raises(ShapeError, match=match) as info:
        gpu_tc.transpose(np.ones((2, 3)), axes)
    assert isinstance(info.value, builtin)


def test_public_names():
    assert gpu_tc.tensordot is numpy_compat.tensordot
    assert gpu_tc.transpose is numpy_compat.transpose
    assert {"tensordot", "transpose"} <= set(gpu_tc.__all__)


@pytest.mark.parametrize("subscripts", ["ij->ji", "ijk->kij", "...j->j...", "ji", "ij->ij",
                                        "jj->j", "kjj->kj", "jjk->kj"])
@pytest.mark.parametrize("layout", ["c", "strided", "read-only"])
def test_an_einsum_reorder_is_the_view_numpy_returns(rng, subscripts, layout):
    """Reorders and diagonals, the first call and the warm ones (the plan's fast path):
    numpy.einsum's strides, values and writability, a view of the operand (a reorder's
    base numpy's too)."""
    ndim = len(subscripts.split("->")[0].replace("...", "k"))
    shape = (4, 6, 6)[3 - ndim:] if "jj" in subscripts else (3, 4, 5)[3 - ndim:]
    if subscripts.startswith("jjk"):
        shape = (6, 6, 4)
    a = rng.standard_normal(shape)
    if layout == "strided":
        a = rng.standard_normal(tuple(2 * n for n in shape))[tuple(slice(None, None, -2)
                                                                   for _ in shape)]
    if layout == "read-only":
        a.setflags(write=False)
    expected = np.einsum(subscripts, a)
    for _ in range(3):
        got = gpu_tc.einsum(subscripts, a)
        assert got.strides == expected.strides and got.flags.writeable == a.flags.writeable
        assert np.shares_memory(got, a)
        if "jj" not in subscripts:
            assert got.base is expected.base
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("subscripts, shapes", [
    ("ii->", [(4, 4)]), ("i,i->", [(8,), (8,)]), ("ij,ij->", [(3, 4), (3, 4)]),
    ("->", [()]), ("ij,jk->ik", [(4, 4), (4, 4)]), ("ii->i", [(4, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("i->", [(5,)]),
])
def test_warm_calls_return_what_numpy_einsum_returns(rng, subscripts, shapes):
    """A scalar where numpy.einsum gives one (a 0-d result), else an array, with its
    values: on the first call and the warm ones (the fast paths)."""
    operands = [rng.standard_normal(shape) for shape in shapes]
    expected = np.einsum(subscripts, *operands)
    for _ in range(3):
        got = gpu_tc.einsum(subscripts, *operands)
        assert type(got) is type(expected)
        np.testing.assert_allclose(got, expected, rtol=1e-12)
