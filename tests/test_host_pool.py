"""The host pool: large buffers reused only once no array refers to them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gpu_tc
from cpu_fallback import pool as pool_module
from cpu_fallback.pool import ALIGN, GRANULE, MAX_BUFFERS, MIN_BYTES, HostPool
from gpu_tc.errors import OptionsError

BIG = (1024, 1024)  # 8 MiB of float64: pooled
SMALL = (64, 64)  # 32 KiB: plain numpy.empty


def _address(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]


def test_new_array_has_the_shape_dtype_and_c_order():
    pool = HostPool(limit=1 << 30)
    x = pool.empty(BIG, "complex64")
    assert x.shape == BIG and x.dtype == np.complex64 and x.flags.c_contiguous
    assert x.flags.writeable
    x[...] = 1 + 2j
    assert x.sum() == pytest.approx(BIG[0] * BIG[1] * (1 + 2j))


def test_idle_buffer_is_reused_and_rounded_to_the_granule():
    pool = HostPool(limit=1 << 30)
    x = pool.empty(BIG, "float64")
    first = _address(x)
    assert (x.base.nbytes - ALIGN) % GRANULE == 0 and x.base.nbytes - ALIGN >= x.nbytes
    del x
    assert pool.stats().idle_bytes == 8 << 20
    y = pool.empty((2048, 512), "float64")  # same size class, other shape
    assert _address(y) == first
    assert (pool.stats().hits, pool.stats().misses) == (1, 1)


def test_the_buffer_taken_last_is_reused_first():
    """Two idle buffers of one size: every request gets the one freed last, not each in
    turn (a result that alternated between them spanned twice the cache)."""
    pool = HostPool(limit=1 << 30)
    x, y = pool.empty(BIG, "float64"), pool.empty(BIG, "float64")
    newest = _address(y)
    del x, y
    assert pool.stats().idle_bytes == 2 * (8 << 20)
    assert [_address(pool.empty(BIG, "float64")) for _ in range(4)] == [newest] * 4
    kept = pool.empty(BIG, "float64")  # in use: the other buffer is next
    assert _address(kept) == newest
    assert _address(pool.empty(BIG, "float64")) != newest


def test_einsum_results_in_a_loop_reuse_one_buffer():
    rng = np.random.default_rng(0)
    a, b = rng.random((8192, 32)), rng.random((64, 32))  # a 4 MiB result: pooled
    first, second = gpu_tc.einsum("ik,jk->ij", a, b), gpu_tc.einsum("ik,jk->ij", a, b)
    del first, second  # two idle buffers of the result's size
    addresses = set()
    for _ in range(4):
        out = gpu_tc.einsum("ik,jk->ij", a, b)
        addresses.add(_address(out))
        np.testing.assert_allclose(out, a @ b.T, rtol=1e-12)
        del out
    assert len(addresses) == 1


def test_a_live_view_keeps_its_buffer_from_reuse():
    pool = HostPool(limit=1 << 30)
    x = pool.empty(BIG, "float64")
    x[...] = 7.0
    view = x.T[::2]  # a view of a view: NumPy points its base at the pooled buffer
    del x
    assert pool.stats().idle_bytes == 0
    y = pool.empty(BIG, "float64")
    y[...] = -1.0
    assert not np.shares_memory(view, y)
    assert np.all(view == 7.0)


@pytest.mark.parametrize("shape", [BIG, (MIN_BYTES // 8,), (300_001,), (2 << 20 >> 3,)])
def test_pooled_arrays_start_on_a_cache_line_however_numpy_places_its_buffers(shape):
    pool = HostPool(limit=1 << 30)
    first = pool.empty(shape, "float64")
    address = _address(first)
    del first
    again = pool.empty(shape, "float64")  # the same buffer, at the same start
    assert _address(again) == address and address % ALIGN == 0
    again[...] = 2.0  # every byte of the request lies inside its buffer
    start = address - _address(again.base)
    assert 0 <= start < ALIGN and start + again.nbytes <= again.base.nbytes


def test_small_requests_bypass_the_pool():
    pool = HostPool(limit=1 << 30)
    x = pool.empty(SMALL, "float64")
    assert x.nbytes < MIN_BYTES and x.flags.owndata
    assert pool.stats().buffers == 0


def test_limit_bounds_the_idle_bytes_and_zero_turns_the_pool_off():
    pool = HostPool(limit=20 << 20)
    arrays = [pool.empty(BIG, "float64") for _ in range(4)]  # 4 x 8 MiB, all in use
    assert pool.stats().in_use_bytes == 32 << 20
    del arrays
    pool.empty(SMALL, "float64")
    assert pool.stats().idle_bytes == 32 << 20  # trimmed lazily, on the next pooled request
    keep = pool.empty((512, 1024), "float64")  # 4 MiB: a new size class
    assert pool.stats().idle_bytes <= 20 << 20
    pool.limit = 0
    stats = pool.stats()
    assert stats.idle_bytes == 0 and stats.in_use_bytes == keep.nbytes
    fresh = pool.empty(BIG, "float64")
    assert fresh.flags.owndata  # off: plain numpy.empty


def test_idle_buffers_of_other_sizes_never_raise_the_peak():
    pool = HostPool(limit=1 << 30)
    pair = [pool.empty(BIG, "float64") for _ in range(2)]  # 16 MiB in use at most
    del pair
    twelve = pool.empty((1536, 1024), "float64")  # 12 MiB: 12 + 16 idle would exceed 16
    stats = pool.stats()
    assert stats.in_use_bytes == 12 << 20 and stats.idle_bytes <= 4 << 20
    del twelve
    again = [pool.empty((1536, 1024), "float64"), pool.empty((512, 1024), "float64")]
    assert pool.stats().hits == 1  # the 12 MiB buffer came back
    assert pool.stats().in_use_bytes + pool.stats().idle_bytes <= 16 << 20
    del again


def test_a_request_above_the_limit_is_not_pooled():
    pool = HostPool(limit=4 << 20)
    x = pool.empty(BIG, "float64")
    assert x.flags.owndata and pool.stats().buffers == 0


def test_clear_drops_idle_buffers_and_keeps_live_ones():
    pool = HostPool(limit=1 << 30)
    live = pool.empty(BIG, "float64")
    live[...] = 3.0
    pool.empty(BIG, "float64")  # dropped at once: idle
    pool.clear()
    stats = pool.stats()
    assert (stats.buffers, stats.idle_bytes, stats.in_use_bytes) == (1, 0, 8 << 20)
    assert np.all(live == 3.0)


def test_more_live_arrays_than_the_pool_tracks():
    pool = HostPool(limit=1 << 30)
    arrays = []
    for k in range(MAX_BUFFERS + 3):
        x = pool.empty((MIN_BYTES // 8,), "float64")
        x[...] = k
        arrays.append(x)
    assert pool.stats().buffers == MAX_BUFFERS
    assert all(np.all(x == k) for k, x in enumerate(arrays))


def test_threads_never_share_a_live_buffer():
    pool = HostPool(limit=1 << 30)
    errors: list[str] = []

    def work(tid: int) -> None:
        for _ in range(20):
            x = pool.empty((MIN_BYTES // 8,), "float64")
            x[...] = tid
            if not np.all(x == tid):
                errors.append(f"thread {tid} saw another thread's values")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pool.stats().in_use_bytes == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_bad_limit_is_an_options_error(bad):
    with pytest.raises(OptionsError, match="host pool limit"):
        HostPool(limit=bad)


def test_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv(pool_module.ENV_LIMIT, "12345")
    assert HostPool().limit == 12345
    monkeypatch.setenv(pool_module.ENV_LIMIT, "lots")
    with pytest.raises(OptionsError, match="GPU_TC_HOST_POOL_BYTES='lots'"):
        HostPool()
    monkeypatch.delenv(pool_module.ENV_LIMIT)
    assert 0 < HostPool().limit <= 2 << 30


def test_einsum_results_come_from_the_pool_and_stay_intact():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((256, 64)), rng.standard_normal((64, 8192))  # D: 16 MiB
    pool = gpu_tc.host_pool()
    before = pool.stats()
    first = gpu_tc.einsum("ij,jk->ik", a, b)
    second = gpu_tc.einsum("ij,jk->ik", a, b)
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(first, a @ b, rtol=1e-12)
    np.testing.assert_allclose(second, a @ b, rtol=1e-12)
    address = _address(second)
    del second
    third = gpu_tc.einsum("ij,jk->ik", a, b)  # the idle buffer comes back
    assert _address(third) == address
    np.testing.assert_allclose(third, a @ b, rtol=1e-12)
    np.testing.assert_allclose(first, a @ b, rtol=1e-12)
    assert pool.stats().hits > before.hits
