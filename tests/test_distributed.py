"""gpu_tc on dask: lazy einsum on dask arrays, and sliced network contraction, checked
against the reference kernel; in this process and on a LocalCluster of 2 processes."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import CancelledError

import numpy as np
import pytest
from helpers import (
    BACKENDS,
    GPU_EMULATED,
    assert_close,
    random_array,
    reference_einsum,
    to_backend,
    to_numpy,
)

import gpu_tc
from gpu_tc import Options, distributed
from gpu_tc.distributed import executor, slicing
from gpu_tc.errors import OptionsError, OutputError, ShapeError, TransferError

da = pytest.importorskip("dask.array", reason="the distributed extra is not installed")
dd = pytest.importorskip("distributed", reason="the distributed extra is not installed")

MODES = [Options(), Options(chunk_sums="accumulate")]

# (subscripts, shapes, chunks per operand): chunked along summed labels too.
CASES = [
    ("ij,jk->ik", [(12, 10), (10, 9)], [(5, 4), (4, 3)]),
    ("abc,cbd->ad", [(6, 7, 8), (8, 7, 5)], [(3, 4, 3), (3, 4, 5)]),
    ("ij,jk,kl->il", [(9, 8), (8, 7), (7, 6)], [(4, 3), (3, 7), (7, 2)]),
    ("ii->i", [(10, 10)], [(4, 4)]),
    ("ii", [(10, 10)], [(3, 3)]),
    ("ijk->", [(5, 6, 7)], [(2, 3, 4)]),
    ("i...,i...->...", [(6, 3, 4), (6, 3, 4)], [(2, 3, 2), (2, 3, 2)]),
    ("...ij,...jk", [(3, 5, 6), (1, 6, 4)], [(2, 5, 3), (1, 3, 4)]),
    ("aab,bc->ac", [(4, 4, 6), (6, 5)], [(2, 2, 3), (3, 5)]),
]


def _dask(x, chunks):
    return da.from_array(x, chunks=chunks)


@pytest.mark.parametrize("options", MODES, ids=lambda o: o.chunk_sums)
@pytest.mark.parametrize("subscripts,shapes,chunks", CASES, ids=[c[0] for c in CASES])
def test_einsum_on_dask_arrays_matches_the_reference(subscripts, shapes, chunks, options):
    rng = np.random.default_rng(1)
    arrays = [random_array(rng, s, "float64") for s in shapes]
    lazy = gpu_tc.einsum(subscripts, *[_dask(x, c) for x, c in zip(arrays, chunks)],
                         options=options)
    assert isinstance(lazy, da.Array)
    exact, scale = reference_einsum(subscripts, *arrays)
    assert_close(lazy.compute(scheduler="sync"), exact, "float64", scale)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("options", MODES, ids=lambda o: o.chunk_sums)
def test_chunks_of_each_backend_come_back_of_that_kind(backend, options):
    if backend == "gpu" and GPU_EMULATED:
        pytest.skip("dask's CuPy dispatch (cupy.concatenate, ...) is beyond the slice of "
                    "CuPy the emulated device provides")
    rng = np.random.default_rng(7)
    a, b = random_array(rng, (12, 10), "float64"), random_array(rng, (10, 9), "float64")
    chunked = [da.from_array(to_backend(x, backend), chunks=4) for x in (a, b)]
    got = gpu_tc.einsum("ij,jk->ik", *chunked, options=options).compute(scheduler="sync")
    assert type(got) is type(to_backend(a, backend))
    assert_close(to_numpy(got), a @ b, "float64", np.abs(a) @ np.abs(b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_chunk_sums_accumulate_blocks_of_each_backend(backend):
    """The accumulating block sum itself, without dask's dispatch (which the emulated
    device lacks): CuPy blocks, which carry no ``writeable`` flag, are summed too."""
    from gpu_tc.distributed.arrays import _accumulated_block

    rng = np.random.default_rng(8)
    a, b = random_array(rng, (4, 6), "float64"), random_array(rng, (6, 5), "float64")
    blocks_a = [to_backend(a[:, :3], backend), to_backend(a[:, 3:], backend)]
    blocks_b = [to_backend(b[:3], backend), to_backend(b[3:], backend)]
    got = _accumulated_block(
        blocks_a, blocks_b, kernel=gpu_tc.einsum, add=gpu_tc.contract, expression="ab,bc->ac",
        terms=("ab", "bc"), summed="b", counts={"b": 2},
        keywords={"options": Options(chunk_sums="accumulate")},
    )
    assert type(got) is type(to_backend(a, backend))
    assert_close(to_numpy(got), a @ b, "float64", np.abs(a) @ np.abs(b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sliced_network_of_each_backend_in_this_process(backend):
    ring = _network(RING, 8)
    exact, scale = reference_einsum(RING, *ring)
    got = distributed.contract(RING, *[to_backend(x, backend) for x in ring],
                               memory_limit=8 * 8)
    assert_close(to_numpy(got), exact, "float64", scale)


def test_mixed_chunks_are_rechunked_and_numpy_operands_join():
    rng = np.random.default_rng(2)
    a, b, c = (random_array(rng, s, "complex128") for s in [(8, 9), (9, 10), (10,)])
    lazy = gpu_tc.einsum("ij,jk,k->i", _dask(a, (3, 4)), _dask(b, (5, 2)), c)
    exact, scale = reference_einsum("ij,jk,k->i", a, b, c)
    assert_close(lazy.compute(scheduler="sync"), exact, "complex128", scale)


def test_blocks_of_equal_shape_share_one_plan():
    rng = np.random.default_rng(3)
    a = random_array(rng, (16, 16), "float64")
    gpu_tc.plan_cache().clear()
    lazy = gpu_tc.einsum("ij,jk->ik", _dask(a, 8), _dask(a, 8))  # 8 products of 8x8 blocks
    np.testing.assert_allclose(lazy.compute(scheduler="sync"), a @ a, rtol=1e-12)
    stats = gpu_tc.plan_cache().levels[0].stats()
    assert stats.misses == 1 and stats.hits == 7


def test_contract_and_tensordot_on_dask():
    rng = np.random.default_rng(4)
    a, b, c = (random_array(rng, s, "float64") for s in [(6, 8), (8, 5), (6, 5)])
    lazy = gpu_tc.contract("ij,jk->ik", _dask(a, 3), _dask(b, 4), alpha=2.0, beta=-0.5, c=c)
    np.testing.assert_allclose(lazy.compute(scheduler="sync"), 2 * a @ b - 0.5 * c, rtol=1e-12)
    dot = gpu_tc.tensordot(_dask(a, 3), _dask(b, 4), axes=1)
    np.testing.assert_allclose(dot.compute(scheduler="sync"), a @ b, rtol=1e-12)


@pytest.mark.parametrize("subscripts, shape, chunks", [
    ("ii->i", (6, 6), (2, 3)),
    ("ijij,ik->jk", (6, 7, 6, 7), (4, 3, 3, 2)),
    ("iijj->ij", (6, 6, 7, 7), (4, 2, 3, 4)),
])
def test_a_repeated_label_chunked_unlike_within_one_operand(subscripts, shape, chunks):
    rng = np.random.default_rng(5)
    x, y = random_array(rng, shape, "float64"), random_array(rng, (6, 5), "float64")
    operands = [x, y][:subscripts.count(",") + 1]
    lazy = gpu_tc.einsum(subscripts, _dask(x, chunks), *operands[1:])
    exact, scale = reference_einsum(subscripts, *operands)
    assert_close(lazy.compute(scheduler="sync"), exact, "float64", scale)


def test_sliced_contraction_takes_lists_and_checks_its_keywords():
    a = [[0.0, 1.0], [2.0, 3.0]]
    got = distributed.contract("ij,jk->ik", a, a, memory_limit=np.int64(32))
    np.testing.assert_array_equal(got, np.asarray(a) @ np.asarray(a))
    three = [np.ones((3, 3))] * 3
    with pytest.raises(gpu_tc.PathNameError, match="optimize='bogus' names no path search"):
        distributed.plan("ij,jk,kl->il", *three, optimize="bogus")
    with pytest.raises(gpu_tc.OptionsTypeError, match="memory_limit must be an int"):
        distributed.plan("ij,jk,kl->il", *three, memory_limit=1e6)


def test_contract_on_dask_with_alpha_zero_reads_neither_operand():
    a = np.ones((4, 4))
    a[1, 2] = np.inf
    lazy = gpu_tc.contract("ij,jk->ik", _dask(a, 2), _dask(a, 2), alpha=0, beta=2,
                           c=np.ones((4, 4)))
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), 2.0)


@pytest.mark.parametrize("c_shape", [(5,), (1, 3, 5), (2, 1, 1), (3, 3)])
def test_contract_on_dask_refuses_a_c_of_another_shape(c_shape):
    """As on NumPy operands: c is not broadcast."""
    a, b = _dask(np.ones((3, 4)), 2), _dask(np.ones((4, 5)), 2)
    with pytest.raises(ShapeError, match=rf"c has shape \({c_shape[0]},.* but the result has "
                                         r"shape \(3, 5\) in contract\('ij,jk->ik'\)"):
        gpu_tc.contract("ij,jk->ik", a, b, beta=1, c=np.ones(c_shape))


def test_dask_errors_name_the_expression():
    a = _dask(np.ones((4, 5)), 2)
    with pytest.raises(ShapeError, match="label 'b' has extent 5"):
        gpu_tc.einsum("ab,bc->ac", a, a)
    with pytest.raises(OutputError, match="lazy dask array"):
        gpu_tc.einsum("ab->ba", a, out=np.empty((5, 4)))
    with pytest.raises(OptionsError, match="chunk_sums"):
        Options(chunk_sums="stack")


def test_accumulating_mode_runs_one_task_per_output_block():
    a = _dask(np.ones((8, 64)), (4, 8))  # 2 x 8 blocks: 8 chunks of the summed label
    tree = gpu_tc.einsum("ij,kj->ik", a, a)
    accumulated = gpu_tc.einsum("ij,kj->ik", a, a, options=MODES[1])
    np.testing.assert_array_equal(accumulated.compute(scheduler="sync"), np.full((8, 8), 64.0))
    np.testing.assert_array_equal(tree.compute(scheduler="sync"), np.full((8, 8), 64.0))
    assert len(accumulated.dask) < len(tree.dask)


# -- sliced network contraction --------------------------------------------------------

RING = "ab,bc,cd,da->"
CHAIN = "abc,cde,ea->bd"  # its intermediate abde is larger than the result


def _network(subscripts, extent, seed=0):
    rng = np.random.default_rng(seed)
    terms = subscripts.split("->")[0].split(",")
    return [random_array(rng, (extent,) * len(t), "float64") for t in terms]


@pytest.mark.parametrize("subscripts,limit", [(RING, None), (RING, 8 * 16), (CHAIN, 8 * 1000),
                                              ("aab,bc->c", None)])
def test_sliced_contraction_matches_the_reference_locally(subscripts, limit):
    extent = 6 if "aab" in subscripts else 12
    arrays = _network(subscripts, extent)
    p = distributed.plan(subscripts, *arrays, memory_limit=limit)
    if limit is not None:
        assert p.largest_bytes <= limit and p.sliced
        assert p.slices == extent ** len(p.sliced) > 1
    exact, scale = reference_einsum(subscripts, *arrays)
    assert_close(np.asarray(p.execute(*arrays)), exact, "float64", scale)


def test_plan_reports_before_running_and_slices_share_one_plan():
    arrays = _network(RING, 10)
    p = distributed.plan(RING, *arrays, memory_limit=8 * 10)
    assert p.sliced and p.slices == 10 ** len(p.sliced)
    assert p.largest_bytes <= 80 and p.flops > 0 and len(p.path) == 3
    assert p.operand_bytes == 4 * 100 * 8
    slicing._PLANS.clear()
    p.execute(*arrays)
    assert [key[0] for key in slicing._PLANS] == [p.job]  # one plan served every slice


def test_sliced_errors_come_before_anything_runs():
    a = np.ones((4, 4))
    with pytest.raises(OptionsError, match="below the result's 128 bytes"):
        distributed.contract("ab,bc->ac", a, a, memory_limit=100)
    with pytest.raises(OptionsError, match="no element"):
        distributed.contract("ab,ba->", a, a, memory_limit=4)
    with pytest.raises(ShapeError, match="label 'b' has extent 4"):
        distributed.contract("ab,bc->ac", a, np.ones((3, 4)))
    assert issubclass(TransferError, ValueError)


@pytest.fixture(scope="module")
def client():
    with dd.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=None, silence_logs=50) as cluster:
        with dd.Client(cluster) as c:
            yield c


def test_on_a_local_cluster_both_apis_match_the_reference(client):
    arrays = _network(CHAIN, 10, seed=5)
    exact, scale = reference_einsum(CHAIN, *arrays)
    got = distributed.contract(CHAIN, *arrays, client=client, memory_limit=8 * 200)
    assert_close(got, exact, "float64", scale)
    lazy = gpu_tc.einsum(CHAIN, *[_dask(x, 5) for x in arrays], options=MODES[1])
    assert_close(lazy.compute(), exact, "float64", scale)


def test_an_unsendable_operand_is_refused_on_the_client():
    with pytest.raises(TransferError, match=r"operand 1 \(lock\) cannot be sent"):
        slicing._check_sendable([np.ones(3), threading.Lock()], "distributed.contract('a,a')")


class _LostOnce(executor.LocalClient):
    """Runs tasks here, but the first ``lost`` runs end as dask ends a run whose
    scattered operands died with their workers (its reason: lost dependencies)."""

    def __init__(self, lost: int, reason: str = "lost dependencies") -> None:
        self.lost, self.reason, self.scatters = lost, reason, 0

    def scatter(self, values, broadcast=False, hash=True):  # noqa: A002 - dask's name
        self.scatters += 1
        return super().scatter(values, broadcast, hash)

    def submit(self, function, *args, pure=True):
        if self.scatters > self.lost:
            return super().submit(function, *args, pure=pure)
        return _Cancelled(self.reason)


class _Cancelled:
    """A task dask cancelled: ``result()`` raises as distributed's futures do."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def result(self):
        error = CancelledError(f"cancelled for reason: {self.reason}.")
        error.reason = self.reason  # FutureCancelledError's attribute
        raise error


