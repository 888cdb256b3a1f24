"""einsum's compiled front (gpu_tc._warm, gpu_tc.warm): a warm call of NumPy arrays is
served in C from the plan cache, everything else by the Python function it wraps, with
the same results, the same cache accounting and the same look as that function."""

from __future__ import annotations

import gc
import importlib.util
import inspect
import os
import pickle
import shutil
import sys
import threading
import weakref

import numpy as np
import pytest
from helpers import assert_close, random_array, reference_einsum

import gpu_tc
from gpu_tc import api, warm
from gpu_tc.backend import backend_of_type
from gpu_tc.cache import PLAN_CACHE, ProcessCache
from gpu_tc.errors import ExpressionError, GpuTcError

BUILT = importlib.util.find_spec("gpu_tc._warm") is not None
# Skipped only where no C compiler could have built it; a failed build fails here.
COMPILER = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
needs_built = pytest.mark.skipif(not BUILT and not COMPILER, reason="gpu_tc._warm was not "
                                 "built (no C compiler here): einsum is the Python function")
python_einsum = inspect.unwrap(gpu_tc.einsum)

# Expressions whose warm calls take each kind of warm function: one product, a chain,
# a trace to a scalar, a dot, a diagonal view, a transposed view, a reduction, a
# broadcast product; a sum to a scalar, a batched and a partial trace, a product to a
# vector or a scalar (numpy.dot, numpy.vdot), a product broadcast without a reshape.
CASES = [
    ("ij,jk->ik", [(4, 5), (5, 3)]),
    ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)]),
    ("i,ij,jk,kl->l", [(3,), (3, 4), (4, 5), (5, 2)]),
    ("ii->", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("i,i->", [(8,), (8,)]),
    ("ii->i", [(5, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ijk->", [(3, 4, 5)]),
    ("ijk,kl->ijl", [(4, 4, 4), (4, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bij,bjk->bik", [(2, 4, 4), (2, 4, 4)]),
    ("ij->", [(3, 4)]),
    ("bii->b", [(2, 4, 4)]),
    ("iij->j", [(4, 4, 3)]),
    ("ijkj->ik", [(3, 4, 5, 4)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("ij,j->ij", [(3, 4), (4,)]),
]


@needs_built
def test_einsum_is_the_compiled_front_and_looks_like_the_function():
    """Name, module, docstring, signature and pickling are the Python function's; as a
    class attribute it binds as a method does."""
    front = gpu_tc.einsum
    assert type(front).__name__ == "WarmEinsum"
    assert front.__wrapped__ is python_einsum and inspect.isfunction(python_einsum)
    assert (front.__name__, front.__qualname__, front.__module__) == (
        "einsum", "einsum", "gpu_tc.api")
    assert front.__doc__ == python_einsum.__doc__ and "numpy.einsum" in front.__doc__
    assert inspect.signature(front) == inspect.signature(python_einsum)
    assert pickle.loads(pickle.dumps(front)) is front
    assert api.einsum is front
    assert repr(front).startswith("<function gpu_tc.api.einsum")
    assert weakref.ref(front)() is front

    class Holder:
        product = front

    a = np.arange(6.0).reshape(2, 3)
    with pytest.raises(ExpressionError, match="sublist"):
        Holder().product("ij->ji")  # bound: the instance is the first argument
    assert_close(Holder.product("ij->ji", a), a.T, np.float64, 1.0)


def _recording_front(level: object) -> tuple[object, list[tuple[object, ...]]]:
    """A front over ``level`` whose fallback (the Python function) records each call."""
    from gpu_tc._warm import WarmEinsum

    reached: list[tuple[object, ...]] = []

    def recording(*args: object, **kwargs: object) -> object:
        reached.append(args)
        return python_einsum(*args, **kwargs)

    return WarmEinsum(recording, np.ndarray, level), reached


@pytest.mark.parametrize("expr, shapes", CASES)
def test_a_warm_call_gives_what_the_python_path_gives(expr, shapes, rng):
    """Cold, then warm (served in C where built): values as the reference, and result
    type, dtype, shape, strides, sharing and writability as the Python path's own warm
    call of the same arrays."""
    ops = [random_array(rng, s, np.float64) for s in shapes]
    exact, scale = reference_einsum(expr, *ops)
    cold = gpu_tc.einsum(expr, *ops)
    for _ in range(3):
        got = gpu_tc.einsum(expr, *ops)
        assert_close(got, exact, np.float64, scale)
    assert_close(cold, exact, np.float64, scale)
    python = python_einsum(expr, *ops)
    assert type(got) is type(python) is type(np.einsum(expr, *ops))
    if isinstance(got, np.ndarray):
        assert (got.shape, got.strides, got.dtype) == (python.shape, python.strides,
                                                       python.dtype)
        assert got.flags.writeable == python.flags.writeable
        assert np.shares_memory(got, ops[0]) == np.shares_memory(python, ops[0])


@needs_built
@pytest.mark.parametrize("expr, shapes", CASES)
def test_every_kind_of_warm_call_is_served_in_c(expr, shapes, rng):
    """Each case's warm calls never reach the Python function, and give its values."""
    ops = [random_array(rng, s, np.float64) for s in shapes]
    front, reached = _recording_front(PLAN_CACHE.programs)
    front(expr, *ops)  # cold, or warm from another test: either way a plan is cached
    calls = len(reached)
    exact, scale = reference_einsum(expr, *ops)
    for _ in range(3):
        assert_close(front(expr, *ops), exact, np.float64, scale)
    assert len(reached) == calls


def test_warm_calls_count_and_refresh_as_the_python_path_does(rng):
    """Each warm call is one hit of the programs level and takes the cache's next tick
    for its plan (the least recently used plan is evicted first), as peek() does."""
    a, b = random_array(rng, (4, 5), np.float64), random_array(rng, (5, 3), np.float64)
    c = random_array(rng, (6, 6), np.float64)
    cache = gpu_tc.plan_cache()
    cache.clear()
    gpu_tc.einsum("ij,jk->ik", a, b)
    before = PLAN_CACHE.programs.stats()
    for _ in range(5):
        gpu_tc.einsum("ij,jk->ik", a, b)
    after = PLAN_CACHE.programs.stats()
    assert (after.hits - before.hits, after.misses - before.misses) == (5, 0)

    gpu_tc.einsum("ii->", c)  # plans newer than the product's
    gpu_tc.einsum("ii->", c)
    key = ("ij,jk->ik", a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype)
    assert PLAN_CACHE.programs._entries[key][1] < _newest_tick(cache)
    gpu_tc.einsum("ij,jk->ik", a, b)
    assert PLAN_CACHE.programs._entries[key][1] == _newest_tick(cache)
    cache.clear()


def _newest_tick(cache: gpu_tc.cache.ProcessCache) -> int:
    return max(entry[1] for level in cache.levels for entry in level._entries.values())


@needs_built
def test_the_front_serves_plain_warm_calls_and_passes_on_the_rest(rng):
    """Of a front over a recording function: cold calls, keywords, subclasses and plans
    without a warm function reach the function (a plan without one counted once, by
    the function); plain warm calls do not. The cache starts empty: a plan an earlier
    test in this process left would make a cold call here warm."""
    gpu_tc.plan_cache().clear()
    front, reached = _recording_front(PLAN_CACHE.programs)
    a, b = random_array(rng, (4, 5), np.float64), random_array(rng, (5, 3), np.float64)
    exact, scale = reference_einsum("ij,jk->ik", a, b)
    fortran = np.asfortranarray(b)
    mixed = b.astype(np.float32)
    passed = [
        (("ij,jk->ik", a, b), {}),  # cold
        (("ij,jk->ik", a, b), {"optimize": False}),
        (("ij,jk->ik", a.view(_Subclass), b), {}),
        (("ij,jk->ik", a, fortran), {}),  # another layout: cold
        (("ij,jk->ik", a, mixed), {}),  # cold
    ]
    for args, kwargs in passed:
        expected, bound = reference_einsum(*args)
        assert_close(front(*args, **kwargs), expected, np.float64, bound)
    key = ("ij,jk->ik", a.shape, a.strides, a.dtype, mixed.shape, mixed.strides, mixed.dtype)
    assert PLAN_CACHE.programs.peek(key).fast is None  # its plan converts
    hits = PLAN_CACHE.programs.stats().hits
    front("ij,jk->ik", a, mixed)  # warm, no warm function: the Python function's
    assert PLAN_CACHE.programs.stats().hits == hits + 1
    assert len(reached) == len(passed) + 1
    for args in [("ij,jk->ik", a, b), ("ij,jk->ik", a, fortran)] * 3:
        assert_close(front(*args), exact, np.float64, scale)
    assert len(reached) == len(passed) + 1


@needs_built
@pytest.mark.parametrize("kind, served", [
    ("read-only", True), ("misaligned", True), ("0-d", True), ("empty", True),
    ("negative strides", True),
    ("byte-swapped", False),  # the Python path casts it and keeps no warm plan
])
def test_the_c_key_is_the_cpu_backends_warm_key(kind, served, rng):
    """For operands of every kind of layout, C serves a warm call exactly where the
    Python path stored a plan with a warm function under CpuBackend.warm_key."""
    a = random_array(rng, (3, 4), np.float64)
    if kind == "read-only":
        a.flags.writeable = False
    elif kind == "misaligned":
        raw = np.zeros(a.nbytes + 1, np.uint8)[1:].view(np.float64).reshape(3, 4)
        raw[...] = a
        a = raw
        assert not a.flags.aligned
    elif kind == "byte-swapped":
        a = a.astype(a.dtype.newbyteorder())
    elif kind == "empty":
        a = np.zeros((0, 4))
    elif kind == "negative strides":
        a = a[::-1, ::-2]
    expr, ops = (",->", [np.full((), 2.0), np.full((), 3.0)]) if kind == "0-d" else (
        "ij->i", [a])
    front, reached = _recording_front(PLAN_CACHE.programs)
    front(expr, *ops)
    plan = PLAN_CACHE.programs.peek(backend_of_type(np.ndarray).warm_key((expr, *ops)))
    assert (plan is not None and plan.fast is not None) == served
    calls = len(reached)
    got = front(expr, *ops)
    assert len(reached) == calls + (0 if served else 1)
    expected = np.einsum(expr, *ops)
    assert type(got) is type(expected)
    assert_close(got, expected, np.float64, float(np.abs(a).sum()) + 6.0)


def test_calls_the_front_does_not_serve_go_to_the_python_function(rng):
    """Keywords, subclasses, lists, scalars, the interleaved form, more operands than
    the front keys and bad input: the Python function's results and errors."""
    a, b = random_array(rng, (4, 5), np.float64), random_array(rng, (5, 3), np.float64)
    gpu_tc.einsum("ij,jk->ik", a, b)  # warm for the plain arrays
    exact, scale = reference_einsum("ij,jk->ik", a, b)
    out = np.empty((4, 3))
    assert gpu_tc.einsum("ij,jk->ik", a, b, out=out) is out
    assert_close(out, exact, np.float64, scale)
    assert_close(gpu_tc.einsum("ij,jk->ik", a, b, optimize=True), exact, np.float64, scale)
    got = gpu_tc.einsum("ij,jk->ik", a.view(_Subclass), b)
    assert_close(got, exact, np.float64, scale)
    assert_close(gpu_tc.einsum("ij,jk->ik", a.tolist(), b), exact, np.float64, scale)
    assert gpu_tc.einsum("i,->i", np.ones(3), 2.0).tolist() == [2.0, 2.0, 2.0]
    assert_close(gpu_tc.einsum(a, [0, 1], b, [1, 2], [0, 2]), exact, np.float64, scale)
    many = [np.full(2, 1.0 + i / 64) for i in range(40)]
    subscripts = ",".join("i" * 40) + "->i"
    got = gpu_tc.einsum(subscripts, *many)
    assert_close(got, np.prod(np.stack(many), axis=0), np.float64, 1.0)
    for bad in [("ij,jk->ik", a), ("ij,jk->iq", a, b), ("ij,jk->ik", a, a)]:
        with pytest.raises(GpuTcError) as front_error:
            gpu_tc.einsum(*bad)
        with pytest.raises(GpuTcError) as python_error:
            python_einsum(*bad)
        assert str(front_error.value) == str(python_error.value)


class _Subclass(np.ndarray):
    """Not exactly a NumPy array: never served by the front."""


@needs_built
@pytest.mark.parametrize("expr, shapes", [CASES[0], CASES[2], CASES[3], CASES[6]])
def test_warm_calls_hold_no_references(expr, shapes, rng):
    """Ten thousand warm calls leave the operands', the plan's, its cache entry's and
    its warm function's reference counts as they were, and allocate no lasting
    memory (the C path releases what it takes)."""
    ops = [random_array(rng, s, np.float64) for s in shapes]
    gpu_tc.einsum(expr, *ops)
    key = backend_of_type(np.ndarray).warm_key((expr, *ops))
    plan = PLAN_CACHE.programs.peek(key)
    watched = [*ops, plan, plan.fast, PLAN_CACHE.programs._entries[key]]
    counts = [sys.getrefcount(x) for x in watched]
    for _ in range(100):
        gpu_tc.einsum(expr, *ops)
    gc.collect()
    blocks = sys.getallocatedblocks()
    for _ in range(10_000):
        gpu_tc.einsum(expr, *ops)
    gc.collect()
    assert sys.getallocatedblocks() - blocks < 100
    assert [sys.getrefcount(x) for x in watched] == counts


class _Plan:
    """A hand-made cache entry's plan: its warm function."""

    def __init__(self, fast: object) -> None:
        self.fast = fast


@needs_built
def test_a_warm_function_that_raises_or_evicts(rng):
    """On a private cache: an error of the warm function passes through (its hit
    counted, nothing held); a warm function that empties the cache still returns its
    result; a plan whose warm function is None goes to the function, uncounted in C."""
    cache = ProcessCache()
    level = cache.programs
    front, reached = _recording_front(level)
    a = np.ones((2, 2))
    key = ("ij->ji", a.shape, a.strides, a.dtype)

    def boom(*operands: object) -> object:
        raise ZeroDivisionError("boom")

    plan = level.get_or_build(key, lambda: _Plan(boom))
    counts = [sys.getrefcount(plan), sys.getrefcount(level._entries[key])]
    for _ in range(3):
        with pytest.raises(ZeroDivisionError, match="boom"):
            front("ij->ji", a)
    assert level.stats().hits == 3 and reached == []
    assert [sys.getrefcount(plan), sys.getrefcount(level._entries[key])] == counts

    def evicting(*operands: object) -> object:
        cache.clear()
        return "the result"

    cache.clear()
    level.get_or_build(key, lambda: _Plan(evicting))
    assert front("ij->ji", a) == "the result" and len(level) == 0 and reached == []

    level.get_or_build(key, lambda: _Plan(None))
    assert_close(front("ij->ji", a), a.T, np.float64, 1.0)
    assert len(reached) == 1 and level.stats().hits == 0  # the function counts its own


def test_warm_calls_from_threads_agree_while_plans_are_evicted(rng):
    """Four threads calling warm plans while a fifth empties the cache again and again,
    with a thread switch forced every microsecond: every result right."""
    ops = {expr: [random_array(rng, s, np.float64) for s in shapes] for expr, shapes in CASES}
    expected = {expr: reference_einsum(expr, *arrays) for expr, arrays in ops.items()}
    failures: list[str] = []
    done = threading.Event()

    def work() -> None:
        for _ in range(30):
            for expr, arrays in ops.items():
                got = gpu_tc.einsum(expr, *arrays)
                exact, scale = expected[expr]
                if not np.allclose(got, exact, rtol=1e-12, atol=1e-12 * scale):
                    failures.append(expr)

    def evict() -> None:
        while not done.is_set():
            gpu_tc.plan_cache().clear()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=work) for _ in range(4)]
        evictor = threading.Thread(target=evict)
        for t in [*workers, evictor]:
            t.start()
        for t in workers:
            t.join()
    finally:
        done.set()
        evictor.join()
        sys.setswitchinterval(interval)
    assert failures == []


def test_an_extension_that_does_not_fit_leaves_the_function_with_a_warning(monkeypatch):
    """A gpu_tc._warm built for other code (its type refuses this cache): einsum stays
    the Python function, with a RuntimeWarning, and gpu_tc still imports."""

    def refusing(*args: object) -> object:
        raise TypeError("WarmEinsum(fallback, array_type, level): a callable and a type")

    monkeypatch.setattr(warm, "_warm_type", lambda: refusing)

    def function(*args: object) -> str:
        return "python"

    with pytest.warns(RuntimeWarning, match="does not fit"):
        assert warm.front(PLAN_CACHE.programs)(function) is function


def test_without_the_extension_the_front_is_the_function_itself(monkeypatch):
    """Where gpu_tc._warm was not built, warm.front leaves the function as it is."""
    monkeypatch.setattr(warm, "_warm_type", lambda: None)

    def function(*args: object) -> str:
        return "python"

    assert warm.front(PLAN_CACHE.programs)(function) is function
