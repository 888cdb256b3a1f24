"""GPU plans and their resources: workspace limits and out-of-memory, object lifetimes,
and the forms cuTENSOR is given (marker ``gpu``; on CI these run on the gpu_double
emulation, see tests/test_gpu_emulated.py)."""

from __future__ import annotations

import gc
import importlib
from typing import Any

import numpy as np
import pytest
from helpers import GPU_EMULATED, assert_close, random_array

import gpu_tc
from gpu_tc.backend import Scalars, backend_named
from gpu_tc.errors import WorkspaceError
from gpu_tc.options import Options
from gpu_tc.problem import ContractionProblem, contiguous_spec

pytestmark = pytest.mark.gpu

PROBLEM = ContractionProblem(
    contiguous_spec("abc", (8, 6, 5), "d"),
    contiguous_spec("cbd", (5, 6, 7), "d"),
    contiguous_spec("ad", (8, 7), "d"),
)


@pytest.fixture
def cp() -> Any:
    return importlib.import_module("cupy")


def cutensor_plan(**options: Any) -> Any:
    """A cuTENSOR contraction plan of PROBLEM, built directly (not shared by the cache)."""
    return backend_named("gpu").contraction_plan(PROBLEM, Options(allow_cublas=False, **options))


def operands(cp: Any, rng: np.random.Generator) -> tuple[list[np.ndarray], list[Any]]:
    host = [random_array(rng, (8, 6, 5), "d"), random_array(rng, (5, 6, 7), "d")]
    return host, [cp.asarray(x) for x in host]


def _execute_with_room(cp: Any, plan: Any, inputs: tuple[Any, Any], d: Any, room: int) -> None:
    """Execute ``plan`` on a new stream (no workspace buffer on it yet: the plan must
    allocate one) while CuPy's pool may grow by ``room`` bytes only. Arrays that are
    garbage but not yet collected are freed first: a block they would free during the
    call could otherwise serve the workspace without the pool growing."""
    gc.collect()
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    previous = pool.get_limit()
    stream = cp.cuda.Stream()
    pool.set_limit(size=pool.total_bytes() + room)
    try:
        with stream:
            plan.execute(inputs, d, Scalars(), None)
        stream.synchronize()
    finally:
        pool.set_limit(size=previous)


