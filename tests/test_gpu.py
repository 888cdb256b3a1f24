"""The GPU backend on CuPy arrays, against the reference kernel and the CPU backend.

Every test needs an NVIDIA GPU with CuPy, cuTENSOR and nvmath-python (marker ``gpu``;
skipped with the reason elsewhere). Each case runs the same inputs through the GPU
and CPU backends and checks both against :mod:`gpu_tc.reference`.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

import gpu_tc
from gpu_tc import reference
from gpu_tc.backend import Scalars, backend_named
from gpu_tc.cache import PLAN_CACHE
from gpu_tc.errors import (
    BackendError,
    MemoryLimitError,
    OperandError,
    PlanStateError,
    ShapeError,
)
from gpu_tc.options import BinaryOp, Options, ReduceOp, UnaryOp
from gpu_tc.problem import (
    ContractionProblem,
    PermutationProblem,
    ReductionProblem,
    contiguous_spec,
)

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float64", "complex64", "complex128"]
TOLERANCE = {"float32": 2e-4, "complex64": 2e-4, "float64": 1e-10, "complex128": 1e-10}
LAYOUTS = ["C", "F", "transposed", "stepped", "negative"]
EINSUM_CASES = [
    ("ij,jk->ik", [(5, 6), (6, 7)]),  # GEMM-like
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 6)]),  # batched GEMM
    ("abcd,dbea->ec", [(3, 4, 5, 6), (6, 4, 2, 3)]),  # general contraction
    ("ij,kj->ikj", [(4, 5), (3, 5)]),  # Hadamard-like with an outer label
    ("i,j->ij", [(4,), (5,)]),  # outer product
    ("ii->i", [(5, 5)]),  # diagonal
    ("iij->j", [(4, 4, 3)]),  # trace over a diagonal
    ("ijk->kji", [(3, 4, 5)]),  # permutation
    ("ijk->j", [(3, 4, 5)]),  # reduction
    ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)]),  # three operands
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),  # ellipsis and implicit output
    ("ij,ij->", [(4, 5), (4, 5)]),  # full contraction to a scalar
    ("ab,bc->ac", [(1, 6), (6, 1)]),  # size-1 extents
]


@pytest.fixture
def cp() -> Any:
    """CuPy, imported only once a GPU test runs."""
    return importlib.import_module("cupy")


def host_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    values = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def laid_out(xp: Any, values: np.ndarray, layout: str) -> Any:
    """An array of ``xp`` (numpy or cupy) holding ``values`` in the given memory layout."""
    if layout == "C":
        return xp.asarray(values.copy())
    if layout == "F":
        return xp.asfortranarray(xp.asarray(values))
    if layout == "transposed":
        return xp.asarray(np.ascontiguousarray(values.T)).T
    if layout == "stepped":
        big = xp.zeros(tuple(2 * n for n in values.shape), dtype=values.dtype)
        index = tuple(slice(None, None, 2) for _ in values.shape)
        big[index] = xp.asarray(values)
        return big[index]
    if layout == "negative":
        index = tuple(slice(None, None, -1) for _ in values.shape)
        return xp.asarray(values[index].copy())[index]
    raise AssertionError(layout)


def check(got: Any, want: np.ndarray, dtype: str) -> None:
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def both(
    cp: Any, rng: np.random.Generator, shapes: list[tuple[int, ...]], dtype: str, layout: str
) -> tuple[list[np.ndarray], list[Any]]:
    """Host and device operands with the same values and the same layout."""
    values = [host_data(rng, s, dtype) for s in shapes]
    return [laid_out(np, v, layout) for v in values], [laid_out(cp, v, layout) for v in values]


# --- every operation, dtype and layout ----------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("expr, shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_reference_and_cpu(cp, rng, expr, shapes, dtype, layout):
    host, device = both(cp, rng, shapes, dtype, layout)
    got = gpu_tc.einsum(expr, *device)
    assert isinstance(got, cp.ndarray)
    assert got.device.id == device[0].device.id
    want = reference.einsum(expr, *host)
    check(cp.asnumpy(got), want, dtype)
    check(cp.asnumpy(got), gpu_tc.einsum(expr, *host), dtype)


def test_scalar_result_stays_a_zero_d_cupy_array(cp, rng):
    a = host_data(rng, (5, 5), "float64")
    got = gpu_tc.einsum("ii", cp.asarray(a))
    assert isinstance(got, cp.ndarray) and got.ndim == 0
    assert float(got) == pytest.approx(np.trace(a))


@pytest.mark.parametrize("expr, shapes, route", [
    ("ij,jk->ik", [(4, 5), (5, 6)], "cublas"),
    ("ijk,kl->lji", [(3, 4, 5), (5, 6)], "cublas"),
    ("abcd,dbea->ec", [(3, 4, 5, 6), (6, 4, 7, 3)], "cutensor"),
    ("ijk->ki", [(3, 4, 5)], "cutensor"),
    ("bii->b", [(3, 4, 4)], "cutensor"),
])
def test_a_warm_call_into_a_new_result_is_one_call_of_the_plan(cp, rng, expr, shapes, route):
    """A cached plan runs a call into a new result without run()'s layout and the
    composed dispatch (``fast``: the plan's own new-result call), repeatedly, in the
    layout the plan writes."""
    host = [host_data(rng, s, "float64") for s in shapes]
    device = [cp.asarray(x) for x in host]
    plan = gpu_tc.prepare(expr, *device)
    assert plan.route == route and plan._plan.fast is not None
    want = np.einsum(expr, *host)
    layout = plan._plan.output
    for _ in range(3):
        for got in (gpu_tc.einsum(expr, *device), plan.execute(*device)):
            check(cp.asnumpy(got), want, "float64")
            item = got.itemsize
            assert tuple(s // item for s in got.strides) == layout.strides


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c_layout", ["C", "F"])
def test_contract_with_alpha_beta_and_c(cp, rng, dtype, c_layout):
    (a, b), (da, db) = both(cp, rng, [(4, 5, 6), (6, 5, 3)], dtype, "C")
    c = host_data(rng, (3, 4), dtype)
    dc = laid_out(cp, c, c_layout)
    alpha, beta = (0.5, -2.0) if dtype.startswith("float") else (0.5 - 1j, 2j)
    got = gpu_tc.contract("abc,cbd->da", da, db, alpha=alpha, beta=beta, c=dc)
    want = reference.contract("abc,cbd->da", a, b, alpha, beta, c)
    check(cp.asnumpy(got), want, dtype)
    cpu = gpu_tc.contract("abc,cbd->da", a, b, alpha=alpha, beta=beta, c=laid_out(np, c, c_layout))
    check(cp.asnumpy(got), cpu, dtype)


@pytest.mark.parametrize("out_layout", ["C", "F"])
def test_contract_accumulates_into_out(cp, rng, out_layout):
    (a, b), (da, db) = both(cp, rng, [(4, 6), (6, 3)], "float64", "C")
    c = host_data(rng, (4, 3), "float64")
    out = laid_out(cp, c, out_layout)
    result = gpu_tc.contract("ij,jk->ik", da, db, alpha=2.0, beta=1.0, c=out, out=out)
    assert result is out
    check(cp.asnumpy(out), 2.0 * a @ b + c, "float64")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_einsum_writes_into_out(cp, rng, dtype, layout):
    (a, b), (da, db) = both(cp, rng, [(4, 6), (6, 3)], dtype, "C")
    out = laid_out(cp, np.zeros((4, 3), dtype), layout)
    assert gpu_tc.einsum("ij,jk->ik", da, db, out=out) is out
    check(cp.asnumpy(out), reference.einsum("ij,jk->ik", a, b), dtype)


# Unary operators cuTENSOR applies to every dtype of the kind.
UNARY_OPS = {
    "f": [UnaryOp.IDENTITY, UnaryOp.NEG, UnaryOp.EXP],
    "c": [UnaryOp.IDENTITY, UnaryOp.CONJ],
}
OP_CASES = [(dtype, op) for dtype in DTYPES for op in UNARY_OPS[np.dtype(dtype).kind]]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype, op", OP_CASES)
def test_permute(cp, rng, dtype, layout, op):
    (a,), (da,) = both(cp, rng, [(3, 4, 5)], dtype, layout)
    got = gpu_tc.permute("abc->cab", da, alpha=2, op_a=op)
    check(cp.asnumpy(got), reference.permute("abc->cab", a, 2, op), dtype)
    check(cp.asnumpy(got), gpu_tc.permute("abc->cab", a, alpha=2, op_a=op), dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", list(ReduceOp))
def test_reduce_real(cp, rng, dtype, layout, op):
    (a,), (da,) = both(cp, rng, [(3, 4, 5)], dtype, layout)
    c = host_data(rng, (5, 3), dtype)
    got = gpu_tc.reduce("abc->ca", da, op=op, alpha=0.5, beta=2.0, c=cp.asarray(c))
    check(cp.asnumpy(got), reference.reduce("abc->ca", a, op, 0.5, 2.0, c), dtype)
    cpu = gpu_tc.reduce("abc->ca", a, op=op, alpha=0.5, beta=2.0, c=c)
    check(cp.asnumpy(got), cpu, dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_reduce_complex(cp, rng, dtype, layout):
    (a,), (da,) = both(cp, rng, [(3, 4, 5)], dtype, layout)
    c = host_data(rng, (4,), dtype)
    got = gpu_tc.reduce("abc->b", da, alpha=1j, beta=0.5, c=cp.asarray(c), op_a=UnaryOp.CONJ)
    want = reference.reduce("abc->b", a, ReduceOp.SUM, 1j, 0.5, c, UnaryOp.CONJ)
    check(cp.asnumpy(got), want, dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c_terms", ["ij", "ji", "j"])
def test_elementwise_binary(cp, rng, dtype, layout, c_terms):
    shapes = [(4, 5), (5, 4) if c_terms == "ji" else (4, 5) if c_terms == "ij" else (5,)]
    (a, c), (da, dc) = both(cp, rng, shapes, dtype, layout)
    expr = f"ij,{c_terms}->ij"
    real = dtype.startswith("float")
    op = BinaryOp.MAX if real else BinaryOp.MUL
    op_a = UnaryOp.NEG if real else UnaryOp.CONJ
    got = gpu_tc.elementwise_binary(expr, da, dc, alpha=2, gamma=-1, op=op, op_a=op_a)
    want = reference.elementwise(expr, [a, c], [2, -1], [op_a, UnaryOp.IDENTITY], [op])
    check(cp.asnumpy(got), want, dtype)
    cpu = gpu_tc.elementwise_binary(expr, a, c, alpha=2, gamma=-1, op=op, op_a=op_a)
    check(cp.asnumpy(got), cpu, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "op_ab, op_abc", [(BinaryOp.ADD, BinaryOp.ADD), (BinaryOp.MUL, BinaryOp.ADD)]
)
@pytest.mark.parametrize("layout", ["C", "transposed", "negative"])
def test_elementwise_trinary(cp, rng, dtype, op_ab, op_abc, layout):
    (a, b, c), (da, db, dc) = both(cp, rng, [(3, 4), (4, 3), (4,)], dtype, layout)
    expr = "ij,ji,j->ij"
    scales = [1.5, -1, 2]
    got = gpu_tc.elementwise_trinary(
        expr, da, db, dc, alpha=1.5, beta=-1, gamma=2, op_ab=op_ab, op_abc=op_abc
    )
    unary = [UnaryOp.IDENTITY] * 3
    want = reference.elementwise(expr, [a, b, c], scales, unary, [op_ab, op_abc])
    check(cp.asnumpy(got), want, dtype)


def test_elementwise_stages_c_when_no_operand_has_the_output_layout(cp, rng):
    (a, c), (da, dc) = both(cp, rng, [(4, 5), (5, 4)], "float64", "C")
    a_t = cp.asfortranarray(da)  # neither A nor C is laid out like the C-ordered result
    got = gpu_tc.elementwise_binary("ij,ji->ij", a_t, dc, gamma=3, op_c=UnaryOp.NEG)
    check(cp.asnumpy(got), a - 3 * c.T, "float64")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_trace(cp, rng, dtype, layout):
    (a,), (da,) = both(cp, rng, [(5, 5, 3)], dtype, layout)
    got = gpu_tc.trace(da, axis1=0, axis2=1)
    check(cp.asnumpy(got), np.trace(a, axis1=0, axis2=1), dtype)


# --- zero-size and empty sums -------------------------------------------------------


def test_zero_size_results_and_sums(cp):
    a, b = cp.ones((0, 4)), cp.ones((4, 5))
    assert gpu_tc.einsum("ij,jk->ik", a, b).shape == (0, 5)
    empty_sum = gpu_tc.einsum("ij,jk->ik", cp.ones((3, 0)), cp.ones((0, 5)))
    np.testing.assert_array_equal(cp.asnumpy(empty_sum), np.zeros((3, 5)))
    c = cp.full((3, 5), 2.0)
    scaled = gpu_tc.contract("ij,jk->ik", cp.ones((3, 0)), cp.ones((0, 5)), beta=3, c=c)
    np.testing.assert_array_equal(cp.asnumpy(scaled), np.full((3, 5), 6.0))
    prod = gpu_tc.reduce("ij->i", cp.ones((3, 0)), op=ReduceOp.PROD, alpha=2)
    np.testing.assert_array_equal(cp.asnumpy(prod), np.full(3, 2.0))
    assert gpu_tc.permute("ij->ji", cp.ones((0, 3))).shape == (3, 0)
    with pytest.raises(ValueError):
        gpu_tc.reduce("ij->i", cp.ones((3, 0)), op=ReduceOp.MAX)


# --- routes, cache, streams, workspace, plans ---------------------------------------


def test_gemm_like_routes_to_cublas_and_cutensor_on_request(cp, rng):
    (a, b), (da, db) = both(cp, rng, [(3, 8, 9), (3, 9, 7)], "float32", "C")
    plan = gpu_tc.prepare("bij,bjk->bik", da, db)
    assert plan.route == "cublas" and "gemmStridedBatched" in plan.reason
    check(cp.asnumpy(plan.execute(da, db)), a @ b, "float32")
    plan = gpu_tc.prepare("bij,bjk->bik", da, db, options=Options(allow_cublas=False))
    assert plan.route == "cutensor" and "allow_cublas is False" in plan.reason
    check(cp.asnumpy(plan.execute(da, db)), a @ b, "float32")


def test_unary_operators_cutensor_refuses_take_the_cupy_route(cp, rng):
    """cuTENSOR takes IDENTITY and CONJ only on complex data and refuses CONJ on real
    data (seen on an H200, cuTENSOR 2.8.0): complex SQRT runs on CuPy, real CONJ on
    cuTENSOR as IDENTITY."""
    gpu = backend_named("gpu")
    a = host_data(rng, (3, 4, 5), "complex128")
    specs = contiguous_spec("abc", (3, 4, 5), "D"), contiguous_spec("cab", (5, 3, 4), "D")
    plan = gpu.permutation_plan(PermutationProblem(*specs, UnaryOp.SQRT), Options())
    assert plan.route == "cupy" and "op_a=SQRT on complex128" in plan.reason
    b = cp.empty((5, 3, 4), "complex128")
    plan.execute((cp.asarray(a),), b, Scalars(alpha=2), None)
    check(cp.asnumpy(b), reference.permute("abc->cab", a, 2, UnaryOp.SQRT), "complex128")
    reduce_specs = contiguous_spec("abc", (3, 4, 5), "D"), contiguous_spec("c", (5,), "D")
    problem = ReductionProblem(*reduce_specs, ReduceOp.SUM, UnaryOp.EXP)
    assert gpu.reduction_plan(problem, Options()).temporary_bytes == (60 + 2 * 5) * 16
    with pytest.raises(MemoryLimitError, match="needs 1120 bytes of temporaries on CuPy"):
        gpu.reduction_plan(problem, Options(memory_limit=1000))
    real = a.real.copy()
    specs = contiguous_spec("abc", (3, 4, 5), "d"), contiguous_spec("cab", (5, 3, 4), "d")
    plan = gpu.permutation_plan(PermutationProblem(*specs, UnaryOp.CONJ), Options())
    assert plan.route == "cutensor"
    b = cp.empty((5, 3, 4), "float64")
    plan.execute((cp.asarray(real),), b, Scalars(alpha=2), None)
    check(cp.asnumpy(b), 2 * real.transpose(2, 0, 1), "float64")


def test_plan_cache_hit_and_miss(cp, rng):
    cache = gpu_tc.plan_cache()
    cache.clear()
    (_, b), (da, db) = both(cp, rng, [(4, 5), (5, 6)], "float64", "C")
    primitives = PLAN_CACHE.primitives
    gpu_tc.einsum("ij,jk->ik", da, db)
    first, first_primitive = cache.stats(), primitives.stats()
    assert first.misses > 0 and first.hits == 0
    # Same problem, other labels: a program of its own (warm calls key by the labels as
    # written) over the same cuBLAS plan.
    gpu_tc.einsum("xy,yz->xz", cp.asarray(da.get()), db)
    second = primitives.stats()
    assert second.misses == first_primitive.misses and second.hits > first_primitive.hits
    gpu_tc.einsum("ij,jk->ik", cp.asfortranarray(da), db)  # other strides
    assert primitives.stats().misses > second.misses


def test_non_default_stream(cp, rng):
    (a, b), (da, db) = both(cp, rng, [(16, 32), (32, 8)], "float64", "C")
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()  # the operands' copies ran on the default stream
    with stream:
        got = gpu_tc.einsum("ij,jk->ik", da, db, options=Options(allow_cublas=False))
        via_cublas = gpu_tc.einsum("ij,jk->ik", da, db)
        reduced = gpu_tc.einsum("ij->j", da)
    stream.synchronize()
    check(cp.asnumpy(got), a @ b, "float64")
    check(cp.asnumpy(via_cublas), a @ b, "float64")
    check(cp.asnumpy(reduced), a.sum(axis=0), "float64")


def test_workspace_limit_from_options(cp, rng):
    (a, b), (da, db) = both(cp, rng, [(6, 7, 8), (8, 7, 5)], "float64", "C")
    options = Options(workspace_limit=1 << 20, allow_cublas=False)
    plan = gpu_tc.prepare("abc,cbd->ad", da, db, options=options)
    assert plan.route == "cutensor" and "workspace" in plan.reason
    check(cp.asnumpy(plan.execute(da, db)), np.einsum("abc,cbd->ad", a, b), "float64")


def test_plan_free(cp, rng):
    (a, b), (da, db) = both(cp, rng, [(4, 5), (5, 6)], "float64", "C")
    plan = gpu_tc.prepare("ij,jk->ik", da, db)
    check(cp.asnumpy(plan.execute(da, db)), a @ b, "float64")
    plan.free()
    with pytest.raises(PlanStateError):
        plan.execute(da, db)


def test_autotune_on_the_cutensor_contraction_plan(cp, rng):
    problem = ContractionProblem(
        contiguous_spec("abc", (8, 6, 5), "d"),
        contiguous_spec("cbd", (5, 6, 7), "d"),
        contiguous_spec("ad", (8, 7), "d"),
    )
    plan = backend_named("gpu").contraction_plan(problem, Options(allow_cublas=False))
    assert plan.route == "cutensor"
    plan.autotune(3)
    a, b = host_data(rng, (8, 6, 5), "float64"), host_data(rng, (5, 6, 7), "float64")
    for _ in range(5):  # three candidates, then the cached fastest
        d = cp.empty((8, 7))
        plan.execute((cp.asarray(a), cp.asarray(b)), d, Scalars(), None)
        check(cp.asnumpy(d), np.einsum("abc,cbd->ad", a, b), "float64")


def test_result_stays_on_the_operands_device(cp, rng):
    (a, b), _ = both(cp, rng, [(4, 5), (5, 6)], "float64", "C")
    last = cp.cuda.runtime.getDeviceCount() - 1
    with cp.cuda.Device(last):
        da, db = cp.asarray(a), cp.asarray(b)
        got = gpu_tc.einsum("ij,jk->ik", da, db)
        assert got.device.id == last
        check(cp.asnumpy(got), a @ b, "float64")


def test_mixed_devices_are_an_operand_error(cp, rng):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    with cp.cuda.Device(1):
        other = cp.ones((5, 6))
    with pytest.raises(OperandError, match="GPU 1"):
        gpu_tc.einsum("ij,jk->ik", cp.ones((4, 5)), other)


def test_warm_calls_reuse_the_plan_and_still_check_the_device(cp, rng):
    """The warm path (a flat key of the CuPy operands, the plan already built) serves a
    repeated call; another alignment gets its own plan; operands off the current device
    still get the full path's OperandError."""
    gpu = backend_named("gpu")
    (a, b), (da, db) = both(cp, rng, [(5, 6), (6, 7)], "float64", "C")
    check(cp.asnumpy(gpu_tc.einsum("ij,jk->ik", da, db)), a @ b, "float64")
    key = gpu.warm_key(("ij,jk->ik", da, db))
    plan = PLAN_CACHE.programs.peek(key)
    assert plan is not None
    check(cp.asnumpy(gpu_tc.einsum("ij,jk->ik", da, db)), a @ b, "float64")
    assert PLAN_CACHE.programs.peek(key) is plan
    flat = cp.asarray(np.concatenate([[0.0], a.ravel()]))
    shifted = flat[1:].reshape(5, 6)  # the same values 8 bytes further on
    assert gpu.warm_key(("ij,jk->ik", shifted, db)) != key
    check(cp.asnumpy(gpu_tc.einsum("ij,jk->ik", shifted, db)), a @ b, "float64")
    if cp.cuda.runtime.getDeviceCount() < 2:
        return
    with cp.cuda.Device(1):
        da1, db1 = cp.asarray(a), cp.asarray(b)
        check(cp.asnumpy(gpu_tc.einsum("ij,jk->ik", da1, db1)), a @ b, "float64")
    assert gpu.warm_key(("ij,jk->ik", da1, db1)) is None
    with pytest.raises(OperandError, match="GPU 1"):
        gpu_tc.einsum("ij,jk->ik", da1, db1)


def test_mixed_numpy_and_cupy_is_an_operand_error(cp):
    with pytest.raises(OperandError, match="CuPy"):
        gpu_tc.einsum("ij,jk->ik", np.ones((4, 5)), cp.ones((5, 6)))


# --- the library boundary -----------------------------------------------------------


def test_operator_values_are_cutensors():
    ct = importlib.import_module("nvmath.bindings.cutensor")
    for op in UnaryOp:
        assert int(ct.Operator["OP_" + op.name]) == int(op)
    for op in (*BinaryOp, *ReduceOp):
        name = {"SUM": "ADD", "PROD": "MUL"}.get(op.name, op.name)
        assert int(ct.Operator["OP_" + name]) == int(op)


def test_cutensor_status_becomes_backend_error():
    ct = importlib.import_module("nvmath.bindings.cutensor")
    cutensor = importlib.import_module("gpu_tc.cuda.cutensor")

    def fails() -> None:
        raise ct.cuTENSORError(int(ct.Status.NOT_SUPPORTED))

    with pytest.raises(BackendError, match="cutensorContract failed") as info:
        cutensor.call("cutensorContract", fails)
    assert info.value.status == "CUTENSOR_STATUS_NOT_SUPPORTED"


def test_shape_errors_name_the_label(cp):
    with pytest.raises(ShapeError, match="label 'j'"):
        gpu_tc.einsum("ij,jk->ik", cp.ones((4, 5)), cp.ones((6, 3)))
