"""The emulated ``cupy.ndarray`` and the CuPy functions gpu_tc and its tests call.

An array is a NumPy view into an emulated device allocation (:mod:`.memory`), so
``data.ptr`` is a real address the emulated libraries can read back. As on CuPy,
arrays never turn into NumPy arrays implicitly (``__array__`` raises TypeError),
computing with arrays of a device other than the current one is an error, and every
new array is allocated on the current device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import memory, runtime


class Flags:
    """``cupy._core.flags.Flags``."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, c_contiguous: bool, f_contiguous: bool, owndata: bool) -> None:
        self.c_contiguous, self.f_contiguous, self.owndata = c_contiguous, f_contiguous, owndata

    def __getitem__(self, name: str) -> bool:
        return bool(getattr(self, name.lower()))


class MemoryPointer:
    """``cupy.cuda.MemoryPointer``: an address inside one allocation."""

    __slots__ = ("mem", "ptr")

    def __init__(self, mem: memory.Allocation, offset: int) -> None:
        self.mem = mem
        self.ptr = mem.start + offset if mem.nbytes else 0

    @property
    def device_id(self) -> int:
        return self.mem.device

    @property
    def device(self) -> runtime.Device:
        return runtime.Device(self.mem.device)

    def __int__(self) -> int:
        return self.ptr

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.mem, self.ptr - self.mem.start + offset)


def alloc(size: int) -> MemoryPointer:
    """``cupy.cuda.alloc``: raw memory from the pool (OutOfMemoryError past its limit)."""
    return MemoryPointer(memory.allocate(size), 0)


def _same_device(arrays: list[ndarray]) -> None:
    current = runtime.current_device()
    for x in arrays:
        if x._mem.device != current:
            raise ValueError(
                f"The device where the array resides ({x._mem.device}) is different from the "
                f"current device ({current}). Peer access is unavailable between these devices."
            )


def _host_operand(value: Any) -> Any:
    """A NumPy stand-in for a kernel argument: arrays of this device or Python scalars."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)}")
    return value


class ndarray:  # noqa: N801 - CuPy's name
    """``cupy.ndarray`` on emulated device memory."""

    __array_priority__ = 100

    def __init__(
        self, shape: Any, dtype: Any = float, memptr: MemoryPointer | None = None,
        strides: Any = None, order: str = "C",
    ) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
        if memptr is None:
            mem = memory.allocate(math.prod(shape) * dtype.itemsize)
            offset = 0
        else:
            mem, offset = memptr.mem, memptr.ptr - memptr.mem.start if memptr.ptr else 0
        host = np.ndarray(shape, dtype, buffer=mem.buffer, offset=offset, strides=strides,
                          order=order)
        self._a, self._mem = host, mem

    @classmethod
    def _wrap(cls, host: np.ndarray, mem: memory.Allocation) -> ndarray:
        array = cls.__new__(cls)
        array._a, array._mem = host, mem
        return array

    @classmethod
    def _new_from(cls, values: Any, order: str = "K") -> ndarray:
        """A new array on the current device holding ``values`` (NumPy, laid out per order)."""
        values = np.asarray(values)
        layout = np.empty_like(values, order=order)  # the strides numpy gives that order
        result = cls(values.shape, values.dtype, strides=layout.strides)
        result._a[...] = values
        return result

    # --- attributes --------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    strides = property(lambda self: self._a.strides)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)

    @property
    def flags(self) -> Flags:
        """CuPy's flags: contiguity and ownership only (CuPy views are all writable)."""
        flags = self._a.flags
        return Flags(flags.c_contiguous, flags.f_contiguous, self._a.base is None)

    @property
    def data(self) -> MemoryPointer:
        offset = self._a.ctypes.data - self._mem.start if self._mem.nbytes else 0
        return MemoryPointer(self._mem, offset)

    @property
    def device(self) -> runtime.Device:
        return runtime.Device(self._mem.device)

    @property
    def T(self) -> ndarray:  # noqa: N802 - NumPy's name
        return self._view(self._a.T)

    @property
    def real(self) -> ndarray:
        return self._view(self._a.real)

    @property
    def imag(self) -> ndarray:
        return self._view(self._a.imag)

    def _view(self, host: np.ndarray) -> ndarray:
        if np.may_share_memory(host, self._a) or host.size == 0:
            return ndarray._wrap(host, self._mem)
        with runtime.Device(self._mem.device):
            return ndarray._new_from(host)

    # --- conversion ----------------------------------------------------------------
    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly."
        )

    def get(self, stream: Any = None, order: str = "C", out: Any = None,
            blocking: bool = True) -> np.ndarray:
        runtime.wait_for_device()  # a copy to the host follows the work queued before
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, order=order, copy=True)

    def item(self) -> Any:
        runtime.wait_for_device()
        return self._a.item()

    def tolist(self) -> Any:
        runtime.wait_for_device()
        return self._a.tolist()

    def __float__(self) -> float:
        return float(self._a)

    def __complex__(self) -> complex:
        return complex(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def __len__(self) -> int:
        return len(self._a)

    def __repr__(self) -> str:
        return repr(self._a)

    def __str__(self) -> str:
        return str(self._a)

    # --- views and copies ----------------------------------------------------------
    def __getitem__(self, key: Any) -> ndarray:
        index = _index(key)
        result = self._a[index]
        if not isinstance(result, np.ndarray):  # every axis indexed: a 0-d view
            result = self._a[(index if isinstance(index, tuple) else (index,)) + (None,)]
            result = result.reshape(())
        return self._view(result)

    def __setitem__(self, key: Any, value: Any) -> None:
        _same_device([self] + ([value] if isinstance(value, ndarray) else []))
        self._a[_index(key)] = value._a if isinstance(value, ndarray) else value

    def copy(self, order: str = "C") -> ndarray:
        with runtime.Device(self._mem.device):
            return ndarray._new_from(self._a, order)

    def astype(self, dtype: Any, order: str = "K", casting: Any = None, subok: Any = None,
               copy: bool = True) -> ndarray:
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        with runtime.Device(self._mem.device):
            return ndarray._new_from(self._a.astype(dtype, order=order), order)

    def view(self, dtype: Any = None, type: Any = None) -> ndarray:  # noqa: A002 - CuPy's name
        return self._view(self._a.view() if dtype is None else self._a.view(dtype))

    def reshape(self, *shape: Any, order: str = "C", copy: bool | None = None) -> ndarray:
        return self._view(self._a.reshape(*shape, order=order))

    def transpose(self, *axes: Any) -> ndarray:
        return self._view(self._a.transpose(*axes))

    def swapaxes(self, axis1: int, axis2: int) -> ndarray:
        return self._view(self._a.swapaxes(axis1, axis2))

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> ndarray:
        """CuPy's diagonal: a view, writable like every CuPy view (NumPy's is read-only);
        an empty diagonal is a new array, as CuPy's is."""
        found = self._a.diagonal(offset, axis1, axis2)
        if found.shape[-1] == 0:
            with runtime.Device(self._mem.device):
                return ndarray(found.shape, self.dtype)
        index = [slice(None)] * self.ndim
        if found.size:  # the view starts at the diagonal's first element
            index[axis2] = slice(max(offset, 0), None)
            index[axis1] = slice(max(-offset, 0), None)
        view = np.lib.stride_tricks.as_strided(
            self._a[tuple(index)], found.shape, found.strides,
            writeable=bool(self._a.flags.writeable),
        )
        return self._view(view)

    def ravel(self, order: str = "C") -> ndarray:
        return self._view(self._a.ravel(order))

    def fill(self, value: Any) -> None:
        self._a.fill(value)

    def conj(self) -> ndarray:
        return _ufunc(np.conjugate, self)

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False) -> ndarray:
        return _reduce(np.sum, self, axis, dtype, keepdims, out)

    def prod(self, axis: Any = None, dtype: Any = None, out: Any = None,
             keepdims: bool = False) -> ndarray:
        return _reduce(np.prod, self, axis, dtype, keepdims, out)

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
        return _reduce(np.any, self, axis, None, keepdims, out)

    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
        return _reduce(np.all, self, axis, None, keepdims, out)

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
        return _reduce(np.max, self, axis, None, keepdims, out)

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
        return _reduce(np.min, self, axis, None, keepdims, out)

    # --- arithmetic ----------------------------------------------------------------
    def __neg__(self) -> ndarray:
        return _ufunc(np.negative, self)

    def __abs__(self) -> ndarray:
        return _ufunc(np.absolute, self)


