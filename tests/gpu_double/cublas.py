"""The emulated ``cupy_backends.cuda.libs.cublas``: handles, pointer mode and the
column-major GEMMs gpu_tc calls (s/d/c/z ``gemm`` and ``gemmStridedBatched``).

As CuPy's wrappers do, every GEMM first puts the handle on CuPy's current stream.
Checked per call: the handle and the active device, m, n, k, the batch count and every
leading dimension (``ld >= max(1, rows)``: INVALID_VALUE), the scalar pointers for the
pointer mode, that each matrix lies in a live allocation of the device, that C's
matrices do not overlap one another or A and B; C is not read when beta is 0.
``GPU_DOUBLE_MISSING=cublas`` makes the import fail as it does without libcublas.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from . import memory, runtime
from .cutensor_execute import UndefinedBehaviour
from .signatures import binding

if "cublas" in os.environ.get("GPU_DOUBLE_MISSING", "").split(","):
    raise ImportError("libcublas.so.13: cannot open shared object file: No such file or directory "
                      "(emulated: GPU_DOUBLE_MISSING=cublas)")

CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C = 0, 1, 2
CUBLAS_POINTER_MODE_HOST, CUBLAS_POINTER_MODE_DEVICE = 0, 1
_STATUS = {1: "CUBLAS_STATUS_NOT_INITIALIZED", 7: "CUBLAS_STATUS_INVALID_VALUE",
           8: "CUBLAS_STATUS_ARCH_MISMATCH", 13: "CUBLAS_STATUS_EXECUTION_FAILED"}


class CUBLASError(RuntimeError):
    """A cuBLAS status other than CUBLAS_STATUS_SUCCESS (CuPy's class)."""

    def __init__(self, status: int, why: str = "") -> None:
        self.status = status
        name = _STATUS.get(status, f"CUBLAS_STATUS_{status}")
        super().__init__(f"{name}: emulated cuBLAS: {why}" if why else name)


class _Handle:
    def __init__(self, device: int) -> None:
        self.device = device
        self.pointer_mode = CUBLAS_POINTER_MODE_HOST
        self.stream = 0


# Re-entrant: the garbage collector may run a finalizer that takes it (a freed
# allocation, a destroyed object) while this thread holds it.
_lock = threading.RLock()
_handles: dict[int, _Handle] = {}


def _handle(handle: int) -> _Handle:
    value = _handles.get(handle)
    if value is None:
        raise CUBLASError(1, f"handle {handle:#x} was not created")
    return value


@binding("create() -> intptr_t")
def create() -> int:
    with _lock:
        address = 0x7B00_0000_0000 + 0x100 * (len(_handles) + 1)
        _handles[address] = _Handle(runtime.current_device())
    return address


@binding("destroy(intptr_t handle)")
def destroy(handle: int) -> None:
    with _lock:
        _handle(handle)
        del _handles[handle]


@binding("getVersion(intptr_t handle) -> int")
def getVersion(handle: int) -> int:  # noqa: N802 - CuPy's name
    _handle(handle)
    return 130000  # the cuBLAS of CUDA 13.0, as this double follows it


@binding("getPointerMode(intptr_t handle) -> int")
def getPointerMode(handle: int) -> int:  # noqa: N802 - CuPy's name
    return _handle(handle).pointer_mode


@binding("setPointerMode(intptr_t handle, int mode)")
def setPointerMode(handle: int, mode: int) -> None:  # noqa: N802 - CuPy's name
    if mode not in (CUBLAS_POINTER_MODE_HOST, CUBLAS_POINTER_MODE_DEVICE):
        raise CUBLASError(7, f"pointer mode {mode}")
    _handle(handle).pointer_mode = mode


@binding("setStream(intptr_t handle, size_t stream)")
def setStream(handle: int, stream: int) -> None:  # noqa: N802 - CuPy's name
    if runtime.stream_device(stream) is None:
        raise CUBLASError(7, f"stream {stream:#x} is not a live stream")
    _handle(handle).stream = stream


@binding("getStream(intptr_t handle) -> size_t")
def getStream(handle: int) -> int:  # noqa: N802 - CuPy's name
    return _handle(handle).stream


def _matrix(pointer: int, rows: int, cols: int, ld: int, stride: int, batch: int,
            itemsize: int) -> memory.Region:
    """Column-major ``rows x cols`` matrices, ``batch`` of them ``stride`` apart."""
    return memory.Region(pointer, itemsize, (batch, cols, rows), (stride, ld, 1))


def _scalar(handle: _Handle, pointer: int, dtype: np.dtype) -> Any:
    if handle.pointer_mode == CUBLAS_POINTER_MODE_HOST:
        return memory.read_host(pointer, dtype)[0]
    region = memory.Region(pointer, dtype.itemsize, (1,), (1,))
    return memory.view(region, dtype, handle.device, "device-mode scalar")[0]


def _gemm(dtype: np.dtype, handle: int, transa: int, transb: int, m: int, n: int, k: int,
          alpha: int, a: int, lda: int, stride_a: int, b: int, ldb: int, stride_b: int,
          beta: int, c: int, ldc: int, stride_c: int, batch: int) -> None:
    h = _handle(handle)
    h.stream = runtime.get_current_stream().ptr  # CuPy's wrappers do this before each call
    device = runtime.current_device()
    if device != h.device:
        raise CUBLASError(8, f"handle of device {h.device} used on device {device}")
    if min(m, n, k, batch) < 0 or transa not in (0, 1, 2) or transb not in (0, 1, 2):
        raise CUBLASError(7, f"m={m}, n={n}, k={k}, batch={batch}, transa={transa}, "
                             f"transb={transb}")
    a_rows, a_cols = (m, k) if transa == CUBLAS_OP_N else (k, m)
    b_rows, b_cols = (k, n) if transb == CUBLAS_OP_N else (n, k)
    for name, ld, rows in (("lda", lda, a_rows), ("ldb", ldb, b_rows), ("ldc", ldc, m)):
        if ld < max(1, rows):
            raise CUBLASError(7, f"{name}={ld} is less than max(1, rows={rows})")
    if m == 0 or n == 0 or batch == 0:
        return
    alpha_value, beta_value = _scalar(h, alpha, dtype), _scalar(h, beta, dtype)
    size = dtype.itemsize
    regions = {"C": _matrix(c, m, n, ldc, stride_c, batch, size)}
    if k > 0 and alpha_value != 0:  # otherwise A and B are not read
        regions["A"] = _matrix(a, a_rows, a_cols, lda, stride_a, batch, size)
        regions["B"] = _matrix(b, b_rows, b_cols, ldb, stride_b, batch, size)
    views = {name: memory.view(r, dtype, device, f"gemm {name}") for name, r in regions.items()}
    if memory.self_overlap(regions["C"]):
        raise UndefinedBehaviour("gemm: the matrices of C overlap one another")
    for name in set(regions) - {"C"}:
        if memory.overlap(regions[name], regions["C"]):
            raise UndefinedBehaviour(f"gemm: {name} overlaps C")
    ops = {CUBLAS_OP_N: lambda x: x, CUBLAS_OP_T: lambda x: np.swapaxes(x, 1, 2),
           CUBLAS_OP_C: lambda x: np.conj(np.swapaxes(x, 1, 2))}
    # Views are (batch, cols, rows): the transpose of each column-major matrix.
    product = 0
    if "A" in views:
        left = ops[transa](np.swapaxes(views["A"], 1, 2))
        right = ops[transb](np.swapaxes(views["B"], 1, 2))
        product = alpha_value * (left @ right)
    result = product if beta_value == 0 else product + beta_value * np.swapaxes(views["C"], 1, 2)
    views["C"][...] = np.swapaxes(np.broadcast_to(result, (batch, m, n)), 1, 2)


def _define(prefix: str, dtype: Any) -> None:
    dtype = np.dtype(dtype)
    plain = (f"{prefix}gemm(intptr_t handle, int transa, int transb, int m, int n, int k, "
             "size_t alpha, size_t A, int lda, size_t B, int ldb, size_t beta, size_t C, int ldc)")
    batched = (f"{prefix}gemmStridedBatched(intptr_t handle, int transa, int transb, int m, "
               "int n, int k, size_t alpha, size_t A, int lda, long long strideA, size_t B, "
               "int ldb, long long strideB, size_t beta, size_t C, int ldc, long long strideC, "
               "int batchCount)")

    def gemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):  # noqa: N803
        _gemm(dtype, handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
              0, 1)

    def strided(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,  # noqa: N803
                strideB, beta, C, ldc, strideC, batchCount):
        _gemm(dtype, handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,
              beta, C, ldc, strideC, batchCount)

    gemm.__name__, strided.__name__ = f"{prefix}gemm", f"{prefix}gemmStridedBatched"
    globals()[gemm.__name__] = binding(plain)(gemm)
    globals()[strided.__name__] = binding(batched)(strided)


for _prefix, _dtype in (("s", np.float32), ("d", np.float64), ("c", np.complex64),
                        ("z", np.complex128)):
    _define(_prefix, _dtype)

__all__ = ["CUBLASError", "CUBLAS_OP_C", "CUBLAS_OP_N", "CUBLAS_OP_T", "CUBLAS_POINTER_MODE_DEVICE",
           "CUBLAS_POINTER_MODE_HOST", "create", "destroy", "getPointerMode", "getStream",
           "getVersion",
           "setPointerMode", "setStream",
           *(f"{p}gemm{s}" for p in "sdcz" for s in ("", "StridedBatched"))]
