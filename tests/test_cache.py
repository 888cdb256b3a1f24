"""PlanCache: counters, LRU eviction, capacity, thread safety, and the regressions that
bit others: plans keyed by value must never be shared by problems that only look alike
(same shapes, other labels, strides, dtypes, operators or out)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from helpers import assert_close, check_einsum, random_array, reference_einsum

import gpu_tc
from gpu_tc import BinaryOp, ReduceOp, UnaryOp, reference


@pytest.fixture
def global_cache():
    """The process-wide cache, cleared, with its capacity restored afterwards."""
    cache = gpu_tc.plan_cache()
    capacity = cache.capacity
    cache.clear()
    yield cache
    cache.capacity = capacity
    cache.clear()


# --- PlanCache on its own -------------------------------------------------------------


def test_counters_and_lru_order():
    cache = gpu_tc.PlanCache(capacity=2)
    built: list[str] = []

    def builder(name: str) -> Callable[[], object]:
        def build() -> object:
            built.append(name)
            return object()

        return build

    a = cache.get_or_build(("a",), builder("a"))
    b = cache.get_or_build(("b",), builder("b"))
    assert cache.get_or_build(("a",), builder("a")) is a  # hit; "a" is now most recent
    assert cache.stats() == gpu_tc.CacheStats(hits=1, misses=2, evictions=0, size=2, capacity=2)
    c = cache.get_or_build(("c",), builder("c"))  # evicts "b", the least recently used
    assert cache.stats() == gpu_tc.CacheStats(hits=1, misses=3, evictions=1, size=2, capacity=2)
    assert cache.get_or_build(("a",), builder("a")) is a
    assert cache.get_or_build(("c",), builder("c")) is c
    b2 = cache.get_or_build(("b",), builder("b"))  # rebuilt
    assert b2 is not b
    assert built == ["a", "b", "c", "b"]
    assert len(cache) == 2
    assert cache.stats().evictions == 2
    assert "size=2" in repr(cache) and "capacity=2" in repr(cache)


def test_keys_compare_by_value():
    cache = gpu_tc.PlanCache()
    first = cache.get_or_build(("einsum", "ab,bc->ac", ((2, 3), (3, 4))), lambda: "plan")
    again = cache.get_or_build(("einsum", "ab,bc->ac", ((2, 3), (3, 4))), lambda: "other")
    assert first == again == "plan"
    other = cache.get_or_build(("einsum", "ab,cb->ac", ((2, 3), (3, 4))), lambda: "other")
    assert other == "other"
    assert cache.stats().hits == 1 and cache.stats().misses == 2


def test_clear_resets_everything():
    cache = gpu_tc.PlanCache(capacity=1)
    for key in range(3):
        cache.get_or_build(key, lambda: "x")
    cache.get_or_build(2, lambda: "x")
    cache.clear()
    assert cache.stats() == gpu_tc.CacheStats(0, 0, 0, 0, 1)
    assert len(cache) == 0


def test_capacity_setter_evicts_least_recently_used():
    cache = gpu_tc.PlanCache(capacity=5)
    for key in range(5):
        cache.get_or_build(key, lambda k=key: f"plan{k}")
    cache.get_or_build(0, lambda: "rebuilt")  # 0 is now the most recent
    cache.capacity = 2
    stats = cache.stats()
    assert (stats.size, stats.capacity, stats.evictions) == (2, 2, 3)
    assert cache.get_or_build(0, lambda: "rebuilt") == "plan0"
    assert cache.get_or_build(4, lambda: "rebuilt") == "plan4"
    assert cache.get_or_build(1, lambda: "rebuilt") == "rebuilt"
    cache.capacity = 10  # growing keeps what is there
    assert cache.stats().size == 2


def test_capacity_zero_builds_every_time():
    cache = gpu_tc.PlanCache(capacity=0)
    values = [cache.get_or_build("k", lambda i=i: i) for i in range(3)]
    assert values == [0, 1, 2]
    stats = cache.stats()
    assert (stats.size, stats.misses, stats.hits, stats.evictions) == (0, 3, 0, 3)


def test_threads_build_each_key_into_one_plan():
    cache = gpu_tc.PlanCache(capacity=64)
    keys = [("k", i % 16) for i in range(800)]
    lock = threading.Lock()
    builds: list[Any] = []

    def get(key: Any) -> Any:
        def build() -> Any:
            with lock:
                builds.append(key)
            return ("plan", key)

        return cache.get_or_build(key, build)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(get, keys))
    assert results == [("plan", k) for k in keys]
    stats = cache.stats()
    assert stats.hits + stats.misses == len(keys)
    assert stats.misses == len(builds) >= 16
    assert stats.size == 16


# --- the process-wide cache behind einsum ---------------------------------------------


def test_einsum_misses_then_hits(global_cache, rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    gpu_tc.einsum("ij,jk->ik", a, b)
    first = global_cache.stats()
    assert first.misses >= 1 and first.size >= 1
    check_einsum("ij,jk->ik", a, b)
    second = global_cache.stats()
    assert second.misses == first.misses
    assert second.hits > first.hits
    assert second.size == first.size


@pytest.fixture
def backend_builds(monkeypatch):
    """Counts of the CPU backend's plan builds (the work a shared plan saves)."""
    from cpu_fallback.backend import CpuBackend

    counts: collections.Counter[str] = collections.Counter()
    for name in ("contraction_plan", "permutation_plan", "reduction_plan", "elementwise_plan"):
        original = getattr(CpuBackend, name)

        def counted(self: Any, problem: Any, options: Any, _f: Any = original, _n: str = name):
            counts[_n] += 1
            return _f(self, problem, options)

        monkeypatch.setattr(CpuBackend, name, counted)
    return counts


