"""The CUDA C that gpu_tc ships, compiled by NVRTC for the GPUs it targets, on any host.

gpu_tc/cuda compiles its own kernels at run time (cupy.RawKernel, through NVRTC); a
kernel NVRTC refuses would only show on a GPU, and then as a silent fallback (the hold
kernel of the GPU timings turns itself off). NVRTC itself needs no GPU or driver: the
test extra installs it (nvidia-cuda-nvrtc) with its bindings (cuda-bindings, through
nvmath-python).
"""

from __future__ import annotations

from typing import Any

import pytest

# Hopper (H100/H200, what gpu_tc is benchmarked on) and the oldest architecture CuPy 14
# supports with CUDA 13.
ARCHITECTURES = ("compute_90", "compute_75")


@pytest.fixture(scope="module")
def nvrtc() -> Any:
    bindings = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    try:
        status, *_ = bindings.nvrtcVersion()
    except (RuntimeError, OSError) as err:  # libnvrtc not found
        pytest.skip(f"NVRTC does not load here: {err}")
    assert status == bindings.nvrtcResult.NVRTC_SUCCESS
    return bindings


def compile_ptx(nvrtc: Any, source: str, name: str, architecture: str) -> str:
    """The PTX NVRTC makes of ``source``; the compile log in the failure message."""
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    status, program = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    assert status == ok
    try:
        options = [f"--gpu-architecture={architecture}".encode()]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        assert status == ok, log.decode(errors="replace")
        _, size = nvrtc.nvrtcGetPTXSize(program)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(program, ptx)
        return ptx.decode().rstrip("\0 ")
    finally:
        nvrtc.nvrtcDestroyProgram(program)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_hold_kernel_compiles_and_spins_on_the_global_timer(nvrtc, architecture):
    from gpu_tc.cuda import event_timing

    ptx = compile_ptx(nvrtc, event_timing._HOLD_SOURCE, "gpu_tc_hold", architecture)
    # The name cupy.RawKernel looks up, one 64-bit parameter (numpy.uint64 from Python),
    # and the loop reading the timer.
    assert ".entry gpu_tc_hold(" in ptx
    assert ".param .u64 gpu_tc_hold_param_0" in ptx
    assert ptx.count("%globaltimer") == 2 and "bra" in ptx


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("name, scalar", [("gpu_tc_strided_sum_f4", "f32"),
                                          ("gpu_tc_strided_sum_f8", "f64")])
def test_the_strided_sum_kernels_compile_with_the_parameters_the_plan_passes(
        nvrtc, architecture, name, scalar):
    """StridedSumPlan.execute passes a, d, c, meta (pointers), two numpy.int32, two
    numpy.int64 and alpha, beta of the kernel's float type, in that order."""
    import re

    from gpu_tc.cuda import strided_sum

    ptx = compile_ptx(nvrtc, strided_sum.SOURCE, "strided_sum", architecture)
    (parameters,) = re.findall(rf"\.entry {name}\((.*?)\)", ptx, re.S)
    kinds = re.findall(r"\.param \.(\w+) ", parameters)
    assert kinds == ["u64"] * 4 + ["u32"] * 2 + ["u64"] * 2 + [scalar] * 2
    assert name in strided_sum.KERNELS.values()


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: Any) -> Any:
    """The strided-sum kernels built for the CPU simulation (g++, pthreads)."""
    from cuda_simulation import build

    return build(tmp_path_factory.mktemp("simulation"))


@pytest.mark.parametrize("dtype", ["f", "d"])
@pytest.mark.parametrize("case", ["reversed-strided", "batch-diagonals", "all", "grid-stride"])
def test_the_strided_sum_source_sums_as_numpy_on_a_cpu_simulation(simulated, dtype, case):
    """StridedSumPlan's layout table and launch shape, the CUDA source run on the CPU:
    views with negative and uneven strides, diagonals, a 0-d D, more elements of D than
    blocks, a transposed D; alpha, beta, and C as D."""
    import ctypes

    import numpy as np
    from numpy.lib.stride_tricks import as_strided

    from gpu_tc.cuda import strided_sum
    from gpu_tc.problem import ReductionProblem, TensorSpec

    rng = np.random.default_rng(7)
    base = rng.standard_normal((6, 5, 14, 3)).astype(dtype)
    if case == "reversed-strided":
        a, labels, out = base[::-1, :, ::2, 1], "abc", "ca"
    elif case == "batch-diagonals":
        square = rng.standard_normal((9, 7, 7)).astype(dtype)
        a = as_strided(square, (9, 7), (square.strides[0], square.strides[1] + square.strides[2]))
        labels, out = "bi", "b"
    elif case == "all":
        a, labels, out = base[:, 1:, ::3, 0], "abc", ""
    else:
        a, labels, out = base, "abcd", "db"  # 15 elements of D over 4 blocks
    item = a.itemsize
    want = np.einsum(f"{labels}->{out}", a.astype(np.float64))
    d = np.zeros(want.shape[::-1], dtype).T
    spec = lambda lab, x: TensorSpec(lab, x.shape, tuple(s // item for s in x.strides), dtype)  # noqa: E731
    problem = ReductionProblem(spec(labels, a), spec(out, d))
    assert strided_sum.applies(problem)
    meta = strided_sum.layout_table(problem)
    grid, threads, n_out, n_summed = strided_sum.launch_shape(problem)
    if case == "grid-stride":
        grid = 4  # as MAX_BLOCKS does for more elements of D
    real = ctypes.c_float if dtype == "f" else ctypes.c_double
    run = getattr(simulated, "run_" + strided_sum.KERNELS[dtype])
    pointer = ctypes.c_void_p

    def launch(c: np.ndarray, alpha: float, beta: float) -> None:
        assert run(ctypes.c_uint(grid), ctypes.c_uint(threads), pointer(a.ctypes.data),
                   pointer(d.ctypes.data), pointer(c.ctypes.data), pointer(meta.ctypes.data),
                   ctypes.c_int(len(out)), ctypes.c_int(len(labels) - len(out)),
                   ctypes.c_longlong(n_out), ctypes.c_longlong(n_summed), real(alpha),
                   real(beta)) == 0

    tolerance = {"f": 1e-4, "d": 1e-12}[dtype] * (1 + np.abs(want).max())
    launch(d, 1.0, 0.0)
    np.testing.assert_allclose(d, want, atol=tolerance)
    c = np.zeros(want.shape[::-1], dtype).T
    c[...] = rng.standard_normal(want.shape)
    launch(c, 2.0, -1.0)
    np.testing.assert_allclose(d, 2 * want - c, atol=3 * tolerance)
    before = d.astype(np.float64)
    launch(d, 0.5, 1.0)
    np.testing.assert_allclose(d, 0.5 * want + before, atol=3 * tolerance)