def test_workspace_out_of_memory_plans_again_with_the_minimum(cp, rng):
    plan = cutensor_plan()
    (variant,) = plan._variants.all()
    taken, minimum = variant.plan.workspace_size, variant.minimum_workspace
    if taken <= minimum:
        pytest.skip(f"this cuTENSOR's plan takes {taken} bytes of workspace, no more than "
                    f"its minimum estimate ({minimum} bytes)")
    host, (a, b) = operands(cp, rng)
    d = cp.empty((8, 7))
    _execute_with_room(cp, plan, (a, b), d, minimum + (taken - minimum) // 2)
    assert_close(d, np.einsum("abc,cbd->ad", *host), "d")
    assert (f"workspace of {taken} bytes hit out-of-memory: planned again with "
            f"cuTENSOR's minimum estimate of {minimum} bytes") in plan.reason


def test_workspace_out_of_memory_even_at_the_minimum_plans_with_none(cp, rng):
    """No room for the workspace the plan takes, nor for cuTENSOR's minimum estimate:
    planned again with none, or, where cuTENSOR cannot (the emulated one), a
    WorkspaceError and nothing run. A plan that takes no workspace (cuTENSOR 2.8.0 on an
    H200 planned this one with none under the 32 MiB it recommended) runs with no room
    at all, and ``reason`` says what it takes."""
    plan = cutensor_plan()
    (variant,) = plan._variants.all()
    taken, minimum = variant.workspace_size, variant.minimum_workspace
    host, (a, b) = operands(cp, rng)
    d = cp.zeros((8, 7))
    room = min(size for size in (taken, minimum) if size) // 2 if taken else 0
    try:
        _execute_with_room(cp, plan, (a, b), d, room)
    except WorkspaceError as err:
        assert taken and "the least cuTENSOR plans it with" in str(err)
        assert not d.any()
        return
    assert_close(d, np.einsum("abc,cbd->ad", *host), "d")
    if taken:
        assert "planned again with 0 bytes" in plan.reason
    else:
        assert "out-of-memory" not in plan.reason
        assert f"workspace {variant._limit} bytes (recommended), of which the plan takes 0" \
            in plan.reason


def test_reason_names_the_workspace_a_plan_takes_below_what_it_was_allowed():
    """cuTENSOR may plan with less than the limit it is handed (2.8.0 on an H200: none
    under 32 MiB); ``reason`` then says both, and only then."""
    plan = cutensor_plan()
    (variant,) = plan._variants.all()
    allowed = variant._limit
    assert allowed > 0 and f"workspace {allowed} bytes (recommended)" in plan.reason
    for taken in (allowed, allowed // 4):  # as the real library may report it
        variant.plan.workspace_size = taken
        below = f"workspace {allowed} bytes (recommended), of which the plan takes {taken}"
        assert (below in plan.reason) == (taken < allowed)
        assert ("of which the plan takes" in plan.reason) == (taken < allowed)


def test_a_workspace_limit_below_the_minimum_estimate_is_tried(cp, rng):
    """The estimate is no floor (cuTENSOR 2.8.0 on an H200 estimated 32 MiB, then
    planned with none): the plan is made within the limit and runs, or, where cuTENSOR
    cannot make one, the WorkspaceError names the limit and the estimate."""
    minimum = cutensor_plan()._variants.all()[0].minimum_workspace
    if minimum == 0:
        pytest.skip("this cuTENSOR needs no workspace for the contraction")
    limit = minimum - 1
    try:
        plan = cutensor_plan(workspace_limit=limit)
    except WorkspaceError as err:
        assert f"within the {limit} bytes" in str(err) and f"at least {minimum} bytes" in str(err)
        return
    assert f"under cuTENSOR's minimum estimate of {minimum}" in plan.reason
    _runs_within(plan, limit, cp, rng)


def test_a_workspace_limit_caps_the_workspace(cp, rng):
    (variant,) = cutensor_plan()._variants.all()
    limit = (variant.plan.workspace_size + variant.minimum_workspace) // 2
    if variant.plan.workspace_size <= variant.minimum_workspace:
        pytest.skip(f"this cuTENSOR's plan takes {variant.plan.workspace_size} bytes of "
                    f"workspace, no more than its minimum estimate")
    plan = cutensor_plan(workspace_limit=limit)
    assert f"workspace capped at workspace_limit={limit} bytes" in plan.reason
    _runs_within(plan, limit, cp, rng)


def _runs_within(plan: Any, limit: int, cp: Any, rng: np.random.Generator) -> None:
    """The plan's workspace is within ``limit`` and its result right."""
    assert plan._variants.all()[0].plan.workspace_size <= limit
    host, (a, b) = operands(cp, rng)
    d = cp.empty((8, 7))
    plan.execute((a, b), d, Scalars(), None)
    assert_close(d, np.einsum("abc,cbd->ad", *host), "d")


def test_dropping_a_plan_destroys_its_cutensor_objects(cp, rng):
    plan = cutensor_plan()
    _, (a, b) = operands(cp, rng)
    plan.execute((a, b), cp.empty((8, 7)), Scalars(), None)
    (variant,) = plan._variants.all()
    owners = [variant.plan, variant.preference, variant.operation, *variant.operation._keep]
    finalizers = [owner._finalizer for owner in owners]
    before = _live_objects() if GPU_EMULATED else None
    assert all(f.alive for f in finalizers)
    del plan, variant, owners
    gc.collect()
    assert not any(f.alive for f in finalizers)
    if GPU_EMULATED:  # the double also counts the destroy calls
        after = _live_objects()
        for kind in ("plan", "plan preference", "operation descriptor", "tensor descriptor"):
            assert after[kind] < before[kind], kind


def _live_objects() -> Any:
    return importlib.import_module("gpu_double.cutensor_objects").live_objects()


@pytest.mark.parametrize(
    "subscripts, shapes, note",
    [
        ("i,j->ij", [(4,), (5,)], "an extent-1 contracted mode added"),
        ("bi,bj->bij", [(3, 4), (3, 5)], "an extent-1 contracted mode added"),
        ("ij,ij->", [(4, 5), (4, 5)], "an extent-1 mode added to every tensor"),
        ("ab,bc->ac", [(1, 6), (6, 1)], "an extent-1 mode added to every tensor"),
    ],
)
def test_shapes_cutensor_leaves_open_are_given_documented_forms(cp, rng, subscripts, shapes,
                                                                note):
    host = [random_array(rng, s, "d") for s in shapes]
    options = Options(allow_cublas=False)
    plan = gpu_tc.prepare(subscripts, *(cp.asarray(x) for x in host), options=options)
    assert note in plan.reason
    got = plan.execute(*(cp.asarray(x) for x in host))
    assert_close(got, np.einsum(subscripts, *host), "d")


def test_a_held_elementwise_plan_reads_each_call_s_scalars(cp, rng):
    """More distinct scalars than a plan keeps copies of: each call's must stay alive
    until cuTENSOR has read them (they are host memory read by pointer)."""
    a, c = random_array(rng, (4, 5), "d"), random_array(rng, (4, 5), "d")
    da, dc = cp.asarray(a), cp.asarray(c)
    for step in range(40):
        alpha, gamma = 100.0 + step, -7.0 - step
        got = gpu_tc.elementwise_binary("ij,ij->ij", da, dc, alpha=alpha, gamma=gamma)
        assert_close(got, alpha * a + gamma * c, "d")


def test_autotune_plans_on_the_plan_s_device(cp, rng):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    host = [random_array(rng, (8, 6, 5), "d"), random_array(rng, (5, 6, 7), "d")]
    with cp.cuda.Device(1):
        device = [cp.asarray(x) for x in host]
        plan = gpu_tc.prepare("abc,cbd->ad", *device, options=Options(allow_cublas=False))
    assert plan.autotune(2) == 1  # called from device 0
    with cp.cuda.Device(1):
        for _ in range(3):
            assert_close(plan.execute(*device), np.einsum("abc,cbd->ad", *host), "d")


def test_an_operand_whose_elements_overlap_is_staged(cp, rng):
    base = random_array(rng, (10,), "d")
    window = np.lib.stride_tricks.as_strided(base, (7, 4), (8, 8))  # element (i, j) = i + j
    b = random_array(rng, (4, 3), "d")
    device_window = cp.lib.stride_tricks.as_strided(cp.asarray(base), (7, 4), (8, 8))
    plan = gpu_tc.prepare("ij,jk->ik", device_window, cp.asarray(b),
                          options=Options(allow_cublas=False))
    assert "A staged through a C-ordered copy" in plan.reason
    assert_close(plan.execute(device_window, cp.asarray(b)), window @ b, "d")
