"""einsum's front for warm calls of NumPy arrays: in C (gpu_tc._warm) where that
extension was built, so that a call whose plan is cached runs its plan's warm function
with no Python frame of gpu_tc's own before it. Every other call, and every call where
the extension was not built, goes to the Python function, whose own warm path is the
same lookup in Python.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .cache import PlanCache

F = TypeVar("F", bound=Callable[..., Any])


def front(level: PlanCache) -> Callable[[F], F]:
    """A decorator: the function, fronted by the compiled warm path over ``level``'s
    plans (keyed by the CPU backend's warm key), which looks and pickles as the
    function does (``__wrapped__`` is the function itself)."""

    def wrap(function: F) -> F:
        warm_type = _warm_type()
        if warm_type is None:
            return function
        try:
            warm = warm_type(function, np.ndarray, level)
        except (TypeError, AttributeError) as err:  # an extension built for other code
            warnings.warn(f"the compiled warm path gpu_tc._warm does not fit this gpu_tc "
                          f"({err}): einsum's warm calls run in Python", RuntimeWarning,
                          stacklevel=3)
            return function
        functools.update_wrapper(warm, function)
        return warm  # type: ignore[no-any-return]

    return wrap


def _warm_type() -> Any:
    """gpu_tc._warm.WarmEinsum; None where the extension was not built (quietly: the
    Python path is the same, a fraction of a microsecond slower) or does not import
    (with a warning)."""
    if importlib.util.find_spec(f"{__package__}._warm") is None:
        return None
    try:
        from ._warm import WarmEinsum
    except ImportError as err:
        warnings.warn(f"the compiled warm path gpu_tc._warm does not import ({err}): "
                      "einsum's warm calls run in Python", RuntimeWarning, stacklevel=2)
        return None
    return WarmEinsum
