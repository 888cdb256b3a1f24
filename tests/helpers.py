"""Shared test helpers: backends, dtypes, tolerances, and checks against gpu_tc.reference.

Every numerical check compares with :mod:`gpu_tc.reference` (double precision, no BLAS)
with a tolerance that scales with the problem: an element of an einsum may be off by at
most ``rtol`` times the same einsum of the operands' absolute values (the bound that
floating-point error analysis of a sum of products gives). Result dtype and shape are
compared with numpy.einsum's.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_tc
from gpu_tc import reference


def _cupy_is_emulated() -> bool:
    spec = importlib.util.find_spec("cupy")
    return spec is not None and "gpu_double" in str(spec.origin)


# Whether "cupy" is tests/gpu_double's emulation (a test double: never count it as a GPU).
GPU_EMULATED = _cupy_is_emulated()
# For gpu tests that inject faults only the emulation can (skipped on a real GPU).
needs_emulation = pytest.mark.skipif(
    not GPU_EMULATED, reason="injects faults through tests/gpu_double's emulated libraries"
)

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("gpu", id="gpu", marks=pytest.mark.gpu)]

DTYPES = [
    pytest.param(np.dtype(name), id=name)
    for name in ("float32", "float64", "complex64", "complex128")
]

# Relative to the problem's scale (see module docstring); one entry per compute dtype.
RTOL = {"f": 1e-4, "F": 1e-4, "d": 1e-10, "D": 1e-10}


def rtol_for(dtype: Any) -> float:
    """The tolerance of a compute dtype."""
    return RTOL[np.dtype(dtype).char]


def to_backend(x: Any, backend: str) -> Any:
    """``x`` as the backend's array type (NumPy arrays stay as they are on "cpu")."""
    if backend == "cpu":
        return x
    import cupy  # only GPU tests get here; they are skipped where CuPy is missing

    return cupy.asarray(x)


def to_numpy(x: Any) -> Any:
    """A host copy of a backend result (CuPy arrays come back through cupy.asnumpy)."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy.asnumpy(x)
    return np.asarray(x)


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """Normal random values of ``dtype`` (complex dtypes get a random imaginary part)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        values = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    elif dtype.kind in "iu":
        values = rng.integers(-3, 4, size=shape)
    elif dtype.kind == "b":
        values = rng.integers(0, 2, size=shape)
    else:
        values = rng.standard_normal(shape)
    return np.asarray(values).astype(dtype)


def _magnitude(x: Any) -> Any:
    array = np.asarray(x)
    return np.abs(array) if array.dtype.kind in "fc" else np.abs(array.astype(np.float64))


def assert_close(got: Any, expected: Any, dtype: Any, scale: Any = None) -> None:
    """``got`` equals ``expected`` elementwise within the dtype's tolerance.

    Args:
        got: The value to check (any backend).
        expected: The exact value (from the reference kernel or by hand).
        dtype: The compute dtype that picks the tolerance.
        scale: The magnitude each element's error is relative to; defaults to
            ``|expected|`` with a floor of 1 on its largest element.
    """
    got = to_numpy(got)
    expected = to_numpy(expected)
    assert got.shape == expected.shape, f"shape {got.shape} != expected {expected.shape}"
    if scale is None:
        scale = np.abs(expected)
    scale = np.asarray(scale, dtype=np.float64)
    floor = max(float(scale.max()) if scale.size else 0.0, 1.0) * 1e-6
    tol = rtol_for(dtype) * (scale + floor)
    error = np.abs(got.astype(np.complex128) - expected.astype(np.complex128))
    bad = ~(error <= tol)  # also catches NaN
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{int(bad.sum())} of {bad.size} elements differ; first at {where}: got "
            f"{got[where]!r}, expected {expected[where]!r} (tolerance {tol[where]:.3g})"
        )


def check_result_type(got: Any, expected_numpy: Any, backend: str) -> None:
    """``got`` has numpy.einsum's result dtype and shape (and, on the CPU, its kind:
    a NumPy scalar for a 0-d result, an ndarray otherwise)."""
    assert got.dtype == np.asarray(expected_numpy).dtype, (
        f"dtype {got.dtype} != numpy's {np.asarray(expected_numpy).dtype}"
    )
    assert tuple(got.shape) == np.shape(expected_numpy), (
        f"shape {tuple(got.shape)} != numpy's {np.shape(expected_numpy)}"
    )
    if backend == "cpu":
        assert isinstance(got, np.ndarray) == isinstance(expected_numpy, np.ndarray), (
            f"got a {type(got).__name__}, numpy gives a {type(expected_numpy).__name__}"
        )


def reference_einsum(subscripts: str, *operands: Any) -> tuple[np.ndarray, np.ndarray]:
    """The exact einsum and its error scale (the einsum of the operands' magnitudes)."""
    exact = reference.einsum(subscripts, *operands)
    scale = reference.einsum(subscripts, *[_magnitude(x) for x in operands])
    return exact, scale


def check_einsum(
    subscripts: str,
    *operands: Any,
    backend: str = "cpu",
    convert: Callable[[Any, str], Any] = to_backend,
    out: Any = None,
) -> Any:
    """Run gpu_tc.einsum on the backend and check it against reference and numpy.

    Args:
        subscripts: The expression.
        *operands: Host operands (NumPy arrays, lists or scalars).
        backend: "cpu" or "gpu".
        convert: How a host operand reaches the backend (default: :func:`to_backend`).
        out: Passed through to gpu_tc.einsum; the result must then be ``out``.

    Returns:
        What the second (warm) gpu_tc.einsum call returned.
    """
    expected_numpy = np.einsum(subscripts, *operands)
    exact, scale = reference_einsum(subscripts, *operands)
    device = [convert(x, backend) if isinstance(x, np.ndarray) else x for x in operands]
    for _ in range(2):  # a cold call builds the plan, a warm one takes the cached path
        if out is None:
            got = gpu_tc.einsum(subscripts, *device)
            check_result_type(got, expected_numpy, backend)
        else:
            got = gpu_tc.einsum(subscripts, *device, out=out)
            assert got is out, "einsum(out=...) must return out"
        assert_close(got, exact, np.asarray(expected_numpy).dtype, scale)
    return got


def call_until_reason(plan: Any, text: str, call: Callable[[], object], calls: int) -> None:
    """Run ``call`` (a call of ``plan`` and its checks) until ``text`` is in the plan's
    reason, at most ``calls`` times: a measured plan does not time a call made while
    another test's threads spin, so how many calls its measurement takes varies."""
    for _ in range(calls):
        call()
        if text in plan.reason:
            return


def count_fresh_calls(monkeypatch: pytest.MonkeyPatch, plan_class: type,
                      record: Callable[[Any, Any], object]) -> list[object]:
    """Patch ``plan_class``'s fresh calls (made by its ``_fresh_call``) so that each
    appends ``record(plan, operand)`` to the list returned, then runs."""
    calls: list[object] = []
    made = plan_class._fresh_call

    def counted(plan: Any) -> Any:
        call = made(plan)

        def fresh(a: Any) -> Any:
            calls.append(record(plan, a))
            return call(a)

        return fresh

    monkeypatch.setattr(plan_class, "_fresh_call", counted)
    return calls


def benchmark_script(name: str) -> Any:
    """``benchmarks/<name>.py`` loaded as a module (the scripts are not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
