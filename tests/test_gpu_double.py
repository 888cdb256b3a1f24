"""The gpu_double emulation itself: it must catch what a GPU would fault on and what
cuTENSOR 2.x and cuBLAS document as errors, and compute what they document.

A test double that lets a bug through proves nothing, so each check it claims (see
tests/gpu_double/__init__.py) is shown to fire here, in this process, on the double's
modules directly (no shadowing of cupy or nvmath).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_double import cublas, memory, runtime
from gpu_double import cutensor as ct
from gpu_double import cutensor_objects as objects
from gpu_double.cutensor_execute import UndefinedBehaviour
from gpu_double.functions import as_strided, asarray, empty, zeros

ADD = int(ct.Operator.OP_ADD)
IDENTITY = int(ct.Operator.OP_IDENTITY)


def status(error: pytest.ExceptionInfo) -> str:
    return ct.Status(error.value.status).name


def scalar(value: complex, dtype: str = "d") -> np.ndarray:
    """A host scalar (kept alive by the caller)."""
    return np.array(value, dtype)


class Cutensor:
    """Short ways to make the double's cuTENSOR objects."""

    def __init__(self) -> None:
        self.handle = ct.create()

    def tensor(self, x, alignment: int = 256) -> int:
        strides = tuple(s // x.itemsize for s in x.strides)
        types = {"f": 0, "d": 1, "F": 4, "D": 5}
        return ct.create_tensor_descriptor(self.handle, x.ndim, x.shape, strides,
                                           types[x.dtype.char], alignment)

    def contraction(self, a, b, d, modes=((0, 1), (1, 2), (0, 2)), c=None):
        ta, tb, td = self.tensor(a), self.tensor(b), self.tensor(d)
        tc = td if c is None else c
        compute = ct.ComputeDesc.COMPUTE_64F()
        return ct.create_contraction(self.handle, ta, modes[0], IDENTITY, tb, modes[1], IDENTITY,
                                     tc, modes[2], IDENTITY, td, modes[2], compute)

    def plan(self, operation: int, limit: int | None = None) -> int:
        """A plan under ``limit`` (default: the recommended workspace, as gpu_tc plans)."""
        preference = ct.create_plan_preference(self.handle, int(ct.Algo.DEFAULT), 0)
        if limit is None:
            limit = ct.estimate_workspace_size(self.handle, operation, preference, 2)
        return ct.create_plan(self.handle, operation, preference, limit)

    def contract(self, plan, a, b, d, alpha=1.0, beta=0.0, c=None, workspace=None, size=None):
        s_alpha, s_beta = scalar(alpha), scalar(beta)
        work = empty((1 << 22,), np.uint8) if workspace is None else workspace
        ct.contract(self.handle, plan, s_alpha.ctypes.data, a.data.ptr, b.data.ptr,
                    s_beta.ctypes.data, (d if c is None else c).data.ptr, d.data.ptr,
                    work.data.ptr, work.nbytes if size is None else size, 0)


@pytest.fixture
def lib() -> Cutensor:
    return Cutensor()


@pytest.fixture
def gemm(rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    return a, b, asarray(a), asarray(b), zeros((4, 3))


# --- memory and arrays ----------------------------------------------------------------


def test_allocations_are_256_byte_aligned_and_views_stay_inside_them():
    x = empty((10, 3))
    assert x.data.ptr % 256 == 0
    assert memory.find(x.data.ptr) is x._mem and x[2:, 1].data.ptr == x.data.ptr + 56
    with pytest.raises(memory.IllegalAddress, match="bytes into an allocation"):
        as_strided(x, (11, 3), x.strides)


def test_a_freed_or_host_pointer_is_an_illegal_address():
    pointer = empty((4,)).data.ptr  # freed at once
    region = memory.Region(pointer, 8, (4,), (1,))
    with pytest.raises(memory.IllegalAddress, match="no live device allocation"):
        memory.view(region, np.dtype("d"), 0, "test")
    host = np.zeros(4)
    with pytest.raises(memory.IllegalAddress, match="no live device allocation"):
        memory.view(memory.Region(host.ctypes.data, 8, (4,), (1,)), host.dtype, 0, "test")


def test_memory_of_another_device_is_an_illegal_address():
    with runtime.Device(1):
        x = empty((4,))
    with pytest.raises(memory.IllegalAddress, match="memory of device 1 used on device 0"):
        memory.view(memory.Region(x.data.ptr, 8, (4,), (1,)), np.dtype("d"), 0, "test")
    with pytest.raises(ValueError, match="different from the current device"):
        x + 1


def test_overlap_is_exact_for_interleaved_views():
    x = empty((4, 6))
    regions = [memory.Region(v.data.ptr, 8, v.shape, tuple(s // 8 for s in v.strides))
               for v in (x[:, ::2], x[:, 1::2], x[1:3, 1:4])]
    assert not memory.overlap(regions[0], regions[1])
    assert memory.overlap(regions[1], regions[2]) and memory.overlap(regions[0], regions[2])
    assert memory.self_overlap(memory.Region(x.data.ptr, 8, (3, 3), (1, 1)))


def test_fresh_memory_reads_as_nan():
    assert np.isnan(empty((3,)).get()).all()
    assert np.isnan(empty((2,), "F").get().real).all()


def test_flags_and_streams_are_cupy_s():
    x = empty((2, 3))
    assert (x.flags.c_contiguous, x.flags.f_contiguous) == (True, False)
    assert not hasattr(x.flags, "writeable")
    assert runtime.get_current_stream() is runtime.Stream.null
    stream = runtime.Stream()
    with stream:
        assert runtime.get_current_stream() == stream
    with runtime.Device(1), pytest.raises(RuntimeError, match="stream is on device 0"):
        stream.use()


def test_arrays_never_convert_to_numpy_implicitly():
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        np.asarray(zeros(3))


def test_the_memory_pool_limit_raises_out_of_memory():
    pool = runtime.MEMORY_POOL
    previous = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + 1024)
    try:
        with pytest.raises(runtime.OutOfMemoryError):
            empty((1024,))
        assert empty((100,)).size == 100
    finally:
        pool.set_limit(size=previous)


# --- cuTENSOR: create-time checks ------------------------------------------------------


@pytest.mark.parametrize(
    "extents, strides, alignment, expected",
    [((3, 0), (1, 3), 256, "INVALID_VALUE"), ((3, 4), (1, 0), 256, "INVALID_VALUE"),
     ((3, 4), (-1, 3), 256, "INVALID_VALUE"), ((3, 4), (1, 3), 0, "INVALID_VALUE")],
)
def test_tensor_descriptors_need_positive_extents_strides_and_alignment(lib, extents, strides,
                                                                         alignment, expected):
    with pytest.raises(ct.cuTENSORError) as info:
        ct.create_tensor_descriptor(lib.handle, 2, extents, strides, 1, alignment)
    assert status(info) == expected


def test_modes_are_unique_per_tensor_and_have_one_extent(lib, gemm):
    *_, a, b, d = gemm
    for modes in (((0, 0), (1, 2), (0, 2)), ((0, 1), (2, 1), (0, 2))):
        with pytest.raises(ct.cuTENSORError) as info:
            lib.contraction(a, b, d, modes)
        assert status(info) == "INVALID_VALUE"


def test_desc_c_must_be_identical_to_desc_d(lib, gemm, monkeypatch):
    *_, a, b, d = gemm
    other = lib.tensor(d, alignment=8)
    with pytest.raises(ct.cuTENSORError, match="descC must be identical to descD") as info:
        lib.contraction(a, b, d, c=other)
    assert status(info) == "INVALID_VALUE"
    same_content = lib.tensor(d)
    lib.contraction(a, b, d, c=same_content)  # default mode: identical content suffices
    monkeypatch.setattr(objects, "STRICT", True)
    with pytest.raises(ct.cuTENSORError, match="strict: the same descriptor"):
        lib.contraction(a, b, d, c=same_content)


def test_strict_mode_refuses_what_cutensor_h_leaves_open(lib, monkeypatch):
    monkeypatch.setattr(objects, "STRICT", True)
    a, b, d = zeros((4,)), zeros((5,)), zeros((4, 5))
    with pytest.raises(ct.cuTENSORError, match="no contracted mode") as info:
        lib.contraction(a, b, d, ((0,), (1,), (0, 1)))
    assert status(info) == "NOT_SUPPORTED"
    with pytest.raises(ct.cuTENSORError, match="A has no modes"):
        lib.contraction(zeros(()), zeros((5,)), zeros((5,)), ((), (0,), (0,)))


def test_data_types_and_operators_outside_the_documented_tables(lib, gemm):
    *_, a, b, d = gemm
    ta, tb, td = lib.tensor(a), lib.tensor(b), lib.tensor(d)
    f32 = ct.ComputeDesc.COMPUTE_TF32()  # documented for float32 data only
    with pytest.raises(ct.cuTENSORError) as info:
        ct.create_contraction(lib.handle, ta, (0, 1), IDENTITY, tb, (1, 2), IDENTITY, td, (0, 2),
                              IDENTITY, td, (0, 2), f32)
    assert status(info) == "NOT_SUPPORTED"
    with pytest.raises(ct.cuTENSORError, match="op_c: currently only"):
        ct.create_contraction(lib.handle, ta, (0, 1), IDENTITY, tb, (1, 2), IDENTITY, td, (0, 2),
                              int(ct.Operator.OP_NEG), td, (0, 2), ct.ComputeDesc.COMPUTE_64F())


def test_scalar_type_attribute(lib, gemm):
    *_, a, b, d = gemm
    operation = lib.contraction(a, b, d)
    value = np.zeros(1, ct.get_operation_descriptor_attribute_dtype(1))
    ct.operation_descriptor_get_attribute(lib.handle, operation, 1, value.ctypes.data, 4)
    assert value[0] == 1  # CUDA_R_64F
    with pytest.raises(ct.cuTENSORError, match="size_in_bytes=8"):
        ct.operation_descriptor_get_attribute(lib.handle, operation, 1, value.ctypes.data, 8)


def test_plans_need_at_least_the_minimum_workspace(lib, gemm):
    *_, a, b, d = gemm
    operation = lib.contraction(a, b, d)
    minimum = ct.estimate_workspace_size(lib.handle, operation, 0, 1)
    assert 0 < minimum < ct.estimate_workspace_size(lib.handle, operation, 0, 2)
    with pytest.raises(ct.cuTENSORError) as info:
        lib.plan(operation, limit=minimum - 1)
    assert status(info) == "INSUFFICIENT_WORKSPACE"


def test_objects_are_destroyed_once(lib):
    with pytest.raises(ct.cuTENSORError, match="not a live tensor descriptor"):
        ct.destroy_tensor_descriptor(lib.handle)
    desc = lib.tensor(zeros((2,)))
    ct.destroy_tensor_descriptor(desc)
    with pytest.raises(ct.cuTENSORError, match="not a live tensor descriptor"):
        ct.destroy_tensor_descriptor(desc)


# --- cuTENSOR: execute ------------------------------------------------------------------


def test_contract_computes_alpha_ab_plus_beta_c(lib, gemm, rng):
    a, b, da, db, dd = gemm
    c = rng.standard_normal((4, 3))
    dd[...] = asarray(c)
    plan = lib.plan(lib.contraction(da, db, dd))
    lib.contract(plan, da, db, dd, alpha=2.0, beta=-1.0)
    np.testing.assert_allclose(dd.get(), 2 * a @ b - c)


def test_c_is_not_read_when_beta_is_zero(lib, gemm):
    a, b, da, db, dd = gemm
    dd.fill(np.nan)
    lib.contract(lib.plan(lib.contraction(da, db, dd)), da, db, dd, beta=0.0)
    np.testing.assert_allclose(dd.get(), a @ b)


def test_scalars_are_read_as_the_operation_s_scalar_type(lib, rng):
    a, b = (asarray(rng.standard_normal(s).astype("f")) for s in ((4, 5), (5, 3)))
    d = zeros((4, 3), "f")
    ta, tb, td = lib.tensor(a), lib.tensor(b), lib.tensor(d)
    operation = ct.create_contraction(lib.handle, ta, (0, 1), IDENTITY, tb, (1, 2), IDENTITY, td,
                                      (0, 2), IDENTITY, td, (0, 2), ct.ComputeDesc.COMPUTE_32F())
    plan = lib.plan(operation)
    work = empty((1 << 22,), np.uint8)
    wrong, zero = scalar(1.0, "d"), scalar(0.0, "f")  # a double where a float is read
    ct.contract(lib.handle, plan, wrong.ctypes.data, a.data.ptr, b.data.ptr, zero.ctypes.data,
                d.data.ptr, d.data.ptr, work.data.ptr, work.nbytes, 0)
    expected = a.get() @ b.get()
    assert not np.allclose(d.get(), expected)  # the low half of 1.0 as a float is 0
    right = scalar(1.0, "f")
    ct.contract(lib.handle, plan, right.ctypes.data, a.data.ptr, b.data.ptr, zero.ctypes.data,
                d.data.ptr, d.data.ptr, work.data.ptr, work.nbytes, 0)
    np.testing.assert_allclose(d.get(), expected, rtol=1e-5)


def test_pointers_must_have_the_descriptor_s_alignment(lib, rng):
    big = asarray(rng.standard_normal(21))
    a = big[1:21].reshape(4, 5)  # 8 bytes past a 256-byte boundary
    b, d = zeros((5, 3)), zeros((4, 3))
    plan = lib.plan(lib.contraction(zeros((4, 5)), b, d))
    with pytest.raises(ct.cuTENSORError, match="not aligned to the 256 bytes") as info:
        lib.contract(plan, a, b, d)
    assert status(info) == "INVALID_VALUE"


def test_workspace_size_and_alignment(lib, gemm):
    *_, a, b, d = gemm
    plan = lib.plan(lib.contraction(a, b, d))
    work = empty((1 << 23,), np.uint8)
    with pytest.raises(ct.cuTENSORError) as info:
        lib.contract(plan, a, b, d, workspace=work, size=100)
    assert status(info) == "INSUFFICIENT_WORKSPACE"
    with pytest.raises(ct.cuTENSORError, match="256-byte aligned"):
        lib.contract(plan, a, b, d, workspace=work[8:], size=work.nbytes - 8)


def test_inputs_must_not_overlap_the_output(lib, rng):
    x = asarray(rng.standard_normal((4, 4)))
    plan = lib.plan(lib.contraction(x, x, x, ((0, 1), (1, 2), (0, 2))))
    with pytest.raises(UndefinedBehaviour, match="A overlaps the elements written to D"):
        lib.contract(plan, x, zeros((4, 4)), x)


def test_a_plan_runs_on_its_device_and_a_live_stream(lib, gemm):
    *_, a, b, d = gemm
    plan = lib.plan(lib.contraction(a, b, d))
    with runtime.Device(1), pytest.raises(ct.cuTENSORError) as info:
        lib.contract(plan, a, b, d)
    assert status(info) == "ARCH_MISMATCH"
    s_one = scalar(1.0)
    work = empty((1 << 22,), np.uint8)
    with pytest.raises(ct.cuTENSORError, match="not a live stream") as info:
        ct.contract(lib.handle, plan, s_one.ctypes.data, a.data.ptr, b.data.ptr, s_one.ctypes.data,
                    d.data.ptr, d.data.ptr, work.data.ptr, work.nbytes, 12345)


def test_strides_that_address_an_element_twice_are_undefined(lib, rng):
    x = asarray(rng.standard_normal(10))
    window = as_strided(x, (7, 4), (8, 8))  # a sliding window: element (i, j) at i + j
    b, d = zeros((4, 3)), zeros((7, 3))
    plan = lib.plan(lib.contraction(window, b, d))
    with pytest.raises(UndefinedBehaviour, match="A's strides address one element twice"):
        lib.contract(plan, window, b, d)


def test_the_workspace_must_not_overlap_the_output(lib, gemm):
    *_, a, b, d = gemm
    plan = lib.plan(lib.contraction(a, b, d))
    big = empty((1 << 20,))
    out = big[:12].reshape(4, 3)
    with pytest.raises(UndefinedBehaviour, match="the workspace overlaps D"):
        lib.contract(plan, a, b, out, workspace=big.view(np.uint8), size=big.nbytes)


def test_zero_scaled_inputs_are_checked_and_in_strict_mode_read(lib, rng, monkeypatch):
    c, d = asarray(rng.standard_normal((3, 4))), zeros((3, 4))
    a = empty((3, 4))  # never written: NaN
    ta, td = lib.tensor(a), lib.tensor(d)
    plan = lib.plan(ct.create_elementwise_binary(lib.handle, ta, (0, 1), IDENTITY, td, (0, 1),
                                                 IDENTITY, td, (0, 1), ADD,
                                                 ct.ComputeDesc.COMPUTE_64F()))
    zero, one = scalar(0.0), scalar(1.0)
    run = lambda pa: ct.elementwise_binary_execute(  # noqa: E731
        lib.handle, plan, zero.ctypes.data, pa, one.ctypes.data, c.data.ptr, d.data.ptr, 0)
    with pytest.raises(memory.IllegalAddress):
        run(empty((2,)).data.ptr)  # too small for A, though A's scalar is 0
    run(a.data.ptr)
    np.testing.assert_allclose(d.get(), c.get())
    monkeypatch.setattr(objects, "STRICT", True)
    run(a.data.ptr)
    assert np.isnan(d.get()).all()  # strict: A is read, 0 * NaN


def test_strict_mode_demands_cupy_s_current_stream(lib, gemm, monkeypatch):
    *_, a, b, d = gemm
    plan = lib.plan(lib.contraction(a, b, d))
    stream = runtime.Stream()
    one, zero = scalar(1.0), scalar(0.0)
    work = empty((1 << 22,), np.uint8)
    args = (lib.handle, plan, one.ctypes.data, a.data.ptr, b.data.ptr, zero.ctypes.data,
            d.data.ptr, d.data.ptr, work.data.ptr, work.nbytes, stream.ptr)
    ct.contract(*args)  # default mode: any live stream of the device
    monkeypatch.setattr(objects, "STRICT", True)
    with pytest.raises(UndefinedBehaviour, match="current stream is 0x0"):
        ct.contract(*args)
    with stream:
        ct.contract(*args)


def test_a_descriptor_past_the_allocation_is_an_illegal_address(lib):
    a, b, d = zeros((4, 5)), zeros((5, 3)), zeros((5, 3))
    plan = lib.plan(lib.contraction(zeros((5, 5)), b, d))
    with pytest.raises(memory.IllegalAddress, match="bytes into an allocation"):
        lib.contract(plan, a, b, d)


def test_elementwise_skips_operands_whose_scalar_is_zero(lib, rng):
    a, c = (asarray(rng.standard_normal((3, 4))) for _ in range(2))
    d = zeros((3, 4))
    a.fill(np.nan)
    ta, td = lib.tensor(a), lib.tensor(d)
    operation = ct.create_elementwise_binary(lib.handle, ta, (0, 1), IDENTITY, td, (0, 1),
                                             IDENTITY, td, (0, 1), ADD,
                                             ct.ComputeDesc.COMPUTE_64F())
    plan = lib.plan(operation)
    zero, two = scalar(0.0), scalar(2.0)
    ct.elementwise_binary_execute(lib.handle, plan, zero.ctypes.data, a.data.ptr, two.ctypes.data,
                                  c.data.ptr, d.data.ptr, 0)
    np.testing.assert_allclose(d.get(), 2 * c.get())


# --- cuBLAS -----------------------------------------------------------------------------


def test_gemm_is_column_major_and_checks_leading_dimensions(rng):
    handle = cublas.create()
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    da, db, dd = asarray(a), asarray(b), zeros((4, 3))
    one, zero = scalar(1.0), scalar(0.0)
    # Row-major D = A B is column-major D^T = B^T A^T: m=3, n=4, k=5.
    cublas.dgemm(handle, 0, 0, 3, 4, 5, one.ctypes.data, db.data.ptr, 3, da.data.ptr, 5,
                 zero.ctypes.data, dd.data.ptr, 3)
    np.testing.assert_allclose(dd.get(), a @ b)
    with pytest.raises(cublas.CUBLASError, match="ldb=4 is less than"):
        cublas.dgemm(handle, 0, 0, 3, 4, 5, one.ctypes.data, db.data.ptr, 3, da.data.ptr, 4,
                     zero.ctypes.data, dd.data.ptr, 3)


def test_strided_batched_gemm_and_overlapping_outputs(rng):
    handle = cublas.create()
    a, b = rng.standard_normal((2, 4, 5)), rng.standard_normal((2, 5, 3))
    da, db, dd = asarray(a), asarray(b), zeros((2, 4, 3))
    one, zero = scalar(1.0), scalar(0.0)
    cublas.dgemmStridedBatched(handle, 0, 0, 3, 4, 5, one.ctypes.data, db.data.ptr, 3, 15,
                               da.data.ptr, 5, 20, zero.ctypes.data, dd.data.ptr, 3, 12, 2)
    np.testing.assert_allclose(dd.get(), a @ b)
    with pytest.raises(UndefinedBehaviour, match="matrices of C overlap"):
        cublas.dgemmStridedBatched(handle, 0, 0, 3, 4, 5, one.ctypes.data, db.data.ptr, 3, 15,
                                   da.data.ptr, 5, 20, zero.ctypes.data, dd.data.ptr, 3, 0, 2)


def test_gemm_pointer_mode_decides_where_scalars_live(rng):
    handle = cublas.create()
    da, db, dd = asarray(np.eye(2)), asarray(np.eye(2)), zeros((2, 2))
    two = scalar(2.0)
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_DEVICE)
    with pytest.raises(memory.IllegalAddress):  # a host pointer read as device memory
        cublas.dgemm(handle, 0, 0, 2, 2, 2, two.ctypes.data, da.data.ptr, 2, db.data.ptr, 2,
                     two.ctypes.data, dd.data.ptr, 2)
    on_device, zero = asarray(np.array([2.0])), asarray(np.array([0.0]))
    cublas.dgemm(handle, 0, 0, 2, 2, 2, on_device.data.ptr, da.data.ptr, 2, db.data.ptr, 2,
                 zero.data.ptr, dd.data.ptr, 2)
    np.testing.assert_allclose(dd.get(), 2 * np.eye(2))


class _Cycle:
    """An object the collector, not reference counting, frees."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.parametrize("owner", ["memory", "objects", "streams", "pool"])
def test_a_finalizer_the_collector_runs_inside_a_lock_does_not_deadlock(owner):
    """The collector runs finalizers wherever an allocation triggers it, also while the
    double holds one of its locks on the same thread (a freed allocation, a destroyed
    cuTENSOR object, a dropped stream). With plain locks that hung a CI run for good."""
    import gc
    import threading
    import weakref

    finished = threading.Event()

    def work() -> None:
        cycle = _Cycle()
        if owner in ("memory", "pool"):
            cycle.held = memory.allocate(512)
        elif owner == "objects":
            weakref.finalize(cycle, objects.destroy, objects.new("probe", 1), "probe")
        else:
            cycle.held = runtime.Stream()
        lock = {"memory": memory._lock, "objects": objects.lock,
                "streams": runtime._streams_lock, "pool": runtime.MEMORY_POOL._lock}[owner]
        del cycle
        with lock:
            gc.collect()
        finished.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert finished.is_set(), f"{owner}: the finalizer deadlocked on the held lock"


def test_a_hold_queues_what_is_recorded_behind_it_until_it_ends():
    """The one queued work of the double: an event recorded behind a hold is not done
    until the hold ends; a stream synchronize or a copy to the host waits for it, as on
    a GPU, so a caller reading timings at once is caught here too."""
    stream = runtime.Stream()
    with stream:
        start, end = runtime.Event(), runtime.Event()
        start.record(stream)
        runtime.hold(0.05)
        end.record(stream)
        assert not end.done and not stream.done and runtime.Stream.null.done
        zeros((2,)).get()  # the copy waits for every stream of the device
        assert end.done and stream.done
        assert runtime.get_elapsed_time(start, end) >= 50.0
        runtime.hold(0.05)
        behind = runtime.Event()
        behind.record(stream)
        stream.synchronize()
        assert behind.done
