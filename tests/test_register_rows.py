"""Narrow contiguous rows one step apart, summed in vector registers by the compiled
sums (cpu_fallback/register_rows.h): each element summed over the rows in order, the
bits of adding the rows one at a time, on one thread and shared among threads; rows
of other widths, dtypes and tables keep the loops that add rows into D."""

from __future__ import annotations

import numpy as np
import pytest

from cpu_fallback import _sums, sum_kernel
from cpu_fallback.strided_sum import kernel_plans
from gpu_tc.backend import Scalars
from gpu_tc.problem import ReductionProblem, TensorSpec, contiguous_spec


def _problem(x: np.ndarray, labels: str, out: str) -> ReductionProblem:
    strides = tuple(s // x.itemsize for s in x.strides)
    a = TensorSpec(labels, x.shape, strides, x.dtype.char)
    return ReductionProblem(a, contiguous_spec(out, [a.extent(c) for c in out], x.dtype.char))


def _in_order(rows: np.ndarray) -> np.ndarray:
    """The rows added one at a time, each sum rounded to the dtype."""
    total = np.zeros(rows.shape[1], rows.dtype)
    for row in rows:
        total = total + row
    return total


def test_the_middle_step_is_found_only_where_every_row_is_one_step_on():
    assert sum_kernel.middle_step(np.arange(0, 640, 64)) == 64
    assert sum_kernel.middle_step(np.arange(640, 0, -64)) == -64
    assert sum_kernel.middle_step(np.array([0, 64, 128, 200])) == 0
    assert sum_kernel.middle_step(np.zeros(4, np.int64)) == 0
    assert sum_kernel.middle_step(np.array([5])) == 0


# float32 rows of 16 lanes: 1, 3 and 8 vectors in registers; 9 vectors and 17 lanes
# fall back to adding rows into D; float64 rows of 8 lanes likewise.
@pytest.mark.parametrize(("dtype", "width"), [
    ("float32", 16), ("float32", 48), ("float32", 128), ("float32", 144), ("float32", 17),
    ("float64", 8), ("float64", 40), ("float64", 64), ("float64", 72), ("float64", 9)])
@pytest.mark.parametrize("rows", ["plain", "reversed", "window"])
@pytest.mark.parametrize("threads", [1, 3])
def test_rows_one_step_apart_sum_in_order(dtype, width, rows, threads, monkeypatch):
    """'xd->d' of 2101 rows: contiguous, in reverse (a negative step) or a window of a
    wider array (a step longer than the row); one thread gives the rows' sum in order
    bit for bit, three threads the sum of their three parts' sums in order."""
    monkeypatch.setattr(sum_kernel, "threads", lambda: threads)
    rng = np.random.default_rng(3)  # rounding in every sum: another order, other bits
    wide = (rng.standard_normal((2101, width + 5)) * 1e3).astype(dtype)
    x = {"plain": np.ascontiguousarray(wide[:, :width]),
         "reversed": wide[::-1, :width].copy()[::-1], "window": wide[:, 2:width + 2]}[rows]
    problem = _problem(x, "xd", "d")
    plans = {p.route: p for p in kernel_plans(problem)}
    d = np.full(width, 9, dtype)
    if threads == 1:
        plans["reduce:loops"].execute((x,), d, Scalars(), None)
        np.testing.assert_array_equal(d, _in_order(x))
    else:
        plans["reduce:threaded-loops"].execute((x,), d, Scalars(), None)
        parts = [_in_order(x[:700]), _in_order(x[700:1400]), _in_order(x[1400:])]
        np.testing.assert_array_equal(d, np.zeros(width, dtype) + parts[0] + parts[1] + parts[2])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rows_of_a_table_and_outer_indices_sum_in_order(dtype):
    """'abd->ad' with an outer index a: the rows b one step apart under each a; and
    'abcd->d' of a view whose rows (b, c) are not one step apart (c cut short: the
    kernel reads the table). Both give each output row's sum in order."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 301, 32)) * 1e3).astype(dtype)
    plan = kernel_plans(_problem(x, "abd", "ad"))[0]
    d = np.empty((5, 32), dtype)
    plan.execute((x,), d, Scalars(), None)
    np.testing.assert_array_equal(d, np.stack([_in_order(x[i]) for i in range(5)]))
    y = (rng.standard_normal((64, 9, 64)) * 1e3).astype(dtype)[:, :5]
    plan = kernel_plans(_problem(y, "bcd", "d"))[0]
    d = np.empty(64, dtype)
    plan.execute((y,), d, Scalars(), None)
    np.testing.assert_array_equal(d, _in_order(y.reshape(320, 64)))


def test_a_step_places_the_rows_from_the_first_entry_and_is_bounds_checked():
    """With a step the kernel reads the table's first entry only, and checks the rows
    the step reaches against the buffer."""
    src, dst = np.arange(64.0 * 10), np.zeros(64)
    kept, summed = np.zeros(1, np.int64), np.array([64, -10**9, 10**9])  # rows 1, 2, 3
    _sums.strided(src, dst, "f8", "f8", sum_kernel.UNIT_ROWS, kept, kept, summed, 64, 1, 1,
                  0, False, 64)
    np.testing.assert_array_equal(dst, src.reshape(10, 64)[1:4].sum(axis=0))
    with pytest.raises(ValueError, match="outside the buffers"):
        _sums.strided(src, dst, "f8", "f8", sum_kernel.UNIT_ROWS, kept, kept, summed, 64, 1,
                      1, 0, False, 320)  # rows 1, 6 and 11: row 11 lies past the buffer
    with pytest.raises(ValueError, match="outside the buffers"):
        _sums.strided(src, dst, "f8", "f8", sum_kernel.UNIT_ROWS, kept, kept, summed, 64, 1,
                      1, 0, False, -64)  # rows 1, 0 and -1