SHARED = [
    pytest.param("ij,jk->ik", "ab,bc->ac", [(3, 4), (4, 5)], id="renamed"),
    pytest.param("ij,jk->ik", "ij,jk", [(3, 4), (4, 5)], id="implicit"),
    pytest.param("ij,jk->ik", "xy, yz -> xz", [(3, 4), (4, 5)], id="white-space"),
    pytest.param(
        "wxyz,zxvw->vy", "abcd,dbea->ec", [(2, 3, 4, 5), (5, 3, 6, 2)], id="cotengra-example"
    ),
    pytest.param("ii->i", "aa->a", [(4, 4)], id="diagonal"),
    pytest.param("ijk->ki", "abc->ca", [(2, 3, 4)], id="reduction"),
    pytest.param("...ij,...jk->...ik", "...ab,...bc->...ac", [(2, 3, 4), (2, 4, 5)], id="ellipsis"),
    pytest.param("ab,bc,cd->ad", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], id="chain"),
]


@pytest.mark.parametrize("first, second, shapes", SHARED)
def test_equivalent_expressions_share_plans(
    first, second, shapes, global_cache, backend_builds, rng
):
    """Canonical labels: an equivalent expression builds no new backend plan."""
    operands = [rng.standard_normal(s) for s in shapes]
    check_einsum(first, *operands)
    builds = sum(backend_builds.values())
    assert builds >= 1
    check_einsum(second, *operands)
    assert sum(backend_builds.values()) == builds
    assert global_cache.stats().hits >= 1


