"""NumPy-compatible ``tensordot`` and ``transpose``, executed by gpu_tc.

With these and :func:`gpu_tc.einsum`, gpu_tc is an opt_einsum backend:
``opt_einsum.contract(expr, *operands, backend="gpu_tc")`` looks the three names up
in the ``gpu_tc`` module. Both functions take NumPy or CuPy arrays, and anything
numpy.asarray takes (nested lists, scalars).

Example:
    >>> import numpy as np, gpu_tc
    >>> gpu_tc.tensordot(np.ones((2, 3)), np.ones((3, 4)), axes=1).shape
    (2, 4)
    >>> gpu_tc.transpose(np.ones((2, 3, 4))).shape
    (4, 3, 2)
"""

from __future__ import annotations

import operator
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from .api import einsum
from .call import any_dask, bind
from .errors import AxesTypeError, AxisError, ShapeError

_LABELS = string.ascii_letters


def _shapes(operands: Sequence[Any], context: str) -> tuple[list[Any], list[tuple[int, ...]]]:
    """The operands as one backend's arrays (dask arrays as they are), and their shapes."""
    if any_dask(operands):
        return list(operands), [tuple(x.shape) for x in operands]
    call = bind(operands, None, context)
    return call.operands, [call.backend.layout(x).shape for x in call.operands]


def _arrays(values: Sequence[Any]) -> list[Any]:
    """The values as their backend's arrays (a NumPy scalar becomes a 0-d array)."""
    return bind(values, None, "tensordot").operands


def _axis_list(axes: Any, name: str, context: str) -> list[int]:
    """One side of a tensordot ``axes`` pair: an int or a sequence of ints."""
    try:
        return [operator.index(axes)]
    except TypeError:
        pass
    try:
        return [operator.index(axis) for axis in axes]
    except TypeError:
        raise AxesTypeError(
            f"{name} must be an int or a sequence of ints, got {axes!r} in {context}"
        ) from None


def _normalise(axes: list[int], rank: int, name: str, context: str) -> list[int]:
    result = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise AxisError(f"{name} {axis} is out of range for rank {rank} in {context}")
        result.append(axis % rank)
    if len(set(result)) != len(result):
        raise ShapeError(f"{name} {axes} repeats an axis in {context}")
    return result


def _contracted_axes(
    axes: Any, rank_a: int, rank_b: int, context: str
) -> tuple[list[int], list[int]]:
    try:
        count = operator.index(axes)
    except TypeError:
        message = f"axes must be an int or a pair of axis sequences, got {axes!r} in {context}"
        try:
            side_a, side_b = axes
        except TypeError:
            raise AxesTypeError(message) from None
        except ValueError:
            raise ShapeError(message) from None
        list_a = _axis_list(side_a, "axes[0]", context)
        list_b = _axis_list(side_b, "axes[1]", context)
    else:
        if count < 0:
            raise ShapeError(f"axes={count} is negative in {context}")
        if count > min(rank_a, rank_b):
            raise AxisError(
                f"axes={count} is more than min(rank a, rank b) = {min(rank_a, rank_b)} "
                f"in {context}"
            )
        list_a, list_b = list(range(rank_a - count, rank_a)), list(range(count))
    if len(list_a) != len(list_b):
        raise ShapeError(
            f"axes[0] has {len(list_a)} axes but axes[1] has {len(list_b)} in {context}"
        )
    return (_normalise(list_a, rank_a, "axes[0] axis", context),
            _normalise(list_b, rank_b, "axes[1] axis", context))


def tensordot(a: Any, b: Any, axes: int | Sequence[Any] = 2) -> Any:
    """numpy.tensordot: sum products over the given axes of ``a`` and ``b``.

    Args:
        a, b: The operands (NumPy or CuPy arrays of one kind, or array-likes).
        axes: N: the last N axes of ``a`` with the first N of ``b``; or a pair
            ``(axes_a, axes_b)`` of ints or equal-length sequences (negative allowed).

    Returns:
        The free axes of ``a`` then those of ``b``, as numpy.tensordot orders them.

    Raises:
        AxisError: an axis, or a count of axes, out of range (numpy's IndexError).
        AxesTypeError: ``axes`` or an axis of the wrong type (a TypeError).
        ShapeError: bad axes, or contracted extents that differ.

    Example:
        >>> import numpy as np, gpu_tc
        >>> a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
        >>> bool((gpu_tc.tensordot(a, b, axes=([1], [0])) == a @ b).all())
        True
    """
    (a, b), (shape_a, shape_b) = _shapes([a, b], f"tensordot(axes={axes!r})")
    rank_a, rank_b = len(shape_a), len(shape_b)
    context = f"tensordot(rank {rank_a}, rank {rank_b}, axes={axes!r})"
    axes_a, axes_b = _contracted_axes(axes, rank_a, rank_b, context)
    if rank_a + rank_b - len(axes_a) > len(_LABELS):
        raise ShapeError(f"{context} needs more than {len(_LABELS)} labels")
    labels_a = list(_LABELS[:rank_a])
    fresh = iter(_LABELS[rank_a:])
    labels_b = [""] * rank_b
    for axis_a, axis_b in zip(axes_a, axes_b):
        if shape_a[axis_a] != shape_b[axis_b]:
            raise ShapeError(
                f"axis {axis_a} of a (extent {shape_a[axis_a]}) and axis {axis_b} of b "
                f"(extent {shape_b[axis_b]}) are contracted but differ in {context}"
            )
        labels_b[axis_b] = labels_a[axis_a]
    labels_b = [label or next(fresh) for label in labels_b]
    free_a = [x for i, x in enumerate(labels_a) if i not in axes_a]
    free_b = [x for i, x in enumerate(labels_b) if i not in axes_b]
    subscripts = f"{''.join(labels_a)},{''.join(labels_b)}->{''.join(free_a + free_b)}"
    result = einsum(subscripts, a, b)
    # numpy.tensordot gives a 0-d array where einsum gives a scalar
    return result if free_a or free_b or any_dask([result]) else _arrays([result])[0]


def transpose(a: Any, axes: Sequence[int] | None = None) -> Any:
    """numpy.transpose: ``a`` with its axes permuted, as a view of it (as numpy's).

    Args:
        a: The operand (NumPy or CuPy array, or an array-like).
        axes: A permutation of the axes (negative allowed); None reverses them.

    Raises:
        AxisError: an axis out of range.
        AxesTypeError: an axis that is not an int (a TypeError).
        ShapeError: ``axes`` is not a permutation of ``a``'s axes.

    Example:
        >>> import numpy as np, gpu_tc
        >>> gpu_tc.transpose(np.arange(6.0).reshape(2, 3), (1, 0)).tolist()
        [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    """
    original = a
    (a,), (shape,) = _shapes([a], f"transpose(axes={axes!r})")
    rank = len(shape)
    context = f"transpose(rank {rank}, axes={axes!r})"
    if rank > len(_LABELS):
        raise ShapeError(f"{context} needs more than {len(_LABELS)} labels")
    if axes is None:
        order = list(range(rank))[::-1]
    else:
        order = _normalise(_axis_list(axes, "axes", context), rank, "axis", context)
        if len(order) != rank:
            raise ShapeError(f"axes={axes!r} do not match the {rank} axes of a in {context}")
    if rank == 0:  # as numpy: a NumPy scalar comes back as it is, the rest as 0-d arrays
        return original if isinstance(original, np.generic) else a
    labels = _LABELS[:rank]
    return einsum(f"{labels}->{''.join(labels[i] for i in order)}", a)
