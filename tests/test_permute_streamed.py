"""Non-temporal stores in the cache-blocked copy (cpu_fallback.blocked, ``stream``):
the same bits as numpy.copyto at every alignment, and a permutation plan that times
them against plain stores only where they may pay."""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest

import gpu_tc
from cpu_fallback import blocked, kernels

pytestmark = pytest.mark.skipif(
    not kernels.built("_tile_copy"),
    reason="the compiled copy kernel (cpu_fallback._tile_copy) is not built",
)

DTYPES = ["bool", "int8", "float16", "float32", "float64", "complex128"]
SENTINEL = 7


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    bits = rng.integers(0, 256, (*shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    return bits.view(dtype).reshape(shape)  # any bit pattern: NaN payloads, bools of 2..255


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint8)


def test_the_kernel_streams_on_x86_64():
    from cpu_fallback import tiles

    x86_64 = platform.machine() in ("x86_64", "AMD64") and sys.maxsize > 2**32
    assert tiles.streams() == x86_64


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", [(1, 0, 3, 2), (0, 2, 1, 3), (3, 2, 1, 0), (2, 0, 3, 1)])
@pytest.mark.parametrize("shift", [0, 1, 3, 8])
@pytest.mark.parametrize("run", [7, 40])
def test_streamed_copies_write_what_numpy_writes(small_tiles, rng, dtype, perm, shift, run):
    """Rows of every length and start (``shift`` items into a buffer: 1, 2, 4 and 8-byte
    alignments, lines entered anywhere), with partial tiles, through the transposing path
    and, where a run of ``run`` items contiguous in both stays (perm (0, 2, 1, 3), 40
    items: 16 words or more), the direct one: the same bits, and nothing written outside
    the destination."""
    source = _random(rng, (6, 5, 9, run), dtype).transpose(perm)
    buffer = np.full(source.size + shift + 5, SENTINEL, dtype)
    destination = buffer[shift:shift + source.size].reshape(source.shape)
    layout = blocked.tile_layout(source.shape, source.strides, destination.strides,
                                 source.itemsize, (source.ctypes.data, destination.ctypes.data))
    assert layout is not None and layout.rows_contiguous
    assert blocked.copy_tiled(source, destination, stream=True)
    np.testing.assert_array_equal(_bits(destination), _bits(source))
    sentinel = np.array(SENTINEL).astype(dtype)
    assert (buffer[:shift] == sentinel).all() and (buffer[shift + source.size:] == sentinel).all()


@pytest.mark.parametrize("perm", [(1, 0, 3, 2), (0, 2, 1, 3), (3, 2, 1, 0)])
def test_streamed_copies_at_full_size(rng, perm):
    """Default tiles and threads, a destination 8 bytes into a line: the long-run path
    ((0, 2, 1, 3): runs of 65 words) and the transposing one."""
    source = _random(rng, (40, 33, 24, 65), "float64").transpose(perm)
    buffer = np.zeros(source.size + 2)
    destination = buffer[1:-1].reshape(source.shape)
    assert blocked.copy_tiled(source, destination, stream=True)
    np.testing.assert_array_equal(_bits(destination), _bits(source))
    assert buffer[0] == 0 and buffer[-1] == 0


def test_streamed_stores_are_timed_only_where_they_may_pay(monkeypatch):
    """A permutation plan times plain against non-temporal stores from
    NONTEMPORAL_MIN_BYTES of destination, where its rows are contiguous there."""
    reversal = (32, 32, 32), (1, 32, 1024), (1024, 32, 1)  # extents, source, destination
    gapped = reversal[:2] + ((2048, 64, 2),)
    layouts = [blocked.tile_layout(e, tuple(8 * x for x in s), tuple(8 * x for x in d), 8)
               for e, s, d in (reversal, gapped)]
    assert layouts[0] is not None and layouts[0].rows_contiguous
    assert layouts[1] is not None and not layouts[1].rows_contiguous
    nbytes = 8 * 32**3
    monkeypatch.setattr(blocked, "NONTEMPORAL_MIN_BYTES", nbytes)
    assert blocked.may_stream(layouts[0], nbytes, 2)
    assert not blocked.may_stream(layouts[1], nbytes, 2)
    assert not blocked.may_stream(layouts[0], nbytes - 1, 2)
    # Runs of 2 KiB that one thread leaves to numpy.copyto: both variants would be that.
    long_runs = blocked.tile_layout((64, 64, 256), (2048, 131072, 8), (131072, 2048, 8), 8)
    assert long_runs is not None and long_runs.rows_contiguous
    assert blocked.may_stream(long_runs, 8 * 64 * 64 * 256, 2)
    assert not blocked.may_stream(long_runs, 8 * 64 * 64 * 256, 1)


def test_a_large_permutation_times_both_stores(small_tiles, monkeypatch, rng):
    """Every call's result is right while the plan times its two variants, and its
    reason names both; below the threshold the plan is the plain copy alone."""
    a = rng.standard_normal((23, 19, 17))
    expected = a.transpose(2, 0, 1)
    assert "streamed" not in gpu_tc.prepare("abc->cab", a).reason
    monkeypatch.setattr(blocked, "NONTEMPORAL_MIN_BYTES", 0)
    b = rng.standard_normal((29, 19, 17))
    for _ in range(12):
        out = np.full((17, 29, 19), np.nan)
        gpu_tc.permute("abc->cab", b, out=out)
        np.testing.assert_array_equal(out, b.transpose(2, 0, 1))
    reason = gpu_tc.prepare("abc->cab", b).reason
    assert "cached permute" in reason and "streamed permute" in reason, reason
    np.testing.assert_array_equal(gpu_tc.permute("abc->cab", a), expected)
