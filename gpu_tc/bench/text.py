"""How reports name things: numbers to three figures or so, a report's title, its BLAS."""

from __future__ import annotations

import math
from typing import Any


def number(value: float | None) -> str:
    """Three significant figures or so; "-" for a missing value.

    Example:
        >>> number(1234.5), number(12.345), number(0.5), number(0.01234), number(None)
        ('1234', '12.3', '0.500', '0.0123', '-')
    """
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:#.3g}"


def title(doc: dict[str, Any]) -> str:
    """The heading, e.g. "tccg, float64, cpu: GFLOP/s (higher is better)".

    A run with ``--scale 0.5`` reads "tccg, float64, cpu, extents x0.5: ...".
    """
    better = "higher" if doc["metric"]["higher_is_better"] else "lower"
    unit = doc["metric"]["unit"]
    scale = doc.get("scale", 1.0)
    extents = f", extents x{scale:g}" if scale != 1.0 else ""
    return (f"{doc['suite']}, {doc['dtype']}, {doc['backend']}{extents}: "
            f"{unit} ({better} is better)")


def blas_line(env: dict[str, Any]) -> str:
    """NumPy's BLAS, kernel and threads in one line (older reports: the string they hold)."""
    blas = env.get("blas")
    if isinstance(blas, dict):
        return str(blas.get("text") or "unknown")
    return str(blas) if blas else "unknown"


def torch_blas_note(env: dict[str, Any]) -> str:
    """A sentence naming torch's own BLAS where the report recorded it (see
    gpu_tc.bench.environment.torch_blas), else ""."""
    found = env.get("torch_blas")
    return f" torch runs its own BLAS ({found}, from its build settings)." if found else ""


def engines_note(env: dict[str, Any]) -> str:
    """A sentence naming gpu_tc's GEMM engines where the report recorded them (see
    gpu_tc.bench.environment.mkl_engine), else ""."""
    if "gpu_tc_mkl" not in env:
        return ""
    found = env["gpu_tc_mkl"]
    if found is None:
        return " gpu_tc's GEMMs: NumPy's BLAS only (no MKL engine)."
    return f" gpu_tc's GEMMs: NumPy's BLAS and {found}, the faster measured per plan."


def variables_line(env: dict[str, Any]) -> str:
    """The BLAS and threading variables of a report's host, e.g. "OMP_NUM_THREADS=1"."""
    found = env.get("blas_variables")
    if found is None:
        return "not recorded"
    return ", ".join(f"{name}={value}" for name, value in found.items()) or "none set"
