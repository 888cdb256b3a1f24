"""The gathered small-K plan (cpu_fallback.gathered over small_k.c's offset tables):
contractions whose operands are read and written where they lie, against the
reference kernel: unmergeable groups, batch labels, reversed and strided views, D's
columns in short runs, tails of tiles, alpha, beta, thread counts and the tables'
bounds; and where it is not offered."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from helpers import call_until_reason

import gpu_tc
from cpu_fallback import kernels
from cpu_fallback.contraction import CpuContractionPlan
from cpu_fallback.gathered import GatheredPlan, gathered_plans
from gpu_tc import reference
from gpu_tc.backend import Scalars
from gpu_tc.compose import relabel
from gpu_tc.problem import ContractionProblem, contiguous_spec, dtype_char

pytestmark = pytest.mark.skipif(not kernels.built("_small_k"),
                                reason="cpu_fallback._small_k was not built (no C compiler)")

TOLERANCE = {np.float64: 1e-12, np.float32: 2e-5}


def _small_k():
    """cpu_fallback.small_k, imported by the tests that run (where the kernel was built)."""
    from cpu_fallback import small_k
    return small_k


def _problem(subscripts: str, *operands: np.ndarray):
    return gpu_tc.prepare(subscripts, *operands)._plan.program.final


def _plan(problem, budget=None, build=None) -> GatheredPlan:
    """The gathered plan by the kernel's widest build, or the narrower one ``build``
    names (the plans come widest first, then one for each narrower build)."""
    plans = gathered_plans(problem, CpuContractionPlan(problem), budget)
    builds = (None, *_small_k().narrower_builds())
    assert len(plans) == len(builds)
    return plans[builds.index(build)]


def _c_order_problem(subscripts: str, shapes, dtype) -> ContractionProblem:
    """The contraction of C-ordered operands into a C-ordered D."""
    terms, d_labels = subscripts.split("->")
    specs = [contiguous_spec(t, s, dtype_char(dtype)) for t, s in zip(terms.split(","), shapes)]
    extents = {x: n for t, s in zip(terms.split(","), shapes) for x, n in zip(t, s)}
    d = contiguous_spec(d_labels, [extents[x] for x in d_labels], dtype_char(dtype))
    return ContractionProblem(specs[0], specs[1], d)


def _d_like(spec, dtype, fill=np.nan) -> np.ndarray:
    """An array laid out as the problem's D."""
    memory = np.full(int(np.prod(spec.extents)), fill, dtype)
    strides = tuple(s * memory.itemsize for s in spec.strides)
    return np.lib.stride_tricks.as_strided(memory, spec.extents, strides)


def _expected(subscripts, operands, alpha=1.0):
    return alpha * reference.einsum(subscripts, *(x.astype(np.float64) for x in operands))


def _assert_close(d, expected, k):
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.abs(d - expected).max() <= TOLERANCE[d.dtype.type] * scale * k