def test_canonical_sharing_through_the_out_path(global_cache, backend_builds, rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    out = np.zeros((3, 5))
    check_einsum("ij,jk->ik", a, b, out=out)
    stats, builds = global_cache.stats(), sum(backend_builds.values())
    check_einsum("ab,bc->ac", a, b, out=out)
    assert global_cache.stats().misses == stats.misses
    assert sum(backend_builds.values()) == builds


def test_interleaved_form_shares_the_string_plan(global_cache, backend_builds, rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    gpu_tc.einsum("ij,jk->ik", a, b)
    builds = sum(backend_builds.values())
    got = gpu_tc.einsum(a, [0, 1], b, [1, 2], [0, 2])
    assert sum(backend_builds.values()) == builds
    assert_close(got, reference.einsum("ij,jk->ik", a, b), np.float64)


def test_other_expressions_build_other_plans(global_cache, backend_builds, rng):
    a = rng.standard_normal((4, 4))
    gpu_tc.einsum("ij,jk->ik", a, a)
    builds = sum(backend_builds.values())
    gpu_tc.einsum("ij,kj->ik", a, a)
    assert sum(backend_builds.values()) > builds


# --- aliasing regressions: alternate look-alike problems, results stay right -----------


def _alternate(
    calls: list[Callable[[], Any]], expected: list[Any], dtype: Any = np.float64, rounds: int = 3
) -> None:
    for _ in range(rounds):
        for call, exact in zip(calls, expected):
            assert_close(call(), exact, dtype, np.abs(exact) + 1)


def test_same_shapes_other_labels(global_cache, rng):
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    expressions = [
        "ij,jk->ik",
        "ij,kj->ik",
        "ij,jk->ki",
        "ji,jk->ik",
        "ij,ij->ij",
        "ij,ji->ij",
        "ij,jk->i",
        "ij,ik->jk",
        "ii,jk->jk",
        "ij,jj->ij",
    ]
    calls = [lambda e=e: gpu_tc.einsum(e, a, b) for e in expressions]
    _alternate(calls, [reference.einsum(e, a, b) for e in expressions])
    assert global_cache.stats().misses >= len(expressions)


def test_same_shapes_other_strides(global_cache, rng):
    base = rng.standard_normal((8, 8))
    b = rng.standard_normal((4, 4))
    views = [
        base[:4, :4].copy(),
        np.asfortranarray(base[:4, :4]),
        base[:4, :4].T.copy().T,
        base[:4, :4],
        base[::2, ::2],
        base[3::-1, :4],
        base[:4, :4].T,
        np.broadcast_to(base[0, :4], (4, 4)),
    ]
    for subscripts in ("ij,jk->ik", "ij,kj->ki", "ii->i", "ii", "ij->ji", "ij->j", "ij,jk,kl"):
        operands = [[v, b, v][: subscripts.count(",") + 1] for v in views]
        calls = [lambda ops=ops, s=subscripts: gpu_tc.einsum(s, *ops) for ops in operands]
        _alternate(calls, [reference.einsum(subscripts, *ops) for ops in operands])


def test_same_shapes_other_dtypes(global_cache, rng):
    host = rng.standard_normal((4, 4))
    arrays = [host.astype(d) for d in ("float32", "float64")] + [
        (host + 1j * host.T).astype(d) for d in ("complex64", "complex128")
    ]
    calls = [lambda x=x: gpu_tc.einsum("ij,jk->ik", x, x) for x in arrays]
    for _ in range(2):
        for call, x in zip(calls, arrays):
            got = call()
            assert got.dtype == x.dtype
            exact, scale = reference_einsum("ij,jk->ik", x, x)
            assert_close(got, exact, x.dtype, scale)


def test_same_shapes_other_out_layouts(global_cache, rng):
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    exact = reference.einsum("ij,jk->ik", a, b)
    outs: list[Callable[[], Any]] = [
        lambda: None,
        lambda: np.zeros((4, 4)),
        lambda: np.zeros((4, 4), order="F"),
        lambda: np.zeros((8, 8))[::2, 1::2],
        lambda: np.zeros((4, 4))[::-1],
    ]
    for _ in range(3):
        for make in outs:
            out = make()
            got = gpu_tc.einsum("ij,jk->ik", a, b, out=out)
            assert out is None or got is out
            assert_close(got, exact, np.float64, np.abs(a) @ np.abs(b))


def test_same_layout_other_operators(global_cache, rng):
    a = rng.uniform(0.5, 2.0, (3, 4))
    c = rng.uniform(0.5, 2.0, (3, 4))
    calls = [
        lambda op=op: gpu_tc.permute("ij->ji", a, op_a=op)
        for op in (UnaryOp.IDENTITY, UnaryOp.NEG, UnaryOp.SQRT, UnaryOp.ABS)
    ]
    expected = [
        reference.permute("ij->ji", a, 1, op)
        for op in (UnaryOp.IDENTITY, UnaryOp.NEG, UnaryOp.SQRT, UnaryOp.ABS)
    ]
    calls += [lambda op=op: gpu_tc.reduce("ij->j", a, op=op) for op in ReduceOp]
    expected += [reference.reduce("ij->j", a, op) for op in ReduceOp]
    calls += [lambda op=op: gpu_tc.elementwise_binary("ij,ij->ij", a, c, op=op) for op in BinaryOp]
    expected += [
        reference.elementwise("ij,ij->ij", [a, c], [1, 1], [UnaryOp.IDENTITY] * 2, [op])
        for op in BinaryOp
    ]
    _alternate(calls, expected)


def test_same_layout_other_scalars(global_cache, rng):
    """Scalars are arguments of execute, not part of a plan: alternating them is safe."""
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    c = rng.standard_normal((4, 3))
    scalars = [(1, 0), (2.0, 0), (1, 1), (-0.5, 3.0)]
    calls = [
        lambda al=al, be=be: gpu_tc.contract("ij,jk->ik", a, b, alpha=al, beta=be, c=c)
        for al, be in scalars
    ]
    _alternate(calls, [reference.contract("ij,jk->ik", a, b, al, be, c) for al, be in scalars])


def test_trace_axes_and_views(global_cache, rng):
    a = rng.standard_normal((4, 4, 4))
    cases = [
        ((x, ax1, ax2), np.trace(x, axis1=ax1, axis2=ax2))
        for x, ax1, ax2 in [
            (a, 0, 1),
            (a, 1, 0),
            (a, 0, 2),
            (a, 1, 2),
            (a.T, 0, 1),
            (a[::-1], 0, 1),
            (a[:, ::-1], 2, 1),
        ]
    ]
    calls = [
        lambda args=args: gpu_tc.trace(args[0], axis1=args[1], axis2=args[2]) for args, _ in cases
    ]
    _alternate(calls, [expected for _, expected in cases])


def test_warm_reduce_calls_keep_their_own_plans(global_cache, rng):
    """A reduce into a new result with alpha 1 and beta 0 is served by its flat key from
    the second call on; operators, views, other subscripts and scaled calls keep plans
    and results of their own."""
    from gpu_tc.backend import backend_of_type
    from gpu_tc.planner import reduce_warm_key

    a = rng.standard_normal((4, 5, 6))
    sum_, max_, ident, neg = ReduceOp.SUM, ReduceOp.MAX, UnaryOp.IDENTITY, UnaryOp.NEG
    cases = [
        (("ijk->i", a, sum_, ident), a.sum(axis=(1, 2))),
        (("ijk->i", a, max_, ident), a.max(axis=(1, 2))),
        (("ijk->i", a, sum_, neg), -a.sum(axis=(1, 2))),
        (("ijk->k", a, sum_, ident), a.sum(axis=(0, 1))),
        (("ijk->i", a.transpose(2, 1, 0), sum_, ident), a.sum(axis=(0, 1))),
        (("ijk->i", a[::-1], sum_, ident), a[::-1].sum(axis=(1, 2))),
        (("ijk->", a, sum_, ident), a.sum()),
    ]
    calls: list[Callable[[], Any]] = [
        lambda s=s, x=x, op=op, op_a=op_a: gpu_tc.reduce(s, x, op=op, op_a=op_a)
        for (s, x, op, op_a), _ in cases
    ]
    calls.append(lambda: gpu_tc.reduce("ijk->i", a, alpha=2))
    _alternate(calls, [expected for _, expected in cases] + [2 * a.sum(axis=(1, 2))])
    backend = backend_of_type(np.ndarray)
    key = reduce_warm_key(backend, "ijk->i", a, sum_, ident)
    assert key is not None and global_cache.programs.peek(key) is not None
    assert reduce_warm_key(backend, "ijk->i", a, "SUM", ident) is None
    assert np.ndim(gpu_tc.reduce("ijk->", a)) == 0 and isinstance(gpu_tc.reduce("ijk->", a),
                                                                  np.float64)


def test_options_join_the_key(global_cache, rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    gpu_tc.einsum("ij,jk->ik", a, b)
    size = global_cache.stats().size
    got = gpu_tc.einsum("ij,jk->ik", a, b, options=gpu_tc.Options(allow_cublas=False))
    assert global_cache.stats().size > size
    assert_close(got, reference.einsum("ij,jk->ik", a, b), np.float64)


def test_held_plan_survives_eviction(global_cache, rng):
    a = rng.standard_normal((3, 3))
    plan = gpu_tc.prepare("ij,jk->ik", a, a)
    global_cache.clear()
    global_cache.capacity = 0
    assert_close(plan.execute(a, a), a @ a, np.float64, np.abs(a) @ np.abs(a))


def test_global_capacity_zero_still_computes(global_cache, rng):
    global_cache.capacity = 0
    for subscripts, shapes in [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("ab,bc,cd->da", [(2, 3), (3, 4), (4, 5)]),
        ("ii->", [(4, 4)]),
        ("ijk->kj", [(2, 3, 4)]),
    ]:
        operands = [rng.standard_normal(s) for s in shapes]
        for _ in range(2):
            check_einsum(subscripts, *operands)
    assert gpu_tc.trace(np.eye(3)) == 3
    assert global_cache.stats().size == 0


def test_global_capacity_setter_evicts(global_cache, rng):
    for n in range(2, 8):
        gpu_tc.einsum("ij,jk->ik", np.ones((n, n)), np.ones((n, n)))
    assert global_cache.stats().size >= 6
    global_cache.capacity = 3
    stats = global_cache.stats()
    assert stats.size == 3 and stats.evictions >= 3
    check_einsum("ij,jk->ik", rng.standard_normal((2, 2)), rng.standard_normal((2, 2)))


# --- many threads on one cache -----------------------------------------------------------


def _workload(rng: np.random.Generator) -> list[tuple[str, list[Any]]]:
    """Look-alike problems: shared shapes, other labels and layouts."""
    x = rng.standard_normal((6, 6))
    y = rng.standard_normal((6, 6))
    z = rng.standard_normal((6, 6)) + 1j * rng.standard_normal((6, 6))
    views = [x, x.T, np.asfortranarray(x), x[::-1], rng.standard_normal((12, 12))[::2, ::2]]
    work: list[tuple[str, list[Any]]] = []
    for v in views:
        for subscripts in ("ij,jk->ik", "ij,kj->ik", "ij,jk->ki", "ij,ij->ij", "ij,jk->k"):
            work.append((subscripts, [v, y]))
        work.append(("ii->i", [v]))
        work.append(("ij->ji", [v]))
    work += [
        ("ij,jk->ik", [z, z]),
        ("ij,jk,kl->il", [x, y, z]),
        ("bij,bjk->bik", [rng.standard_normal((3, 33, 34)), rng.standard_normal((3, 34, 35))]),
    ]
    return work


@pytest.mark.parametrize("capacity", [512, 4, 0], ids=["roomy", "evicting", "zero"])
def test_threads_hammering_the_global_cache(capacity, global_cache, rng):
    global_cache.capacity = capacity
    work = _workload(rng)
    expected = [reference_einsum(s, *ops) for s, ops in work]
    jobs = [i % len(work) for i in range(320)]
    rng.shuffle(jobs)

    def run(i: int) -> tuple[int, Any]:
        subscripts, operands = work[i]
        return i, gpu_tc.einsum(subscripts, *operands)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, jobs))
    for i, got in results:
        exact, scale = expected[i]
        assert_close(got, exact, got.dtype, scale)
    assert global_cache.stats().size <= capacity


def test_threads_with_operations_and_out(global_cache, rng):
    """Every thread writes its own out; plans are shared, buffers are not."""
    a = random_array(rng, (5, 6), np.float64)
    b = random_array(rng, (6, 7), np.float64)

    def run(i: int) -> bool:
        out = np.zeros((5, 7)) if i % 2 else np.zeros((5, 7), order="F")
        gpu_tc.contract("ij,jk->ik", a, b, alpha=i, out=out)
        t = gpu_tc.trace(a[:, :5] * i)
        return bool(np.allclose(out, i * (a @ b)) and np.isclose(t, i * np.trace(a[:, :5])))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(run, range(200)))


def test_shared_plans_explain_themselves_in_the_callers_letters(global_cache):
    a, b = np.ones((8, 9, 10, 11)), np.ones((11, 9, 12, 8))
    first = gpu_tc.prepare("abcd,dbea->ec", a, b)
    second = gpu_tc.prepare("wxyz,zxqw->qy", a, b)  # the same cached plans underneath
    assert "A packed: labels 'abd' do not merge" in first.reason
    assert "A packed: labels 'wxz' do not merge" in second.reason
    assert "'abd'" not in second.reason
