"""The flat memory the compiled kernels take (cpu_fallback.raw_memory, small_k._memory):
a view from the array's lowest address, never a copy, read-only unless asked; dense
arrays take the short way (a view in memory order), others the interface object."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cpu_fallback.raw_memory import flat, memory_extent
from cpu_fallback.small_k import _memory

DENSE = {
    "C": lambda: np.arange(24.0).reshape(2, 3, 4),
    "F": lambda: np.asfortranarray(np.arange(24.0).reshape(2, 3, 4)),
    "permuted": lambda: np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1),
}
GAPPED = {
    "window": lambda: np.arange(40.0).reshape(4, 10)[:, 2:7],
    "reversed": lambda: np.arange(24.0).reshape(2, 3, 4)[:, ::-1],
    "stepped": lambda: np.arange(48.0).reshape(4, 12)[::2, ::3],
    # Views whose span is their whole (dense) base: the short way from the base.
    "diagonal": lambda: np.arange(25.0).reshape(5, 5).diagonal(),
    "anti-diagonal": lambda: np.arange(25.0).reshape(5, 5)[::-1].diagonal(),
    "corners": lambda: np.asfortranarray(np.arange(24.0).reshape(4, 6))[::3, ::5],
}


def _extent(x: np.ndarray) -> tuple[int, int]:
    return memory_extent(x.shape, tuple(s // x.itemsize for s in x.strides))


def _element(memory: np.ndarray, x: np.ndarray, base: int, index: tuple[int, ...]) -> float:
    """x[index] read through the flat memory."""
    offset = base + sum(i * s // x.itemsize for i, s in zip(index, x.strides))
    return float(memory[offset])


@pytest.mark.parametrize("make", [*DENSE.values(), *GAPPED.values()],
                         ids=[*DENSE, *GAPPED])
@pytest.mark.parametrize("writeable", [False, True])
def test_flat_is_a_view_from_the_lowest_address(make, writeable):
    x = make()
    base, span = _extent(x)
    memory = flat(x, x.dtype.str, base, span, writeable=writeable)
    assert memory.shape == (span,) and np.shares_memory(memory, x)
    assert memory.flags.writeable == writeable
    for index in np.ndindex(x.shape):
        assert _element(memory, x, base, index) == x[index]
    if writeable:  # writes land in x
        memory[base] = -1.0
        assert x[(0,) * x.ndim] == -1.0


def test_flat_words_of_another_type_of_the_same_size():
    x = DENSE["permuted"]()
    memory = flat(x, np.dtype("u8").str, *_extent(x), writeable=False)
    assert memory.dtype == np.uint64 and np.shares_memory(memory, x)
    np.testing.assert_array_equal(memory.view(np.float64), np.arange(24.0))


@pytest.mark.parametrize("make", [*DENSE.values(), *GAPPED.values()],
                         ids=[*DENSE, *GAPPED])
def test_small_k_memory_is_a_view_with_element_0s_offset(make):
    x = make()
    memory, base = _memory(x, writeable=True)
    assert base == _extent(x)[0] and np.shares_memory(memory, x)
    assert memory.size >= x.size
    for index in np.ndindex(x.shape):
        assert _element(memory, x, base, index) == x[index]


def test_small_k_memory_of_a_permuted_array_is_writable_in_place():
    """A dense array in another axis order (a new result the kernels write) comes back
    as a view in memory order, twice (its extent cached), and writes land in it."""
    x = DENSE["permuted"]()
    for _ in range(2):
        memory, base = _memory(x, writeable=True)
        assert base == 0 and memory.size == x.size and np.shares_memory(memory, x)
        memory[:] = np.arange(24.0) + 100
        np.testing.assert_array_equal(x, np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1) + 100)
        x -= 100


def test_no_copy_of_a_gapped_array_is_made(monkeypatch):
    """A window of a larger array is not raveled (that would copy it): the interface
    object describes its memory instead."""
    calls = []
    original = np.ndarray.ravel

    class Watched(np.ndarray):
        def ravel(self, order="C"):
            calls.append(order)
            return original(self, order)

    x = GAPPED["window"]().view(Watched)
    memory = flat(x, x.dtype.str, *_extent(x), writeable=True)
    _memory(x, writeable=True)
    assert calls == [] and np.shares_memory(memory, x)


def test_a_writable_view_of_an_owner_frozen_later_takes_the_long_way():
    """The view stays writable where its owner was made read-only after it (numpy.einsum
    writes into such an ``out``): its flat memory is writable, and writes land in it."""
    owner = np.zeros((6, 6))
    view = np.einsum("ii->i", owner)  # a writable diagonal view
    owner.flags.writeable = False
    memory = flat(view, view.dtype.str, *_extent(view), writeable=True)
    assert memory.flags.writeable
    memory[0] = 5.0
    assert view[0] == 5.0


def test_a_broadcast_operand_is_read_without_a_warning():
    """Reading a broadcast_arrays result's writeable flag warns (FutureWarning): a
    read-only request never reads it."""
    x = np.broadcast_arrays(np.arange(8.0), np.zeros((4, 1)))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memory = flat(x, x.dtype.str, *_extent(x), writeable=False)
    assert not memory.flags.writeable and float(memory[3]) == 3.0