CASES = [
    # TCCG case 10 (B's columns d, c, a do not merge), small
    ("be,dcea->dcba", {"a": 7, "b": 9, "c": 5, "d": 3, "e": 11}),
    # TCCG case 42: D's columns in runs of a's 5 (scattered tiles), K = 6
    ("cbdg,agfe->fedcba", {"a": 5, "b": 3, "c": 4, "d": 3, "e": 6, "f": 2, "g": 6}),
    # the same with runs of 11: whole vectors, then a tail, in each
    ("cbdg,agfe->fedcba", {"a": 11, "b": 2, "c": 3, "d": 2, "e": 3, "f": 2, "g": 5}),
    # D's unit-stride label a free label of the first operand: the operands swap roles
    ("be,dcea->dcab", {"a": 7, "b": 9, "c": 5, "d": 3, "e": 11}),
    # batch labels x, y, K = 1, rows and columns with tails
    ("xkiy,yjkx->yxij", {"x": 3, "y": 2, "k": 1, "i": 13, "j": 29}),
    # K = 64 over two labels, one free label each side
    ("pqi,jqp->ij", {"p": 8, "q": 8, "i": 17, "j": 41}),
    # K = 512, one block of terms: panels of fewer columns
    ("pqi,jqp->ij", {"p": 16, "q": 32, "i": 19, "j": 53}),
    # K = 1300 in three blocks (each after the first added into D), D's columns in runs
    ("cbdg,agfe->fedcba", {"a": 7, "b": 3, "c": 2, "d": 3, "e": 5, "f": 2, "g": 1300}),
    # broadcast products (nothing contracted: K = 1 with no label), tails of rows and
    # columns; a batch label; D's columns (f, b, c) in runs of f's 2 (the labels interleave)
    ("i,j->ij", {"i": 37, "j": 53}),
    ("bi,bj->bij", {"b": 3, "i": 19, "j": 35}),
    ("dea,fbc->abcdef", {"a": 9, "b": 6, "c": 5, "d": 7, "e": 4, "f": 2}),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("subscripts, sizes", CASES)
def test_the_result_is_the_references(rng, subscripts, sizes, dtype):
    """Every operand in C order, D too (its columns split by its rows where the
    subscripts interleave them)."""
    terms = subscripts.split("->")[0].split(",")
    operands = [rng.standard_normal([sizes[x] for x in t]).astype(dtype) for t in terms]
    problem = _c_order_problem(subscripts, [x.shape for x in operands], dtype)
    plan = _plan(problem)
    assert plan.route == "small-k:gathered" and "writes D in place: no copies" in plan.reason
    assert ("reads B, A" in plan.reason) == (subscripts == "be,dcea->dcab")
    # Its label groups are in the form a plan's reason is put into the caller's labels by.
    renamed = relabel(plan.reason, {x: x.upper() for x in subscripts if x.isalpha()})
    groups = re.findall(r"(rows|columns|batch) labels '([^']*)'", renamed)
    assert groups and all(labels.isupper() for _, labels in groups)
    d = _d_like(problem.d, dtype)
    plan.execute(tuple(operands), d, Scalars(alpha=2.0), None)
    _assert_close(d, _expected(subscripts, operands, 2.0), 64)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("subscripts, sizes", CASES)
def test_a_narrower_build_writes_the_widest_builds_bits(rng, subscripts, sizes, dtype):
    """Plans time the kernel's narrower build on the gathered route too (route
    "small-k-avx2:gathered"); each element sums its terms in the same order, so it
    writes the widest build's bits, and the reference's values."""
    if not _small_k().narrower_builds():
        pytest.skip(f"the small-K kernel runs its {_small_k().isa()} build here and names no "
                    "other")
    terms = subscripts.split("->")[0].split(",")
    operands = [rng.standard_normal([sizes[x] for x in t]).astype(dtype) for t in terms]
    problem = _c_order_problem(subscripts, [x.shape for x in operands], dtype)
    widest, narrower = _plan(problem), _plan(problem, build="avx2")
    assert narrower.route == "small-k-avx2:gathered" and narrower.reason.endswith("its AVX2 build")
    d_widest, d_narrower = _d_like(problem.d, dtype), _d_like(problem.d, dtype)
    widest.execute(tuple(operands), d_widest, Scalars(alpha=-0.5), None)
    narrower.execute(tuple(operands), d_narrower, Scalars(alpha=-0.5), None)
    assert np.array_equal(d_widest, d_narrower)
    _assert_close(d_narrower, _expected(subscripts, operands, -0.5), 64)


@pytest.mark.parametrize("view", ["reversed", "strided", "fortran"])
def test_operands_of_any_layout_are_read_where_they_lie(rng, view):
    subscripts, sizes = CASES[0]
    shapes = [[sizes[x] for x in t] for t in subscripts.split("->")[0].split(",")]
    base = [rng.standard_normal(s) for s in shapes]
    if view == "reversed":
        operands = [np.ascontiguousarray(x[::-1, ..., ::-1])[::-1, ..., ::-1] for x in base]
    elif view == "strided":
        operands = [np.repeat(x, 2, axis=-1)[..., ::2] for x in base]
    else:
        operands = [np.asfortranarray(x) for x in base]
    problem = _problem(subscripts, *operands)
    d = _d_like(problem.d, np.float64)
    _plan(problem).execute(tuple(operands), d, Scalars(), None)
    _assert_close(d, _expected(subscripts, base), 16)


def test_nothing_outside_d_is_written(rng):
    a, b = rng.standard_normal((9, 11)), rng.standard_normal((3, 5, 11, 7))
    whole = np.full((4, 7, 13, 9), np.nan)
    d = whole[1:, 1:6, 2:11, 1:8]  # (c, d, b, a) inside a larger array
    problem = _problem("be,cdea->cdba", a, b)
    plan = _plan(problem)
    plan.execute((a, b), d, Scalars(), None)
    _assert_close(d, _expected("be,cdea->cdba", [a, b]), 16)
    outside = np.ones(whole.shape, bool)
    outside[1:, 1:6, 2:11, 1:8] = False
    assert np.isnan(whole[outside]).all()


def test_beta_and_a_complex_alpha_run_the_fallback(rng):
    subscripts, sizes = CASES[0]
    terms = subscripts.split("->")[0].split(",")
    a, b = (rng.standard_normal([sizes[x] for x in t]) for t in terms)
    problem = _problem(subscripts, a, b)
    plan = _plan(problem)
    c = rng.standard_normal(problem.d.extents)
    d = _d_like(problem.d, np.float64)
    plan.execute((a, b), d, Scalars(alpha=1.5, beta=-0.5), c)
    _assert_close(d, _expected(subscripts, [a, b], 1.5) - 0.5 * c, 16)


def test_the_thread_count_does_not_change_a_bit(rng, monkeypatch):
    from cpu_fallback import small_k
    subscripts, sizes = CASES[1]
    terms = subscripts.split("->")[0].split(",")
    a, b = (rng.standard_normal([sizes[x] for x in t]) for t in terms)
    problem = _problem(subscripts, a, b)
    plan = _plan(problem)
    results = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(small_k._small_k, "max_threads", lambda n=threads: n)
        d = _d_like(problem.d, np.float64)
        plan.execute((a, b), d, Scalars(), None)
        results.append(d)
    for d in results[1:]:
        assert np.array_equal(d, results[0])
    _assert_close(results[0], _expected(subscripts, [a, b]), 16)


@pytest.mark.parametrize("change, message", [
    ({"m": 3}, "int64 entries"),         # the tables are one row short
    ({"shift": 1}, "outside the buffers"),  # D's last column one element past it
    ({"shift": -9}, "outside the buffers"),  # B's first row before its start
    ({"batches": 0}, "batches >= 1"),
    ({"m": 2**61}, "within the offsets"),  # a size whose table count would overflow
    ({"k": 2**60}, "within the offsets"),
    ({"type": "c8"}, "runs 'f4' and 'f8'"),
])
def test_the_kernel_refuses_what_it_cannot_run(change, message):
    from cpu_fallback import _small_k
    args = {"type": "f8", "m": 2, "n": 4, "k": 3, "batches": 1}
    shift = change.pop("shift", 0)
    args.update(change)
    # A 2 x 3, B 3 x 4, D 2 x 4, C order; the tables of small_k.gathered's order
    tables = [0, 3, 0, 4, 0, 1, 2, 3, 0, 1, 2, 3 + max(shift, 0), 0, 1, 2,
              0 + min(shift, 0), 4, 8, 0, 0, 0]
    a, b, d = np.ones(6), np.ones(12), np.zeros(8)
    with pytest.raises(ValueError, match=message):
        _small_k.gathered(a, b, d, args["type"], args["m"], args["n"], args["k"],
                          args["batches"], np.array(tables, np.int64), 1.0, 0)


@pytest.mark.parametrize("subscripts, shapes, dtype", [
    ("ik,kj->ij", [(30, 8), (8, 30)], np.complex128),      # complex
    ("bik,kjb->ijb", [(6, 20, 8), (8, 20, 6)], np.float64),  # D's unit stride on a batch label
])
def test_where_it_is_not_offered(rng, subscripts, shapes, dtype):
    problem = _c_order_problem(subscripts, shapes, dtype)
    assert gathered_plans(problem, CpuContractionPlan(problem), None) == []


def test_a_memory_limit_below_its_panels_leaves_it_out(rng):
    subscripts, sizes = CASES[0]
    terms = subscripts.split("->")[0].split(",")
    a, b = (rng.standard_normal([sizes[x] for x in t]) for t in terms)
    problem = _problem(subscripts, a, b)
    need = _plan(problem).temporary_bytes
    assert gathered_plans(problem, CpuContractionPlan(problem), need - 1) == []


def test_einsum_offers_it_beside_the_lowerings_and_stays_correct(rng, without_mkl):
    """TCCG case 10 at a third of its extents: a packed lowering, so the measured plan
    times the gathered one too; every call's result is the reference's."""
    a, b = rng.standard_normal((24, 24)), rng.standard_normal((24, 24, 24, 24))
    plan = gpu_tc.prepare("be,dcea->dcba", a, b)
    expected = _expected("be,dcea->dcba", [a, b])
    call_until_reason(plan, "measured", lambda: _assert_close(plan.execute(a, b), expected, 24),
                      4000)  # 8 variants, 4 calls each, and the untimed ones
    assert "small-k:gathered" in plan.reason and "measured" in plan.reason


def test_einsum_times_it_against_a_broadcast_product(rng):
    """A product that sums nothing (TCCG case 31's labels with g of extent 1), D of
    256 KiB and more: NumPy's broadcast multiply and the kernel at K = 1 are both
    timed; every call's result is the reference's. A smaller product is not timed."""
    sizes = {"a": 8, "b": 8, "c": 8, "d": 8, "e": 5, "f": 4, "g": 1}
    a = rng.standard_normal([sizes[x] for x in "dega"])
    b = rng.standard_normal([sizes[x] for x in "gfbc"])
    plan = gpu_tc.prepare("dega,gfbc->abcdef", a, b)
    expected = _expected("dega,gfbc->abcdef", [a, b])

    def call() -> None:
        result = plan.execute(a, b)
        _assert_close(result, expected, 1)
        result[...] = np.nan  # its pooled buffer comes back: a call must write it all

    call_until_reason(plan, "measured", call, 4000)  # 4 calls a variant, and the untimed ones
    assert "measured" in plan.reason
    assert "blas:multiply" in plan.reason and "small-k:gathered" in plan.reason
    small = gpu_tc.prepare("i,j->ij", a[0, 0, 0], b[0, 0, 0])
    assert small.route == "blas:multiply" and "measur" not in small.reason


def test_a_product_takes_panels_as_wide_as_its_columns_and_no_scale_takes_it(rng):
    """At K = 1 a panel holds at most B's columns (rounded up to a tile): 300 float64
    columns take a few KiB a thread, not the 512 KiB panel of 65536 one-term columns.
    A scale by a scalar would list every element of D in its tables: not offered."""
    from cpu_fallback import small_k
    problem = _c_order_problem("i,j->ij", [(300,), (300,)], np.float64)
    threads = max(small_k.max_threads(), os.cpu_count() or 1)
    tables = 8 * (2 * (300 + 300 + 1) + 3)
    fallback = CpuContractionPlan(problem).temporary_bytes
    assert _plan(problem).temporary_bytes <= max(fallback, threads * 16 * 1024 + tables)
    scale = _c_order_problem(",ij->ij", [(), (300, 300)], np.float64)
    assert gathered_plans(scale, CpuContractionPlan(scale), None) == []