def _index(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(_host_operand(k) if isinstance(k, ndarray) else k for k in key)
    return _host_operand(key) if isinstance(key, ndarray) else key


def _ufunc(function: Callable[..., Any], *args: Any, out: ndarray | None = None) -> ndarray:
    """A CuPy elementwise kernel: arrays of the current device and scalars in, one out."""
    arrays = [x for x in args if isinstance(x, ndarray)] + ([out] if out is not None else [])
    _same_device(arrays)
    values = function(*[_host_operand(x) for x in args])
    if out is not None:
        out._a[...] = values
        return out
    return ndarray._new_from(values)


def _reduce(function: Callable[..., Any], x: ndarray, axis: Any, dtype: Any,
            keepdims: bool, out: ndarray | None = None) -> ndarray:
    """A CuPy reduction kernel; ``out``, as CuPy's, must have the result's shape exactly
    (any strides) and takes it cast."""
    _same_device([x] if out is None else [x, out])
    kwargs = {} if dtype is None else {"dtype": dtype}
    values = np.asarray(function(x._a, axis=axis, keepdims=keepdims, **kwargs))
    if out is None:
        return ndarray._new_from(values)
    if out.shape != values.shape:
        raise ValueError(f"Output shape {out.shape} does not match the reduction's "
                         f"{values.shape}")
    out._a[...] = values
    return out


def _binary(function: Callable[..., Any], reflected: bool = False) -> Callable[..., Any]:
    def method(self: ndarray, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            return NotImplemented if not reflected else _ufunc(function, other, self)
        return _ufunc(function, other, self) if reflected else _ufunc(function, self, other)

    return method


def _inplace(function: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: ndarray, other: Any) -> ndarray:
        return _ufunc(function, self, other, out=self)

    return method


for _name, _function in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                         ("truediv", np.true_divide), ("pow", np.power)]:
    setattr(ndarray, f"__{_name}__", _binary(_function))
    setattr(ndarray, f"__r{_name}__", _binary(_function, reflected=True))
    setattr(ndarray, f"__i{_name}__", _inplace(_function))
for _name, _function in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                         ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
    setattr(ndarray, f"__{_name}__", _binary(_function))
ndarray.__hash__ = None  # type: ignore[assignment]
ndarray.__module__ = "cupy"