def test_operands_lost_on_the_cluster_are_sent_again():
    """When every copy of the scattered operands is gone, the slices run again after a
    fresh scatter (SEND_ATTEMPTS in all); another cancellation, or losing them on every
    attempt, reaches the caller."""
    arrays = _network(RING, 6, seed=8)
    exact, scale = reference_einsum(RING, *arrays)
    p = distributed.plan(RING, *arrays, memory_limit=8 * 6)
    flaky = _LostOnce(lost=slicing.SEND_ATTEMPTS - 1)
    assert_close(np.asarray(p.execute(*arrays, client=flaky)), exact, "float64", scale)
    assert flaky.scatters == slicing.SEND_ATTEMPTS
    with pytest.raises(CancelledError, match="lost dependencies"):
        p.execute(*arrays, client=_LostOnce(lost=slicing.SEND_ATTEMPTS))
    other = _LostOnce(lost=1, reason="cancelled by the user")
    with pytest.raises(CancelledError, match="by the user"):
        p.execute(*arrays, client=other)
    assert other.scatters == 1


def test_a_worker_killed_mid_contraction_does_not_change_the_result(client):
    arrays = _network(RING, 96, seed=6)
    exact, scale = reference_einsum(RING, *arrays)
    p = distributed.plan(RING, *arrays, memory_limit=8 * 96)  # 96+ slices
    found: dict[str, object] = {}
    worker = threading.Thread(target=lambda: found.update(value=p.execute(*arrays, client=client)))
    worker.start()
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline and worker.is_alive():
        for address, keys in client.has_what().items():
            if any(str(k).startswith("run_slice") for k in keys):
                victim = address  # it holds finished slices: they are lost with it
        time.sleep(0.01)
    assert victim is not None, "no slice finished before the contraction ended"
    os.kill(client.run(os.getpid)[victim], signal.SIGKILL)  # its nanny starts a new one
    worker.join(120)
    assert not worker.is_alive()
    assert_close(np.asarray(found["value"]), exact, "float64", scale)
