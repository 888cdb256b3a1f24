"""How arrays reach the GPU libraries: device checks, host scalars, staged operands,
new results.

The primitive plans get arrays laid out exactly as their problem's specs say; an
:class:`Operand` turns one into the pointer its descriptor spec expects, through a
C-ordered copy when the spec is staged.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import cupy
import numpy as np

from gpu_tc.backend import UNSCALED
from gpu_tc.errors import OperandError
from gpu_tc.problem import TensorSpec
from gpu_tc.run import dense_allocation

from .descriptors import DescriptorSpec


def new_result_call(plan: Any, d: TensorSpec) -> Callable[..., Any] | None:
    """``f(*inputs)``: ``plan`` run unscaled into a new array laid out as ``d``, for the
    warm path of a call into a new result (gpu_tc.compose's ``fast``: one call where
    run() would lay out the result, then the composed plan dispatch to ``plan``); None
    where ``d`` has gaps. The plan is held weakly: whoever calls ``f`` holds it."""
    dense = dense_allocation(d)
    if dense is None:
        return None
    extents, axes = dense
    dtype = np.dtype(d.dtype)
    held: Callable[[], Any] = weakref.ref(plan)

    def fresh(*inputs: Any) -> Any:
        result = cupy.empty(extents, dtype)
        if axes is not None:
            result = result.transpose(axes)
        held().execute(inputs, result, UNSCALED, None)
        return result

    return fresh


def check_device(device: int, arrays: Iterable[Any], context: str) -> None:
    """Every array, and the current CuPy device, must be the plan's device.

    Raises:
        OperandError: the current device or an array's device differs.
    """
    current = cupy.cuda.runtime.getDevice()
    if current != device:
        raise OperandError(
            f"the {context} was planned on GPU {device} but the current CuPy device is GPU "
            f"{current}: run it under `with cupy.cuda.Device({device}):`"
        )
    for x in arrays:
        if x is not None and x.data.device_id != device:
            raise OperandError(
                f"an array of the {context} is on GPU {x.data.device_id} but its operands "
                f"are on GPU {device}: move every array to one device"
            )


def plain_scalar(value: complex, dtype: str) -> complex | float | int:
    """``value`` as a Python number of ``dtype``'s kind (the imaginary part of a real
    dtype's scalar is zero, and an integer dtype's scalar whole, checked by the core)."""
    if np.dtype(dtype).kind in "biu":
        return int(value.real) if isinstance(value, complex) else int(value)
    number = complex(value)
    return number.real if dtype in "fd" else number


class HostScalars:
    """Host copies of scalars in one dtype, read by pointer by cuTENSOR and cuBLAS.

    The copies of the first few values a plan sees are kept, so a warm call makes none.
    """

    KEPT = 16

    def __init__(self, dtype: str) -> None:
        self._dtype = dtype
        self._kept: dict[complex, tuple[np.ndarray, int]] = {}

    def __call__(self, value: complex) -> tuple[np.ndarray, int]:
        """(the host array, its address); hold the array until the call returns."""
        held = self._kept.get(value)
        if held is None:
            buffer = np.array(plain_scalar(value, self._dtype), dtype=self._dtype)
            held = (buffer, buffer.ctypes.data)
            if len(self._kept) < self.KEPT:
                self._kept[value] = held
        return held


class Operand:
    """One tensor of an operation: read in place at an offset, or through a staged copy.

    Args:
        spec: Its oriented descriptor spec.
        ndim: The rank of the arrays the plan receives for it.
        itemsize: Bytes per element.
    """

    __slots__ = ("spec", "index", "itemsize")

    def __init__(self, spec: DescriptorSpec, ndim: int, itemsize: int) -> None:
        self.spec = spec
        self.index = tuple(
            slice(None, None, -1) if axis in spec.flip else slice(None) for axis in range(ndim)
        )
        self.itemsize = itemsize

    def pointer(self, x: Any) -> int:
        """The descriptor's base address in ``x`` (``x`` is never a staged copy)."""
        return int(x.data.ptr) + self.spec.offset * self.itemsize

    def read(self, x: Any, keep: list[Any]) -> int:
        """The address to read this input from; a staged copy is appended to ``keep``."""
        if not self.spec.staged:
            return self.pointer(x)
        copy = cupy.ascontiguousarray(x[self.index])
        keep.append(copy)
        return int(copy.data.ptr)

    def target(self, d: Any) -> Any:
        """The array the library writes: ``d``, or a C-ordered buffer when staged."""
        return cupy.empty(d.shape, d.dtype) if self.spec.staged else d

    def write_pointer(self, target: Any) -> int:
        """The address the library writes to in ``target``."""
        return int(target.data.ptr) if self.spec.staged else self.pointer(target)

    def addend(self, c: Any, d: Any, target: Any) -> int:
        """The address of C laid out like this output (copied into the output if not)."""
        if self.spec.staged:
            cupy.copyto(target, c[self.index])
            return int(target.data.ptr)
        if c is d or c.strides == d.strides:
            return self.pointer(c)
        cupy.copyto(d, c)
        return self.pointer(d)

    def write_back(self, target: Any, d: Any) -> None:
        """Copy a staged result into ``d``."""
        if self.spec.staged:
            cupy.copyto(d[self.index], target)


class Variants:
    """Planned operations per tuple of pointer alignments, built on first use.

    Args:
        build: Makes the planned operation(s) for one tuple of alignments.
    """

    def __init__(self, build: Callable[[tuple[int, ...]], Any]) -> None:
        self._build = build
        self._built: dict[tuple[int, ...], Any] = {}
        self._lock = threading.Lock()

    def __call__(self, alignments: tuple[int, ...]) -> Any:
        variant = self._built.get(alignments)
        if variant is None:
            with self._lock:
                variant = self._built.get(alignments)
                if variant is None:
                    variant = self._built[alignments] = self._build(alignments)
        return variant

    def all(self) -> list[Any]:
        """Every variant built so far."""
        return list(self._built.values())
