"""Emulated CUDA runtime: two devices, streams, the current device, a memory pool.

Mirrors the CuPy surface gpu_tc and its tests use (``cupy.cuda.Device``, ``Stream``,
``get_current_stream``, ``runtime.*``, ``alloc``, the default memory pool and its
limit). Work runs at once, in call order: streams are bookkeeping, not queues.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

DEVICE_COUNT = 2
DEVICE_NAME = b"gpu_tc test double (emulated, not a GPU)"
DEVICE_MEMORY = 16 * 2**30
CUDA_VERSION = 13000  # what runtimeGetVersion / driverGetVersion report


class CUDARuntimeError(RuntimeError):
    """A CUDA runtime error, named as CuPy names them."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class OutOfMemoryError(MemoryError):
    """CuPy's pool error: an allocation would pass the device's memory or the pool limit."""

    def __init__(self, size: int, total: int, limit: int = 0) -> None:
        self.size, self.total, self.limit = size, total, limit
        super().__init__(
            f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, "
            f"limit set to: {limit:,} bytes)."
        )


_local = threading.local()


def _check_device(device: int) -> int:
    if not isinstance(device, int) or not 0 <= device < DEVICE_COUNT:
        raise CUDARuntimeError(101, "cudaErrorInvalidDevice: invalid device ordinal")
    return device


def current_device() -> int:
    """The calling thread's current device."""
    return getattr(_local, "device", 0)


def set_current_device(device: int) -> None:
    _local.device = _check_device(device)


class Device:
    """``cupy.cuda.Device``: a device id, and a context that makes it current."""

    def __init__(self, device: Any = None) -> None:
        self.id = current_device() if device is None else _check_device(int(device))
        self._previous: list[int] = []

    def __enter__(self) -> Device:
        self._previous.append(current_device())
        set_current_device(self.id)
        return self

    def __exit__(self, *exc: Any) -> None:
        set_current_device(self._previous.pop())

    def use(self) -> None:
        set_current_device(self.id)

    def synchronize(self) -> None:
        """Block until every stream of this device is idle."""
        with self:
            wait_for_device()

    @property
    def compute_capability(self) -> str:
        return "90"

    def __int__(self) -> int:
        return self.id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"


_stream_ids = itertools.count(1)
_live_streams: dict[int, int] = {}  # stream pointer -> device
# Re-entrant: the garbage collector may run a finalizer that takes it (a freed
# allocation, a destroyed object) while this thread holds it.
_streams_lock = threading.RLock()


class Stream:
    """``cupy.cuda.Stream``: made on the current device; ``with stream:`` makes it current.

    As CuPy's, streams compare and hash by handle, and ``Stream.null`` (handle 0, device
    -1: any device's) is the one default stream object.
    """

    null: Stream

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
                 priority: Any = None) -> None:
        self.device_id = -1 if null else current_device()
        self.non_blocking = non_blocking
        if null:
            self.ptr = 0
        else:
            with _streams_lock:
                self.ptr = 0x5_0000_0000 + 0x100 * next(_stream_ids)
                _live_streams[self.ptr] = self.device_id
        self._previous: list[Stream] = []

    def __del__(self) -> None:
        with _streams_lock:
            _live_streams.pop(getattr(self, "ptr", 0), None)

    def __enter__(self) -> Stream:
        self._previous.append(get_current_stream())
        self.use()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._previous.pop().use()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self) -> int:
        return hash(self.ptr)

    def use(self) -> Stream:
        if self.device_id not in (-1, current_device()):
            raise RuntimeError(f"the stream is on device {self.device_id} but the current "
                               f"device is {current_device()}")
        streams = getattr(_local, "streams", None)
        if streams is None:
            streams = _local.streams = {}
        streams[current_device()] = self
        return self

    def synchronize(self) -> None:
        """Block until the work queued on this stream (a hold at most) completes."""
        _wait_until(_busy_end(self))

    @property
    def done(self) -> bool:
        return device_clock() >= _busy_end(self)

    def is_capturing(self) -> bool:
        """No CUDA graph is ever captured here."""
        return False

    def __repr__(self) -> str:
        return f"<Stream {self.ptr:#x} (device {self.device_id})>"


Stream.null = Stream(null=True)


def device_clock() -> float:
    """Seconds on the emulated device's clock (the host's: every call runs at once)."""
    return time.perf_counter()


# The one thing ever queued here: a hold (gpu_tc's hold kernel, which spins on the
# device's clock) keeps its stream busy until a time on the device clock; what is
# recorded behind it completes then. (stream pointer, device) -> device-clock seconds.
_busy_until: dict[tuple[int, int], float] = {}


