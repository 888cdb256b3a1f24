"""pytest plugin: numpy's and opt_einsum's own test suites, as installed, run against
gpu_tc (tests/test_numpy_dropin.py starts them).

``-p dropin --dropin=numpy`` replaces ``numpy.einsum`` with ``gpu_tc.einsum`` before
collection (numpy's test_einsum.py calls ``np.einsum``). Where a numpy test compares
two einsum calls with each other, both would be gpu_tc's, so every call is also judged
against numpy's own einsum, run first on the same arguments: same dtype and shape,
values within the dtype's rounding, refused where numpy refuses. ``--dropin=opt_einsum`` makes
opt_einsum dispatch its numpy and cupy backends' einsum, tensordot and transpose to
gpu_tc; its tests judge them against numpy.einsum, which stays numpy's. Either way the
session ends by printing how many calls gpu_tc served, so a run that silently tested
numpy shows.

BY_DESIGN lists the tests that cannot pass, each with its reason; they run as strict
expected failures, so one that starts passing fails the run and the list stays true
(a name another version of the suite lacks is simply not collected).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gpu_tc

LONGDOUBLE = (
    "longdouble and clongdouble are not computed: no BLAS, cuTENSOR or CuPy kernel has "
    "them, and their precision differs by platform (80-bit x87 here, 64-bit elsewhere)"
)
OBJECT = (
    "object arrays are not computed (only cast into a numeric dtype=, under "
    "casting='unsafe'): gpu_tc contracts numbers with BLAS and cuTENSOR, not Python objects"
)
BY_DESIGN: dict[str, dict[str, str]] = {
    "numpy": {
        "test_einsum_sums_longdouble": LONGDOUBLE,
        "test_einsum_sums_clongdouble": LONGDOUBLE,
        "test_different_paths[g]": LONGDOUBLE,
        "test_different_paths[G]": LONGDOUBLE,
        "test_einsum_sums_object": OBJECT,
        "test_object_loop": OBJECT,
        "test_einsum_object_errors": OBJECT,
        "test_einsum_0d_out": (
            "it writes a float64 result into an int64 out under casting='safe'; numpy "
            "refuses that with optimize=False (TypeError) and its documented rule is 'safe', "
            "but its optimize path skips the check for a 0-d out: gpu_tc applies the rule "
            "on every path"
        ),
    },
    "opt_einsum": {},
}
SHARING_NESTING = (
    "fails with opt_einsum alone on a GPU host, gpu_tc or not: to_torch and to_cupy are "
    "memoized in the sharing cache by id(array) without keeping the numpy array, and a "
    "device copy does not reference it (a CPU torch.from_numpy view does), so the weakly "
    "held intermediate 'w' is freed inside the context; gpu_tc takes no part in that"
)
# Suite -> {test: (the backend that copies onto a GPU, reason)}: expected to fail only where
# that backend does copy (a CPU-only torch passes them; cupy without a device skips).
ON_GPU: dict[str, dict[str, tuple[str, str]]] = {
    "numpy": {},
    "opt_einsum": {
        "test_sharing_nesting[torch]": ("torch", SHARING_NESTING),
        "test_sharing_nesting[cupy]": ("cupy", SHARING_NESTING),
    },
}
SERVED = {"calls": 0}
NUMPY_EINSUM = np.einsum
RTOL = {"e": 1e-2, "f": 1e-4, "F": 1e-4, "d": 1e-10, "D": 1e-10}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--dropin", choices=sorted(BY_DESIGN), required=True,
                     help="whose test suite runs against gpu_tc")


def _counted(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def served(*args: Any, **kwargs: Any) -> Any:
        SERVED["calls"] += 1
        return function(*args, **kwargs)

    return served


def _same(got: Any, expected: Any, call: str) -> None:
    got, expected = np.asarray(got), np.asarray(expected)
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape), (call, got, expected)
    rtol = RTOL.get(expected.dtype.char)
    if rtol is None or expected.size == 0:
        np.testing.assert_array_equal(got, expected, err_msg=call)
        return
    scale = max(1.0, float(np.nanmax(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * scale, equal_nan=True,
                               err_msg=call)


def judged_einsum(*args: Any, **kwargs: Any) -> Any:
    """gpu_tc.einsum, checked against numpy's own einsum on the same call (run first,
    into a copy of ``out``, so that an ``out`` aliasing an operand is read as numpy
    reads it)."""
    SERVED["calls"] += 1
    call = f"einsum{args!r:.200} {kwargs!r:.200}"
    reference = dict(kwargs)
    if isinstance(kwargs.get("out"), np.ndarray):
        reference["out"] = kwargs["out"].copy()
    try:
        expected = NUMPY_EINSUM(*args, **reference)
    except Exception as refused:  # noqa: BLE001 - gpu_tc must refuse it too
        got = gpu_tc.einsum(*args, **kwargs)  # its error is what the numpy test judges
        message = f"numpy raised {refused!r} but gpu_tc returned {got!r}: {call}"
        raise AssertionError(message) from refused
    got = gpu_tc.einsum(*args, **kwargs)
    _same(got, expected, call)
    return got


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--dropin") == "numpy":
        np.einsum = judged_einsum
        return
    dispatch = importlib.import_module("opt_einsum.backends.dispatch")
    for backend in ("numpy", "cupy"):
        for name in ("einsum", "tensordot", "transpose"):
            dispatch._cached_funcs[(name, backend)] = _counted(getattr(gpu_tc, name))


def _no_cuda_device() -> str | None:
    """Why CuPy cannot run here, or None when it can."""
    try:
        cupy = importlib.import_module("cupy")
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "no CUDA device"
    except Exception as err:  # noqa: BLE001 - any failure means no usable device
        return f"{type(err).__name__}: {err}"


def _copies_to_gpu(backend: str) -> bool:
    """Whether opt_einsum's to_<backend> copies a numpy array onto a GPU here."""
    if backend == "cupy":
        return _no_cuda_device() is None
    try:  # opt_einsum's torch backend uses "cuda" exactly when this is true
        return bool(importlib.import_module("torch").cuda.is_available())
    except ImportError:
        return False


def expected_failures(suite: str) -> dict[str, str]:
    """BY_DESIGN's tests, and ON_GPU's where their backend copies onto a GPU here."""
    found = dict(BY_DESIGN[suite])
    found.update({name: why for name, (backend, why) in ON_GPU[suite].items()
                  if _copies_to_gpu(backend)})
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    expected = expected_failures(config.getoption("--dropin"))
    needs_cuda = {item.nodeid for item in items if "cupy" in item.nodeid}
    why = _no_cuda_device() if needs_cuda else None
    for item in items:
        if item.name in expected:
            item.add_marker(pytest.mark.xfail(reason=expected[item.name], strict=True))
        if why is not None and item.nodeid in needs_cuda:
            reason = f"opt_einsum's cupy backend needs a GPU: {why}"
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"dropin: gpu_tc served {SERVED['calls']} calls")
