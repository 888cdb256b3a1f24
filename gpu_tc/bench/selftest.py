"""``gpu-tc selftest``: every operation on every available backend against the reference.

Small random operands in float32, float64, complex64 and complex128; one line per
check ("PASS cpu float64 einsum 'ij,jk->ik'"); exit status 0 only when all pass.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from .. import api, reference
from ..options import BinaryOp, ReduceOp, UnaryOp
from . import environment

DTYPES = ("float32", "float64", "complex64", "complex128")
TOLERANCE = {"float32": 2e-5, "complex64": 2e-5, "float64": 1e-12, "complex128": 1e-12}


@dataclass(frozen=True)
class Check:
    """One operation on fixed shapes.

    Attributes:
        operation: The gpu_tc function's name.
        label: What is checked, e.g. "'ij,jk->ik'".
        shapes: The operands' shapes.
        run: gpu_tc on the (device) operands.
        expected: The reference on the host operands.
        real_only: Skipped for complex dtypes (MAX orders values).
    """

    operation: str
    label: str
    shapes: tuple[tuple[int, ...], ...]
    run: Callable[[list[Any]], Any]
    expected: Callable[[list[np.ndarray]], np.ndarray]
    real_only: bool = False


def _einsum(expr: str, *shapes: tuple[int, ...]) -> Check:
    return Check("einsum", repr(expr), shapes, lambda ops: api.einsum(expr, *ops),
                 lambda ops: reference.einsum(expr, *ops))


CHECKS = (
    _einsum("ij,jk->ik", (3, 4), (4, 5)),
    _einsum("ij,jk", (3, 4), (4, 5)),
    _einsum("i,i->", (7,), (7,)),
    _einsum("i,j->ij", (3,), (4,)),
    _einsum("ijk->kji", (2, 3, 4)),
    _einsum("ii->", (4, 4)),
    _einsum("ii->i", (4, 4)),
    _einsum("ijkj->ik", (2, 3, 4, 3)),
    _einsum("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),
    _einsum("bij,bjk->bik", (3, 2, 4), (3, 4, 5)),
    _einsum("abcd,dbea->ec", (2, 3, 4, 5), (5, 3, 6, 2)),
    _einsum("ij,jk,kl->il", (2, 3), (3, 4), (4, 5)),
    _einsum("ab,bc,cd,de->ae", (2, 3), (3, 4), (4, 3), (3, 2)),
    Check("contract", "'ij,jk->ik' alpha=2 beta=-0.5 c", ((3, 4), (4, 5), (3, 5)),
          lambda ops: api.contract("ij,jk->ik", ops[0], ops[1], alpha=2.0, beta=-0.5, c=ops[2]),
          lambda ops: reference.contract("ij,jk->ik", ops[0], ops[1], 2.0, -0.5, ops[2])),
    Check("permute", "'abcd->dcba' alpha=2", ((2, 3, 4, 5),),
          lambda ops: api.permute("abcd->dcba", ops[0], alpha=2),
          lambda ops: reference.permute("abcd->dcba", ops[0], alpha=2)),
    Check("reduce", "'ijk->ik' SUM alpha=1.5 beta=0.5 c", ((3, 4, 5), (3, 5)),
          lambda ops: api.reduce("ijk->ik", ops[0], alpha=1.5, beta=0.5, c=ops[1]),
          lambda ops: reference.reduce("ijk->ik", ops[0], alpha=1.5, beta=0.5, c=ops[1])),
    Check("reduce", "'ijk->k' MAX", ((3, 4, 5),),
          lambda ops: api.reduce("ijk->k", ops[0], op=ReduceOp.MAX),
          lambda ops: reference.reduce("ijk->k", ops[0], op=ReduceOp.MAX), real_only=True),
    Check("elementwise_binary", "'ij,ji->ij' ADD alpha=2 gamma=3", ((3, 4), (4, 3)),
          lambda ops: api.elementwise_binary("ij,ji->ij", ops[0], ops[1], alpha=2, gamma=3),
          lambda ops: reference.elementwise("ij,ji->ij", ops, (2, 3), (UnaryOp.IDENTITY,) * 2,
                                            (BinaryOp.ADD,))),
    Check("elementwise_binary", "'ij,j->ij' MUL", ((3, 4), (4,)),
          lambda ops: api.elementwise_binary("ij,j->ij", ops[0], ops[1], op=BinaryOp.MUL),
          lambda ops: reference.elementwise("ij,j->ij", ops, (1, 1), (UnaryOp.IDENTITY,) * 2,
                                            (BinaryOp.MUL,))),
    Check("elementwise_trinary", "'ij,ij,ji->ij' ADD, MUL", ((3, 4), (3, 4), (4, 3)),
          lambda ops: api.elementwise_trinary("ij,ij,ji->ij", *ops, alpha=2, beta=-1, gamma=0.5,
                                              op_ab=BinaryOp.ADD, op_abc=BinaryOp.MUL),
          lambda ops: reference.elementwise("ij,ij,ji->ij", ops, (2, -1, 0.5),
                                            (UnaryOp.IDENTITY,) * 3, (BinaryOp.ADD, BinaryOp.MUL))),
    Check("trace", "axis1=0 axis2=2", ((3, 4, 3),),
          lambda ops: api.trace(ops[0], axis1=0, axis2=2),
          lambda ops: reference.einsum("iji->j", ops[0])),
    Check("prepare", "'ij,jk->ik' execute", ((3, 4), (4, 5)),
          lambda ops: api.prepare("ij,jk->ik", *ops).execute(*ops),
          lambda ops: reference.einsum("ij,jk->ik", *ops)),
)


def operands(shapes: tuple[tuple[int, ...], ...], dtype: str, seed: int) -> list[np.ndarray]:
    """Random host operands of ``dtype`` (complex: both parts random)."""
    rng = np.random.default_rng(seed)
    result = []
    for shape in shapes:
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        result.append(x.astype(dtype))
    return result


def compare(got: Any, expected: np.ndarray, dtype: str) -> str | None:
    """None when ``got`` matches ``expected`` in shape, dtype and value; else why not."""
    got = np.asarray(got)
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if got.dtype != np.dtype(dtype):
        return f"dtype {got.dtype}, expected {dtype}"
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    error = float(np.max(np.abs(got - expected))) / scale if expected.size else 0.0
    if not error <= TOLERANCE[dtype]:
        return f"relative error {error:.3g} above {TOLERANCE[dtype]:g}"
    return None


def _backend_arrays(backend: str) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    if backend == "cpu":
        return (lambda x: x), np.asarray
    import cupy

    return cupy.asarray, cupy.asnumpy


def check_backend(backend: str, stream: TextIO) -> tuple[int, int]:
    """Run every check on ``backend``; returns (passed, failed)."""
    put, host = _backend_arrays(backend)
    passed = failed = 0
    for dtype in DTYPES:
        for index, check in enumerate(CHECKS):
            if check.real_only and np.dtype(dtype).kind == "c":
                continue
            ops = operands(check.shapes, dtype, seed=index)
            try:
                got = host(check.run([put(x) for x in ops]))
                problem = compare(got, check.expected(ops), dtype)
            except Exception as err:  # noqa: BLE001 - a failing check is reported, not raised
                problem = f"{type(err).__name__}: {err}"
            status = "PASS" if problem is None else "FAIL"
            detail = "" if problem is None else f": {problem}"
            line = f"{status} {backend} {dtype} {check.operation} {check.label}{detail}"
            print(line, file=stream)
            passed, failed = passed + (problem is None), failed + (problem is not None)
    return passed, failed


def run_selftest(backends: list[str] | None = None, stream: TextIO | None = None) -> int:
    """Check the asked-for backends (default: cpu, and gpu when usable); 0 if all pass."""
    stream = stream if stream is not None else sys.stdout
    gpu = environment.gpu_status()
    chosen = list(dict.fromkeys(backends or ["cpu", "gpu"]))
    passed = failed = 0
    for backend in chosen:
        if backend == "gpu" and not gpu.available:
            explicit = backends is not None
            print(f"{'FAIL' if explicit else 'SKIP'} gpu: {gpu.reason}", file=stream)
            failed += explicit
            continue
        ok, bad = check_backend(backend, stream)
        passed, failed = passed + ok, failed + bad
    print(f"{passed + failed} checks: {passed} passed, {failed} failed", file=stream)
    return 0 if failed == 0 and passed > 0 else 1