def _stream_key(stream: Stream | None) -> tuple[int, int]:
    stream = get_current_stream() if stream is None else stream
    return stream.ptr, current_device() if stream.device_id == -1 else stream.device_id


def hold(seconds: float) -> None:
    """Keep the current stream busy for ``seconds`` after what it holds already."""
    key = _stream_key(None)
    with _streams_lock:
        _busy_until[key] = max(device_clock(), _busy_until.get(key, 0.0)) + seconds


def _busy_end(stream: Stream | None) -> float:
    """When the work queued on ``stream`` completes on the device clock."""
    with _streams_lock:
        return _busy_until.get(_stream_key(stream), 0.0)


def _wait_until(moment: float) -> None:
    while device_clock() < moment:
        time.sleep(max(moment - device_clock(), 0.0))


def wait_for_device() -> None:
    """Block until every stream of the current device is idle (a synchronize, or a copy
    to the host, which the legacy default stream orders after all other work)."""
    device = current_device()
    with _streams_lock:
        ends = [end for (_, d), end in _busy_until.items() if d == device]
    _wait_until(max(ends, default=0.0))


class Event:
    """``cupy.cuda.Event``: ``record`` stamps the device clock when the work queued
    before it on the stream completes (at once, unless a hold is queued); it is done
    from then on; ``get_elapsed_time`` reads two stamps."""

    def __init__(self, block: bool = False, disable_timing: bool = False,
                 interprocess: bool = False) -> None:
        self.disable_timing = disable_timing
        self.stamp: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        self.stamp = max(device_clock(), _busy_end(stream))

    @property
    def done(self) -> bool:
        return self.stamp is None or device_clock() >= self.stamp

    def synchronize(self) -> None:
        """Block until the work recorded before this event completes."""
        if self.stamp is not None:
            _wait_until(self.stamp)


def get_elapsed_time(start_event: Event, end_event: Event) -> float:
    """Milliseconds between two recorded events (CUDA's error for one not recorded or
    made without timing)."""
    for event in (start_event, end_event):
        if event.stamp is None or event.disable_timing:
            raise CUDARuntimeError(400, "cudaErrorInvalidResourceHandle: an event not "
                                        "recorded, or made without timing")
    assert start_event.stamp is not None and end_event.stamp is not None
    return (end_event.stamp - start_event.stamp) * 1e3


def get_current_stream(device_id: int = -1) -> Stream:
    """The current stream of a device (the null stream unless one was entered)."""
    device = current_device() if device_id in (None, -1) else device_id
    return getattr(_local, "streams", {}).get(device, Stream.null)


def stream_device(pointer: int) -> int | None:
    """The device of a live stream pointer (None: not a stream); 0 is the null stream."""
    if pointer == 0:
        return current_device()
    with _streams_lock:
        return _live_streams.get(pointer)


class MemoryPool:
    """``cupy.get_default_memory_pool()``: per-device use and limit (``set_limit``)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant, as the module's locks
        self._used = [0] * DEVICE_COUNT
        self._limit = [0] * DEVICE_COUNT  # 0: no limit but the device's memory

    def reserve(self, size: int, device: int) -> None:
        """Count ``size`` bytes as used on ``device``, or raise OutOfMemoryError."""
        with self._lock:
            limit = self._limit[device] or DEVICE_MEMORY
            if self._used[device] + size > limit:
                raise OutOfMemoryError(size, self._used[device], self._limit[device])
            self._used[device] += size

    def release(self, size: int, device: int) -> None:
        with self._lock:
            self._used[device] -= size

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        if fraction is not None:
            size = int(DEVICE_MEMORY * fraction)
        self._limit[current_device()] = int(size or 0)

    def get_limit(self) -> int:
        return self._limit[current_device()]

    def used_bytes(self) -> int:
        return self._used[current_device()]

    def total_bytes(self) -> int:
        return self.used_bytes()

    def free_bytes(self) -> int:
        return 0

    def free_all_blocks(self, stream: Any = None) -> None:
        """Freed memory returns at once: there are no cached blocks."""

    def n_free_blocks(self) -> int:
        return 0


MEMORY_POOL = MemoryPool()


def device_properties(device: int) -> dict[str, Any]:
    """``cupy.cuda.runtime.getDeviceProperties``: the keys gpu_tc reads."""
    _check_device(device)
    return {"name": DEVICE_NAME, "totalGlobalMem": DEVICE_MEMORY, "major": 9, "minor": 0,
            "multiProcessorCount": 1}
