"""cpu_fallback.mkl: MKL's GEMMs as a second engine, checked against numpy.matmul and
the reference kernel; every plan variant on MKL must compute what the others do.

The test extra installs the ``mkl`` package, so on Linux x86-64 these run in CI; where it
is not installed they skip, saying so.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_close, call_until_reason, reference_einsum

import gpu_tc
from cpu_fallback import mkl
from cpu_fallback.backend import CpuBackend
from cpu_fallback.measured_plan import MeasuredPlan
from gpu_tc import Options
from gpu_tc.backend import Scalars
from gpu_tc.bench import text
from gpu_tc.problem import ContractionProblem, contiguous_spec, dtype_char

FLOATS = ["float32", "float64", "complex64", "complex128"]


def _installed() -> bool:
    try:
        importlib.metadata.distribution("mkl")
    except importlib.metadata.PackageNotFoundError:
        return False
    return sys.platform.startswith("linux") and platform.machine() == "x86_64"


pytestmark = pytest.mark.skipif(not _installed(), reason="the mkl package is not installed "
                                "here (pip install 'gpu-tc[mkl]'; Linux x86-64 only)")


@pytest.fixture(scope="module")
def engine() -> mkl.MklEngine:
    found = mkl.engine()
    assert found is not None, "mkl is installed but no engine loaded"
    return found


@pytest.fixture
def mkl_calls(engine, monkeypatch) -> dict[str, int]:
    """How many calls into MKL's gemm and batch gemm the test makes (a spy)."""
    counts = {"gemm": 0, "batched": 0}

    def counted(kind, found):
        if found is None:
            return None
        call, wide = found

        def call_counted(*args):
            counts[kind] += 1
            return call(*args)

        return call_counted, wide

    for kind in counts:
        table = getattr(engine, f"_{kind}")
        monkeypatch.setattr(engine, f"_{kind}", {k: counted(kind, v) for k, v in table.items()})
    return counts


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _problem(subscripts: str, a: np.ndarray, b: np.ndarray) -> ContractionProblem:
    """The contraction of C-ordered ``a`` and ``b`` into a C-ordered D."""
    terms, d_labels = subscripts.split("->")
    labels = terms.split(",")
    extents = {x: n for t, x_ in zip(labels, (a, b)) for x, n in zip(t, x_.shape)}
    a_spec, b_spec, d_spec = (
        contiguous_spec(t, [extents[x] for x in t], dtype_char(a.dtype))
        for t in (*labels, d_labels))
    return ContractionProblem(a_spec, b_spec, d_spec)


