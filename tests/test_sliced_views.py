"""Views of C-ordered arrays taken by a reshape and slices (cpu_fallback.sliced_views),
as the CPU backend takes a batch of diagonals: the same elements, strides and memory as
the view built from strides, and numpy.einsum's writability."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import gpu_tc
from cpu_fallback.sliced_views import c_ordered, slicing

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
    the operand is, as numpy.einsum's. The plan decides the slices when it is made."""
    from cpu_fallback import backend
    from gpu_tc.cache import PLAN_CACHE

    PLAN_CACHE.clear()  # a plan made earlier for this layout decided without the spy
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


@pytest.mark.parametrize("make", [
    lambda: np.zeros((3, 4)), lambda: np.zeros((3, 4)).T, lambda: np.zeros((3, 1, 4)),
    lambda: np.zeros((3, 4, 1))[:, :, :1], lambda: np.zeros((6, 4))[::2],
    lambda: np.zeros((3, 1, 4)).transpose(1, 0, 2), lambda: np.zeros((0, 4))[:, ::2],
    lambda: np.zeros((5, 4))[:, :1], lambda: np.zeros((4, 5))[:1, ::2], lambda: np.zeros(()),
])
def test_c_ordered_agrees_with_numpys_flag(make):
    x = make()
    strides = tuple(s // x.itemsize for s in x.strides)
    assert c_ordered(x.shape, strides) == x.flags.c_contiguous


@pytest.mark.parametrize("writable", [True, False])
def test_a_viewer_bound_to_another_layout_builds_the_view_from_strides(writable):
    """An operand that is not C-ordered (a transpose) gets the strided view each call:
    the same elements as numpy.einsum's diagonal, writable only when asked and allowed."""
    from cpu_fallback.backend import CpuBackend
    from gpu_tc.problem import OperandLayout, TensorSpec

    x = np.arange(3 * 16, dtype=np.float64).reshape(4, 4, 3).transpose(2, 0, 1)
    source = OperandLayout(x.shape, tuple(s // 8 for s in x.strides), "d")
    spec = TensorSpec("bi", (3, 4), (1, 15), "d")  # bii->bi of the transpose
    view = CpuBackend().viewer(source, spec, writable=writable)(x)
    assert np.array_equal(view, np.einsum("bii->bi", x)) and np.shares_memory(view, x)
    assert view.flags.writeable == writable
