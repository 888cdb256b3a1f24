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