def _run(code: str, **environ: str) -> str:
    """``code`` in a fresh interpreter under this environment plus ``environ``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MKL_THREADING_LAYER", "MKL_NUM_THREADS", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", code], env={**env, **environ},
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_it_serves_every_blas_float_and_nothing_else(engine):
    for dtype in FLOATS:
        assert engine.serves(dtype)
    for dtype in ("float16", "int64", "bool"):
        assert not engine.serves(dtype)
    assert "Math Kernel Library" in engine.version and engine.threads() >= 1


def test_it_runs_on_gnu_openmp_with_one_thread_per_cpu_and_loads_no_second_runtime():
    code = ("import numpy as np; from cpu_fallback import mkl; e = mkl.engine(); "
            "a = np.ones((300, 300)); d = np.empty((300, 300)); e.matmul(a, a, d); "
            "import os; maps = open('/proc/self/maps').read(); "
            "print(e.threads(), len(os.sched_getaffinity(0)), 'libmkl_gnu_thread' in maps, "
            "'libiomp5' in maps, d[0, 0])")
    threads, cpus, gnu, iomp, value = _run(code).split()
    assert threads == cpus and gnu == "True" and iomp == "False" and value == "300.0"


def test_a_thread_variable_is_left_to_mkl():
    code = "from cpu_fallback import mkl; print(mkl.engine().threads())"
    assert _run(code, MKL_NUM_THREADS="1") == "1"


@pytest.mark.parametrize("value", ["0", "off"])
def test_gpu_tc_mkl_0_turns_it_off(value):
    code = ("from cpu_fallback import mkl; from cpu_fallback.backend import CpuBackend; "
            "import numpy as np, gpu_tc; a = np.ones((400, 400)); "
            "problem = gpu_tc.prepare('ij,jk->ik', a, a)._plan.program.final; "
            "plan = CpuBackend().contraction_plan(problem, gpu_tc.Options()); "
            "routes = [x.route for x in getattr(plan, 'plans', [plan])]; "
            "print(mkl.engine() is None, any(r.startswith('mkl:') for r in routes), "
            "'blas:direct' in routes)")
    assert _run(code, GPU_TC_MKL=value) == "True False True"
    assert _run(code) == "False True True"  # the same code sees MKL without it


# MKL's gemm into strided D, every layout and float dtype: tests/test_cblas.py, beside
# NumPy's BLAS.


def test_gemm_refuses_what_it_cannot_take_and_writes_nothing(engine, rng):
    a, b = rng.standard_normal((6, 5)), rng.standard_normal((5, 4))
    d = np.zeros((6, 4))
    assert not engine.gemm(a, b, d, 1j, 0)  # a complex scalar with real arrays
    assert not engine.gemm(a[::2], b, d[::2, ::2], 1, 0)  # D without a unit stride
    assert not engine.gemm(a.astype(np.float32), b, d, 1, 0)  # mixed dtypes
    assert not engine.gemm(a.astype(int), b.astype(int), d.astype(int), 1, 0)
    assert not d.any()


@pytest.mark.parametrize("dtype", FLOATS)
def test_stacks_run_as_one_batch_call_where_their_batch_axes_merge(engine, mkl_calls, rng,
                                                                   dtype):
    a = _random(rng, (3, 4, 5, 7), dtype)
    b = _random(rng, (3, 4, 6, 7), dtype).swapaxes(-1, -2)  # column-major matrices
    out = np.empty((3, 4, 6, 5), dtype).swapaxes(-1, -2)  # column-major D
    assert engine._stacks(a, b, out)
    assert mkl_calls == {"gemm": 0, "batched": 1}
    assert_close(out, a @ b, dtype, np.abs(a) @ np.abs(b))


@pytest.mark.parametrize("case", ["extent-1 axes", "one B for all", "one B per outer index"])
def test_batch_axes_of_extent_one_or_stride_zero_merge(engine, mkl_calls, rng, case):
    a = rng.standard_normal((3, 1, 4, 5, 7))
    b = rng.standard_normal((3, 1, 4, 7, 6))
    if case == "one B for all":
        b = np.broadcast_to(b[:1, :, :1], b.shape)  # stride 0 on every batch axis
    elif case == "one B per outer index":
        b = np.broadcast_to(b[:, :, :1], b.shape)  # (stride, 0): no single step
    out = np.empty((3, 1, 4, 5, 6))
    assert engine._stacks(a, b, out)
    calls = 3 if case == "one B per outer index" else 1  # call by call over the outer axes
    assert mkl_calls == {"gemm": 0, "batched": calls}
    assert_close(out, a @ b, "float64", np.abs(a) @ np.abs(b))


def test_matmul_broadcasts_a_batch_of_one_as_numpy_does(engine, mkl_calls, rng):
    a, b = rng.standard_normal((20, 14, 25)), rng.standard_normal((1, 25, 32))
    out = np.empty((20, 14, 32))
    engine.matmul(a, b, out)
    assert mkl_calls == {"gemm": 0, "batched": 1}
    assert_close(out, a @ b, "float64", np.abs(a) @ np.abs(b))
    with pytest.raises(ValueError):  # numpy.matmul's own error for shapes that do not fit
        engine.matmul(a, rng.standard_normal((3, 25, 32)), out)


def test_stacks_whose_batch_axes_do_not_merge_run_call_by_call(engine, mkl_calls, rng):
    a = rng.standard_normal((4, 3, 5, 7)).swapaxes(0, 1)  # batch strides out of order
    b = rng.standard_normal((3, 4, 7, 6))
    out = np.empty((3, 4, 5, 6))
    assert engine._stacks(a, b, out)
    assert mkl_calls == {"gemm": 0, "batched": 3}
    assert_close(out, a @ b, "float64", np.abs(a) @ np.abs(b))


def test_stacks_mkl_would_refuse_go_to_numpy(engine, mkl_calls, rng):
    """A batch stride below D's leading dimension times its rows (MKL would print an
    error and write nothing), or a negative one: refused, and numpy.matmul computes."""
    a, b = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 4, 2))
    memory = np.full(20, -7.0)
    close = np.lib.stride_tricks.as_strided(memory, (3, 2, 2), (48, 32, 8))  # 6 < 4 * 2
    assert not engine._stacks(a, b, close)
    reversed_out = np.empty((3, 2, 2))[::-1]
    assert not engine._stacks(a, b, reversed_out)
    assert not engine._stacks(a[::-1], b, np.empty((3, 2, 2)))
    assert mkl_calls == {"gemm": 0, "batched": 0}
    engine.matmul(a, b, close)
    np.testing.assert_allclose(close, a @ b, rtol=1e-14)


def test_matmul_falls_back_to_numpy_where_mkl_cannot_take_it(engine, rng):
    a, b = rng.standard_normal((8, 6)), rng.standard_normal((6, 10))
    out = np.zeros((8, 20))[:, ::2]  # no unit stride
    engine.matmul(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-13)


@pytest.mark.parametrize("subscripts, shapes", [
    ("ik,kj->ij", [(200, 150), (150, 180)]),            # direct
    ("cfea,debf->dcba", [(20, 18, 16, 14)] * 2),        # packed
    ("abc,acd->abd", [(24, 40, 64), (24, 64, 48)]),     # batched
])
@pytest.mark.parametrize("dtype", ["float64", "complex64"])
def test_every_variant_on_mkl_computes_the_contraction(mkl_calls, rng, subscripts, shapes,
                                                       dtype):
    """Each MKL variant of a measured plan, into a fresh D and with beta != 0, against
    the reference kernel, its product by MKL."""
    ins = subscripts.split("->")[0].split(",")
    sizes = {}
    for labels, shape in zip(ins, shapes):
        sizes.update(zip(labels, shape))
    a = _random(rng, [sizes[x] for x in ins[0]], dtype)
    b = _random(rng, [sizes[x] for x in ins[1]], dtype)
    out_labels = subscripts.split("->")[1]
    c = _random(rng, [sizes[x] for x in out_labels], dtype)
    plan = CpuBackend().contraction_plan(_problem(subscripts, a, b), Options())
    assert isinstance(plan, MeasuredPlan)
    on_mkl = [p for p in plan.plans if p.route.startswith("mkl:")]
    assert on_mkl, [p.route for p in plan.plans]
    product, bound = reference_einsum(subscripts, a, b)
    for variant in on_mkl:
        for scalars, addend, expected, scale in [
                (Scalars(1, 0), None, product, bound),
                (Scalars(2, -0.5), c, 2 * product - 0.5 * c, 2 * bound + np.abs(c))]:
            before = sum(mkl_calls.values())
            d = np.empty_like(c)
            variant.execute((a, b), d, scalars, addend)
            assert_close(d, expected, dtype, scale)
            assert sum(mkl_calls.values()) > before, variant.route


def test_tiles_under_a_memory_limit_run_on_mkl_too(mkl_calls, rng):
    a = rng.standard_normal((40, 36, 30, 20))
    b = rng.standard_normal((30, 20, 36, 44))
    subscripts = "abcd,cdbe->ae"
    options = Options(memory_limit=1 << 20)
    plan = CpuBackend().contraction_plan(_problem(subscripts, a, b), options)
    tiled = [p for p in plan.plans if p.route.startswith("mkl:") and "tile" in p.reason]
    assert tiled, [p.reason for p in plan.plans]
    expected, bound = reference_einsum(subscripts, a, b)
    for variant in tiled:
        before = mkl_calls["gemm"] + mkl_calls["batched"]
        d = np.empty(expected.shape)
        variant.execute((a, b), d, Scalars(1, 0), None)
        assert_close(d, expected, "float64", bound)
        assert mkl_calls["gemm"] + mkl_calls["batched"] >= before + 2  # a call per tile


def test_einsum_measures_the_engines_against_each_other_and_stays_correct(rng):
    a, b = rng.standard_normal((300, 300)), rng.standard_normal((300, 300))
    plan = gpu_tc.prepare("ab,bc->ac", a, b)
    expected = reference_einsum("ab,bc->ac", a, b)[0]

    def call() -> None:
        np.testing.assert_allclose(plan.execute(a, b), expected, rtol=1e-11, atol=1e-11)

    call_until_reason(plan, "kept", call, 200)  # both orientations, 6 variants, 4 calls each
    assert "blas:direct" in plan.reason and "mkl:direct" in plan.reason, plan.reason
    assert "kept" in plan.reason


def test_reports_name_the_engine(engine):
    env = {"gpu_tc_mkl": engine.describe()}
    note = text.engines_note(env)
    assert "NumPy's BLAS and Intel(R) oneAPI Math Kernel Library" in note
    assert f"{os.path.basename(engine.path)}, GNU OpenMP, {engine.threads()} threads" in note
    assert text.engines_note({"gpu_tc_mkl": None}).endswith("(no MKL engine).")
    assert text.engines_note({}) == ""
