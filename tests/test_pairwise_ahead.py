"""The pairwise sums ask memory ahead only for sums larger than twice the largest cache
(cpu_fallback.caches, pairwise_kernel.asks_ahead), and either way keep NumPy's bits."""

from __future__ import annotations

import numpy as np
import pytest

from cpu_fallback import caches, kernels
from cpu_fallback.sum_layout import RowLayout, cuts, leaf_program

pytestmark = pytest.mark.skipif(not kernels.built("_pairwise"),
                                reason="cpu_fallback._pairwise was not built")


def _cache(root, index: int, level: int, kind: str, size: str) -> None:
    folder = root / f"index{index}"
    folder.mkdir()
    (folder / "level").write_text(f"{level}\n")
    (folder / "type").write_text(f"{kind}\n")
    (folder / "size").write_text(f"{size}\n")


@pytest.mark.parametrize("text, size", [("32768K", 32 << 20), ("2M", 2 << 20), ("1G", 1 << 30),
                                        ("48k", 48 << 10), ("512", 512)])
def test_sysfs_sizes_are_read_in_bytes(text, size):
    assert caches.parse_size(text + "\n") == size


def test_the_largest_data_or_unified_cache_counts(tmp_path):
    _cache(tmp_path, 0, 1, "Data", "48K")
    _cache(tmp_path, 1, 1, "Instruction", "64M")  # larger, but not data
    _cache(tmp_path, 2, 2, "Unified", "2048K")
    _cache(tmp_path, 3, 3, "Unified", "32768K")
    assert caches.last_level_bytes(tmp_path) == 32 << 20


def test_without_a_listing_the_default_holds(tmp_path):
    assert caches.last_level_bytes(tmp_path / "missing") == caches.DEFAULT_BYTES
    _cache(tmp_path, 0, 3, "Unified", "a lot")
    assert caches.last_level_bytes(tmp_path) == caches.DEFAULT_BYTES


def _rows(rows: int, length: int, step: int = 1) -> RowLayout:
    return RowLayout(np.arange(rows) * length * step, np.arange(rows), length, 0, 0, step)


def test_only_contiguous_rows_past_twice_the_largest_cache_ask_ahead(monkeypatch):
    from cpu_fallback import pairwise_kernel

    monkeypatch.setattr(caches, "last_level_bytes", lambda: 1 << 20)
    f8, f4 = np.dtype("float64"), np.dtype("float32")
    assert not pairwise_kernel.asks_ahead(_rows(4, 32769), f8)  # past 1 MiB: still cached
    assert not pairwise_kernel.asks_ahead(_rows(4, 65536), f8)  # exactly 2 MiB
    assert pairwise_kernel.asks_ahead(_rows(4, 65537), f8)
    assert not pairwise_kernel.asks_ahead(_rows(4, 65537), f4)  # half the bytes
    assert pairwise_kernel.asks_ahead(_rows(1, 1 << 19 | 8), f4)
    assert not pairwise_kernel.asks_ahead(_rows(4, 65537, step=3), f8)  # a diagonal


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("pieces", [1, 4])
def test_asking_ahead_keeps_numpys_bits(monkeypatch, dtype, parallel, pieces):
    """Rows with runs of whole blocks and short tails (the lines asked for run past a
    row's and the array's end), summed asking ahead and not: NumPy's bits both ways."""
    from cpu_fallback import pairwise_kernel

    rng = np.random.default_rng(7)
    length = 128 * 64 + 77
    x = (rng.standard_normal((6, length)) * 10.0 ** rng.uniform(-8, 8, (6, length))).astype(dtype)
    layout, program = _rows(6, length), leaf_program(cuts(length, pieces))
    expected = np.add.reduce(x, axis=1)
    for cache in (1 << 40, 1024):
        monkeypatch.setattr(caches, "last_level_bytes", lambda cache=cache: cache)
        assert pairwise_kernel.asks_ahead(layout, x.dtype) == (cache == 1024)
        d = np.full(6, np.nan, dtype)
        pairwise_kernel.run(x, d, layout, program, parallel=parallel)
        assert d.tobytes() == expected.tobytes()
