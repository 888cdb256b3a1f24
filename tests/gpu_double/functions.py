"""The ``cupy.*`` functions of the emulation (creation, copies, views, a few ufuncs).

Signatures follow CuPy 14's, which the conformance test compares with the real
package; host <-> device copies happen only through ``asarray``/``array``/``asnumpy``
and ``ndarray.get``, as on CuPy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import memory, runtime
from .array import _host_operand, _reduce, _same_device, _ufunc, ndarray


def _order_of(a: np.ndarray, order: str | None) -> str:
    return "K" if order in (None, "K", "A") else order


def array(obj: Any, dtype: Any = None, copy: bool = True, order: str = "K", subok: bool = False,
          ndmin: int = 0, *, blocking: bool = False) -> ndarray:
    """A new device array (from a device array, NumPy array or nested sequence)."""
    if isinstance(obj, ndarray):
        if not copy and (dtype is None or np.dtype(dtype) == obj.dtype):
            return obj
        return obj.astype(obj.dtype if dtype is None else dtype, order=_order_of(obj._a, order))
    host = np.array(obj, dtype=dtype, ndmin=ndmin)
    return ndarray._new_from(host, _order_of(host, order))


def asarray(a: Any, dtype: Any = None, order: str | None = None, *, copy: bool | None = None,
            blocking: bool = False) -> ndarray:
    """``a`` as a device array: itself when it already is one of that dtype."""
    if isinstance(a, ndarray) and not copy and (dtype is None or np.dtype(dtype) == a.dtype):
        if order in ("C", "F") and not a._a.flags[f"{order}_CONTIGUOUS"]:
            return a.astype(a.dtype, order=order)
        return a
    return array(a, dtype=dtype, copy=True, order=order or "K")


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None, *,
            blocking: bool = True) -> np.ndarray:
    """A host copy of a device array (other values through numpy.asarray)."""
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return np.asarray(a, order=order)


def empty(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    return ndarray(shape, dtype, order=order)


def zeros(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    result = ndarray(shape, dtype, order=order)
    result.fill(0)
    return result


def ones(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    result = ndarray(shape, dtype, order=order)
    result.fill(1)
    return result


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C") -> ndarray:
    dtype = np.asarray(fill_value).dtype if dtype is None else dtype
    result = ndarray(shape, dtype, order=order)
    result.fill(fill_value)
    return result


def empty_like(prototype: ndarray, dtype: Any = None, order: str = "K", subok: Any = None,
               shape: Any = None) -> ndarray:
    layout = np.empty_like(prototype._a, dtype=dtype, order=order, shape=shape)
    return ndarray(layout.shape, layout.dtype, strides=layout.strides)


def zeros_like(a: ndarray, dtype: Any = None, order: str = "K", subok: Any = None,
               shape: Any = None) -> ndarray:
    result = empty_like(a, dtype, order, subok, shape)
    result.fill(0)
    return result


def ascontiguousarray(a: Any, dtype: Any = None) -> ndarray:
    return asarray(a, dtype, order="C")


def asfortranarray(a: Any, dtype: Any = None) -> ndarray:
    return asarray(a, dtype, order="F")


def copyto(dst: ndarray, src: Any, casting: str = "same_kind", where: Any = None) -> None:
    """Copy (broadcasting) ``src`` into ``dst``; both on the current device."""
    _same_device([dst] + ([src] if isinstance(src, ndarray) else []))
    value = src._a if isinstance(src, ndarray) else src
    if isinstance(value, np.ndarray) and not isinstance(src, ndarray):
        raise TypeError(f"Unsupported type {type(src)}")
    np.copyto(dst._a, value, casting=casting)


def _region(x: ndarray) -> memory.Region:
    return memory.Region(x.data.ptr, x.itemsize, x.shape, tuple(s // x.itemsize for s in x.strides))


def may_share_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    """Whether the address spans of two arrays intersect (CuPy's bounds check)."""
    if not isinstance(a, ndarray) or not isinstance(b, ndarray) or a.size == 0 or b.size == 0:
        return False
    spans = [_region(x).span() for x in (a, b)]
    (a0, a1), (b0, b1) = spans
    return a0 < b1 and b0 < a1


def shares_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    return may_share_memory(a, b) and np.shares_memory(a._a, b._a)


def broadcast_to(array: ndarray, shape: Any) -> ndarray:
    """A view with stride 0 along broadcast axes, writable as CuPy's are."""
    view = np.broadcast_to(array._a, shape)
    return ndarray._wrap(np.lib.stride_tricks.as_strided(array._a, view.shape, view.strides),
                         array._mem)


def as_strided(x: ndarray, shape: Any = None, strides: Any = None) -> ndarray:
    """``cupy.lib.stride_tricks.as_strided``; elements past the allocation are an error
    here (a GPU would read or write out of bounds)."""
    shape = x.shape if shape is None else tuple(shape)
    strides = x.strides if strides is None else tuple(strides)
    region = memory.Region(x.data.ptr, x.itemsize, shape, tuple(s // x.itemsize for s in strides))
    if x._mem.nbytes and not region.empty:
        memory.view(region, x.dtype, x._mem.device, "as_strided")
    host = np.lib.stride_tricks.as_strided(x._a, shape, strides)
    return ndarray._wrap(host, x._mem)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> ndarray:
    return ndarray._new_from(np.arange(start, stop, step, dtype=dtype))


def multiply(x1: Any, x2: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
             dtype: Any = None) -> ndarray:
    return _ufunc(np.multiply, x1, x2, out=out)


def add(x1: Any, x2: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
        dtype: Any = None) -> ndarray:
    return _ufunc(np.add, x1, x2, out=out)


def negative(x: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
             dtype: Any = None) -> ndarray:
    return _ufunc(np.negative, x, out=out)


def conjugate(x: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
              dtype: Any = None) -> ndarray:
    return _ufunc(np.conjugate, x, out=out)


conj = conjugate


def matmul(x1: ndarray, x2: ndarray, /, out: ndarray | None = None, *,
           casting: str = "same_kind", dtype: Any = None) -> ndarray:
    return _ufunc(np.matmul, x1, x2, out=out)


def maximum(x1: Any, x2: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
            dtype: Any = None) -> ndarray:
    return _ufunc(np.maximum, x1, x2, out=out)


def minimum(x1: Any, x2: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
            dtype: Any = None) -> ndarray:
    return _ufunc(np.minimum, x1, x2, out=out)


def absolute(x: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
             dtype: Any = None) -> ndarray:
    return _ufunc(np.absolute, x, out=out)


def _unary_ufunc(function: Callable[..., Any]) -> Callable[..., ndarray]:
    """CuPy's one-operand ufunc of NumPy's ``function``, run on the host copy."""

    def ufunc(x: Any, /, out: ndarray | None = None, *, casting: str = "same_kind",
              dtype: Any = None) -> ndarray:
        return _ufunc(function, x, out=out)

    ufunc.__name__ = ufunc.__qualname__ = function.__name__
    return ufunc


# The ufuncs gpu_tc.cuda.cupy_kernels applies for unary operators cuTENSOR refuses.
sqrt, reciprocal, exp, log = (_unary_ufunc(f) for f in (np.sqrt, np.reciprocal, np.exp, np.log))
sin, cos, tan, tanh = (_unary_ufunc(f) for f in (np.sin, np.cos, np.tan, np.tanh))
sinh, cosh, arcsin, arccos = (_unary_ufunc(f) for f in (np.sinh, np.cosh, np.arcsin, np.arccos))
arctan, arcsinh, arccosh, arctanh = (
    _unary_ufunc(f) for f in (np.arctan, np.arcsinh, np.arccosh, np.arctanh)
)
ceil, floor = (_unary_ufunc(f) for f in (np.ceil, np.floor))


def einsum(*operands: Any, **kwargs: Any) -> ndarray:
    """cupy.einsum (subscripts first) as NumPy's einsum on the host views, in the dtype
    NumPy gives (integers wrap as CuPy's do); the benchmark's cupy peer and gpu_tc's
    integer route call it."""
    subscripts, arrays = operands[0], operands[1:]
    _same_device([x for x in arrays if isinstance(x, ndarray)])
    values = np.einsum(subscripts, *(_host_operand(x) for x in arrays), optimize=True,
                       dtype=kwargs.get("dtype"))
    return ndarray._new_from(np.asarray(values))


def get_array_module(*args: Any) -> Any:
    import sys

    return sys.modules["cupy"] if any(isinstance(a, ndarray) for a in args) else np


def get_default_memory_pool() -> runtime.MemoryPool:
    return runtime.MEMORY_POOL


class ReductionKernel:
    """``cupy.ReductionKernel``, for the one kernel gpu_tc defines: a plain sum (map
    ``x``, reduce ``a + b``, identity ``0``); others are refused."""

    def __init__(self, in_params: str, out_params: str, map_expr: str, reduce_expr: str,
                 post_map_expr: str, identity: str | None, name: str = "reduce_kernel",
                 **kwargs: Any) -> None:
        if (map_expr, reduce_expr, post_map_expr, identity) != ("x", "a + b", "y = a", "0"):
            raise NotImplementedError(f"the emulation has no reduction kernel {name!r}")
        self.name = name

    def __call__(self, x: ndarray, axis: Any = None, out: ndarray | None = None,
                 keepdims: bool = False, stream: Any = None) -> ndarray:
        if out is not None and out.dtype != x.dtype:
            raise TypeError(f"{self.name}: T is {x.dtype} in x and {out.dtype} in y")
        return _reduce(np.sum, x, axis, None, keepdims, out)
