"""Views of C-ordered arrays taken by a reshape and slices (cpu_fallback.sliced_views),
as the CPU backend takes a batch of diagonals: the same elements, strides and memory as
the view built from strides, and numpy.einsum's writability."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import gpu_tc
from cpu_fallback.sliced_views import slicing

CASES = [
    ((5, 4, 4), (5, 4), (16, 5)),  # bii->bi
    ((5, 4, 4), (4, 5), (5, 16)),  # bii->ib: the transpose back
    ((3, 6, 6), (3, 6), (36, 7)),
    ((2, 3, 5, 5), (2, 3, 5), (75, 25, 6)),  # abii->abi
    ((3, 5, 5), (3, 5), (25, 6)),  # ijj->ij
    ((4, 6), (4, 3), (6, 2)),  # every other element of each row
    ((7, 7), (7,), (8,)),  # a diagonal
]


@pytest.mark.parametrize("shape, extents, strides", CASES)
def test_the_slices_view_what_the_strides_view(shape, extents, strides):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    sliced = slicing(shape, extents, strides)
    assert sliced is not None
    reshape, index, axes = sliced
    view = x.reshape(reshape)[index]
    if axes is not None:
        view = view.transpose(axes)
    expected = as_strided(x, extents, [s * 8 for s in strides])
    assert view.shape == expected.shape and view.strides == expected.strides
    assert np.shares_memory(view, x) and np.array_equal(view, expected)


@pytest.mark.parametrize("shape, extents, strides", [
    ((3, 3, 5), (3, 5), (20, 1)),  # iij->ij: the outer axis steps past its block
    ((4, 1, 4), (4, 1), (4, 5)),  # an axis of one: any stride
    ((4, 6), (4, 4), (6, 2)),  # the inner run reaches past its row
    ((4, 6), (4, 3), (-6, 2)),  # backwards
])
def test_no_slicing_where_the_view_is_not_blocks_of_rows(shape, extents, strides):
    assert slicing(shape, extents, strides) is None


@pytest.mark.parametrize("subscripts, shape", [("bii->bi", (3, 4, 4)), ("bii->ib", (3, 4, 4)),
                                               ("ijj->ij", (2, 5, 5)), ("abii->abi", (2, 3, 4, 4))])
@pytest.mark.parametrize("writable", [True, False])
def test_einsum_s_diagonal_views_are_numpys(monkeypatch, subscripts, shape, writable):
    """Taken by the slices (the view built from strides is not reached), writable as
    the operand is, as numpy.einsum's."""
    from cpu_fallback import backend

    taken = []
    monkeypatch.setattr(backend, "slicing", lambda *args: taken.append(slicing(*args)) or taken[-1])
    x = np.random.default_rng(0).random(shape)
    x.setflags(write=writable)
    expected = np.einsum(subscripts, x)
    for _ in range(3):  # cold, then warm calls
        got = gpu_tc.einsum(subscripts, x)
        assert got.strides == expected.strides and np.array_equal(got, expected)
        assert np.shares_memory(got, x) and got.flags.writeable == expected.flags.writeable
    assert taken and None not in taken
    if writable:
        got[...] = -1.0
        assert np.all(np.einsum(subscripts, x) == -1.0)
