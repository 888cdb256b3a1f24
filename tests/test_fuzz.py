"""Property-based fuzzing: random valid einsum expressions, extents, views and dtypes,
checked against gpu_tc.reference and numpy.einsum.

Runs are reproducible (derandomized, no example database) and small enough to keep the
suite fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from helpers import assert_close, check_einsum, reference_einsum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_tc
from cpu_fallback.contraction import CpuContractionPlan
from cpu_fallback.tiled_run import TiledRun
from cpu_fallback.tiling import Cut, Tiling
from gpu_tc import MemoryLimitError, Options, reference
from gpu_tc.backend import Scalars
from gpu_tc.problem import ContractionProblem, contiguous_spec

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

LABELS = "abcdeAB"
DTYPE_NAMES = ["float32", "float64", "complex64", "complex128"]
VIEWS = ["C", "F", "T", "stepped", "negative", "negative-stepped", "transposed-stepped"]
EXTENTS = st.sampled_from([1, 2, 3, 4, 2, 3, 0])  # mostly 1-4, sometimes 0


@dataclass
class Problem:
    """One generated einsum call (for readable failure reports)."""

    subscripts: str
    shapes: list[tuple[int, ...]]
    views: list[str]
    dtypes: list[str]
    seed: int

    def operands(self) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return [view_of(rng, s, v, d) for s, v, d in zip(self.shapes, self.views, self.dtypes)]


def view_of(rng: np.random.Generator, shape: tuple[int, ...], view: str, dtype: str) -> Any:
    """Random values of ``shape`` laid out as ``view`` describes."""

    def base(s: tuple[int, ...]) -> np.ndarray:
        values = np.asarray(rng.standard_normal(s))
        if np.dtype(dtype).kind == "c":
            values = values + 1j * rng.standard_normal(s)
        return np.asarray(values, dtype=dtype)

    every = (slice(None, None, 2),) * len(shape)
    if not shape:  # a 0-d array has one layout (np.asfortranarray would make it 1-d)
        x = base(())
    elif view == "F":
        x = np.asfortranarray(base(shape))
    elif view == "T":
        x = base(shape[::-1]).T
    elif view == "stepped":
        x = base(tuple(2 * n for n in shape))[every]
    elif view == "negative":
        x = base(shape)[(slice(None, None, -1),) * len(shape)]
    elif view == "negative-stepped":
        x = base(tuple(2 * n for n in shape))[(slice(None, None, -2),) * len(shape)]
    elif view == "transposed-stepped":
        x = base(tuple(2 * n for n in shape[::-1]))[every].T
    else:
        x = base(shape)
    assert x.shape == tuple(shape)
    return x


@st.composite
def einsum_problems(draw: Any, max_operands: int = 4) -> Problem:
    """A valid einsum: 1-4 operands, 0-4 labels a term (repeats allowed), labels summed
    out of one operand, implicit or explicit output, optional '...', broadcast 1s."""
    # sampled_from, not integers(): generation is spread evenly instead of crowding
    # at the small end, and shrinking still heads for the first (simplest) entry.
    n_labels = draw(st.sampled_from([3, 4, 2, 5, 1, 6, 7]))
    labels = LABELS[:n_labels]
    extent = {x: draw(EXTENTS) for x in labels}
    width = draw(st.sampled_from([0, 0, 1, 2]))  # axes covered by '...'
    ellipsis_extents = [draw(st.integers(1, 3)) for _ in range(width)]

    n_operands = draw(st.sampled_from([2, 1, 3, 4][:max_operands]))
    terms, shapes = [], []
    for _ in range(n_operands):
        size = draw(st.sampled_from([2, 3, 1, 4, 0]))
        term = [draw(st.sampled_from(labels)) for _ in range(size)]
        shape = [extent[x] for x in term]
        # A label used once in this term may broadcast with extent 1, as numpy allows.
        for i, x in enumerate(term):
            if term.count(x) == 1 and draw(st.sampled_from([False] * 5 + [True])):
                shape[i] = 1
        text = "".join(term)
        if width and draw(st.booleans()):
            rank = draw(st.integers(0, width))
            dims = [
                n if draw(st.sampled_from([True, True, False])) else 1
                for n in ellipsis_extents[width - rank :]
            ]
            at = draw(st.integers(0, len(term)))
            text = "".join(term[:at]) + "..." + "".join(term[at:])
            shape = shape[:at] + dims + shape[at:]
        terms.append(text)
        shapes.append(tuple(shape))

    has_ellipsis = any("..." in t for t in terms)
    subscripts = ",".join(terms)
    if draw(st.booleans()):  # explicit output
        used = sorted(set("".join(terms).replace(".", "")))
        output = draw(st.permutations(used)) if used else []
        output = list(output[: draw(st.integers(0, len(output)))])
        if has_ellipsis:
            output.insert(draw(st.integers(0, len(output))), "...")
        subscripts += "->" + "".join(output)

    views = [draw(st.sampled_from(VIEWS)) for _ in shapes]
    dtypes = draw(
        st.one_of(
            st.lists(st.sampled_from(DTYPE_NAMES), min_size=n_operands, max_size=n_operands),
            st.sampled_from(DTYPE_NAMES).map(lambda d: [d] * n_operands),
        )
    )
    return Problem(subscripts, shapes, views, dtypes, draw(st.integers(0, 2**32 - 1)))


@FUZZ
@given(problem=einsum_problems())
def test_fuzz_einsum(problem):
    operands = problem.operands()
    got = check_einsum(problem.subscripts, *operands)
    expected_numpy = np.einsum(problem.subscripts, *operands)
    _, scale = reference_einsum(problem.subscripts, *operands)
    assert_close(got, expected_numpy, np.asarray(expected_numpy).dtype, scale)


@FUZZ
@given(problem=einsum_problems(), out_view=st.sampled_from(VIEWS))
def test_fuzz_einsum_out(problem, out_view):
    operands = problem.operands()
    expected = np.einsum(problem.subscripts, *operands)
    rng = np.random.default_rng(problem.seed + 1)
    out = view_of(rng, np.shape(expected), out_view, np.asarray(expected).dtype.name)
    check_einsum(problem.subscripts, *operands, out=out)


@settings(FUZZ, max_examples=60)
@given(
    problem=einsum_problems(max_operands=2).filter(lambda p: p.subscripts.count(",") == 1),
    alpha=st.sampled_from([1, 0.5, -2.0, 0]),
    beta=st.sampled_from([0, 1, -0.5]),
)
def test_fuzz_contract(problem, alpha, beta):
    a, b = problem.operands()
    exact, scale = reference_einsum(problem.subscripts, a, b)
    dtype = np.result_type(a, b)
    c = view_of(np.random.default_rng(problem.seed), exact.shape, "T", dtype.name)
    got = gpu_tc.contract(problem.subscripts, a, b, alpha=alpha, beta=beta, c=c)
    assert got.dtype == np.result_type(a, b, c) and got.shape == exact.shape
    expected = reference.contract(problem.subscripts, a, b, alpha, beta, c)
    assert_close(got, expected, dtype, abs(alpha) * scale + abs(beta) * np.abs(c))


@settings(FUZZ, max_examples=60)
@given(
    shape=st.lists(st.integers(0, 4), min_size=2, max_size=4),
    axes=st.data(),
    view=st.sampled_from(VIEWS),
    dtype=st.sampled_from(DTYPE_NAMES),
    seed=st.integers(0, 2**32 - 1),
)
def test_fuzz_trace(shape, axes, view, dtype, seed):
    rank = len(shape)
    axis1 = axes.draw(st.integers(-rank, rank - 1))
    axis2 = axes.draw(st.integers(-rank, rank - 1).filter(lambda x: x % rank != axis1 % rank))
    a = view_of(np.random.default_rng(seed), tuple(shape), view, dtype)
    got = gpu_tc.trace(a, axis1=axis1, axis2=axis2)
    expected = np.trace(a, axis1=axis1, axis2=axis2)
    assert got.dtype == expected.dtype and np.shape(got) == np.shape(expected)
    assert_close(got, expected, dtype, np.trace(np.abs(a), axis1=axis1, axis2=axis2))


@settings(FUZZ, max_examples=60)
@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=4),
    data=st.data(),
    view=st.sampled_from(VIEWS),
    dtype=st.sampled_from(DTYPE_NAMES),
    seed=st.integers(0, 2**32 - 1),
)
def test_fuzz_permute_and_reduce(shape, data, view, dtype, seed):
    term = LABELS[: len(shape)]
    order = "".join(data.draw(st.permutations(term)))
    kept = order[: data.draw(st.integers(0, len(order)))]
    a = view_of(np.random.default_rng(seed), tuple(shape), view, dtype)
    permuted = gpu_tc.permute(f"{term}->{order}", a, alpha=-1)
    assert_close(permuted, -reference.permute(f"{term}->{order}", a), dtype)
    assert permuted.dtype == a.dtype
    reduced = gpu_tc.reduce(f"{term}->{kept}", a, alpha=2)
    exact, scale = reference_einsum(f"{term}->{kept}", a)
    assert reduced.dtype == a.dtype and np.shape(reduced) == exact.shape
    assert_close(reduced, 2 * exact, dtype, 2 * scale)


@pytest.mark.parametrize(
    "subscripts, shapes",
    [  # examples the fuzzer once found; kept as plain regressions
        pytest.param("a,ab,b->", [(1,), (1, 3), (3,)], id="broadcast-then-summed"),
        pytest.param("aa,a->", [(2, 2), (1,)], id="diagonal-with-broadcast"),
        pytest.param("ab,...->...ba", [(2, 0), (3, 1)], id="zero-size-outer"),
    ],
)
def test_fuzz_regressions(subscripts, shapes, rng):
    operands = [rng.standard_normal(s) for s in shapes]
    check_einsum(subscripts, *operands)


@st.composite
def tilings(draw: Any) -> tuple[str, dict[str, int], list[tuple[str, int]]]:
    """A binary contraction (distinct labels per term; any output, scalar included) and
    one or two cuts of its labels (free, batch or contracted) with chunk sizes."""
    labels = "abcde"
    extent = {x: draw(st.integers(1, 5)) for x in labels}
    a = draw(st.lists(st.sampled_from(labels), min_size=1, max_size=4, unique=True))
    b = draw(st.lists(st.sampled_from(labels), min_size=1, max_size=4, unique=True))
    shared = [x for x in a if x in b]
    free = [x for x in a + b if x not in shared]
    kept = draw(st.lists(st.sampled_from(shared), unique=True)) if shared else []
    output = draw(st.permutations(free + kept))
    cuttable = [x for x in dict.fromkeys(a + b) if x in output or x in shared]
    cut_labels = draw(st.lists(st.sampled_from(cuttable), min_size=1, max_size=2, unique=True))
    cuts = [(x, draw(st.integers(1, extent[x]))) for x in cut_labels]
    return f"{''.join(a)},{''.join(b)}->{''.join(output)}", extent, cuts


@settings(FUZZ, max_examples=200)
@given(case=tilings(), beta=st.sampled_from([0.0, 1.0, -0.5]), seed=st.integers(0, 99))
def test_fuzz_every_tiling_matches_the_reference(case, beta, seed):
    """The tiled run (cpu_fallback.tiled_run.TiledRun) of forced cuts, any roles."""
    subscripts, extent, cuts = case
    inputs, output = subscripts.split("->")
    terms = inputs.split(",")
    specs = [contiguous_spec(t, [extent[x] for x in t], "d") for t in (*terms, output)]
    problem = ContractionProblem(*specs)
    outer, inner = ([Cut(x, extent[x], n) for x, n in cuts] + [None])[:2]
    run = TiledRun(problem, "heuristic", Tiling(outer, inner, 0, 0),
                   CpuContractionPlan)
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal([extent[x] for x in t]) for t in terms)
    c = np.asarray(rng.standard_normal([extent[x] for x in output]))
    exact, scale = reference_einsum(subscripts, a, b)
    d = np.full_like(c, np.nan)
    run.execute(a, b, d, Scalars(2.0, beta), c)
    assert_close(d, 2.0 * exact + beta * c, "d", 2 * scale + abs(beta) * np.abs(c))


@settings(FUZZ, max_examples=100)
@given(problem=einsum_problems(), limit=st.sampled_from([0, 48, 200, 1000]))
def test_fuzz_einsum_under_a_memory_limit(problem, limit):
    """Tiny limits force tiles (cuts of free, batch and contracted labels); a limit no
    route meets raises MemoryLimitError naming a larger need, under which it runs."""
    operands = problem.operands()
    expected = np.einsum(problem.subscripts, *operands)
    _, scale = reference_einsum(problem.subscripts, *operands)
    try:
        got = gpu_tc.einsum(problem.subscripts, *operands, options=Options(memory_limit=limit))
    except MemoryLimitError as err:
        assert err.need > limit
        got = gpu_tc.einsum(problem.subscripts, *operands,
                            options=Options(memory_limit=err.need))
    assert_close(got, expected, np.asarray(expected).dtype, scale)


@settings(FUZZ, max_examples=60)
@given(
    problem=einsum_problems(max_operands=2).filter(lambda p: p.subscripts.count(",") == 1),
    beta=st.sampled_from([0, 1, -0.5]),
    limit=st.sampled_from([48, 200, 1000]),
)
def test_fuzz_contract_under_a_memory_limit(problem, beta, limit):
    a, b = problem.operands()
    exact, scale = reference_einsum(problem.subscripts, a, b)
    dtype = np.result_type(a, b)
    c = view_of(np.random.default_rng(problem.seed), exact.shape, "C", dtype.name)
    out = c.copy()
    try:
        gpu_tc.contract(problem.subscripts, a, b, alpha=2.0, beta=beta, c=out, out=out,
                        options=Options(memory_limit=limit))
    except MemoryLimitError as err:
        assert err.need > limit
        np.testing.assert_array_equal(out, c)  # refused before any work
        return
    expected = reference.contract(problem.subscripts, a, b, 2.0, beta, c)
    assert_close(out, expected, dtype, 2 * scale + abs(beta) * np.abs(c))
