"""Competing variants timed on their first calls between CUDA events, then the fastest.

Each variant runs in turn: its warm-up calls untimed (``WARM_UPS``: module loading,
first touch; more while cuTENSOR autotunes it), then ``ROUNDS`` calls each between two
events recorded on the stream it runs on. A timing is read only once its end event has
completed, so nothing waits on the device; once every variant has ``ROUNDS`` timings,
the fastest median runs every later call.

A round costs what the call costs once calls follow each other: the longer of the
device's time for its work and the host's time to launch it. The first calls find the
device idle, so events recorded straight away would also count the host's launch time
(on an H200 the rounds of TCCG's cases 39-48 took 0.18 ms where the calls then took
0.13, and the variant of more launches lost). A hold kernel therefore keeps the stream
busy for ``HOLD_NS`` while the call is launched behind it: where the launch takes the
host less than that, the events time the device's work alone; the host's time is read
on the host clock, and where it is longer, it is the round's cost. (A caller who
synchronises after every call pays both; the choice is made for calls that follow each
other, as in a loop or a chain of steps.) Where the hold kernel cannot be built (no
NVRTC, a kernel cache that cannot be written), rounds are timed without it and
``reason`` says so.

A variant whose call fails in the library (out of memory, a status cuBLAS or cuTENSOR
returns) is out of the running: the caller runs another. Calls on a stream being
captured into a CUDA graph are not timed.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import cupy
import numpy as np

from gpu_tc.errors import BackendError

from .raw_kernels import built

WARM_UPS = 1
ROUNDS = 3
# Below this many flops a contraction takes a few microseconds, about what a launch
# costs: its routes or layouts cannot differ by more than the timing's noise.
MIN_FLOPS = 10**8
# What a variant may fail with and leave the others to run: the library's refusal, out
# of memory (CuPy's OutOfMemoryError, gpu_tc's WorkspaceError are MemoryErrors), or a
# CuPy kernel NVRTC would not compile.
_COMPILE = getattr(getattr(cupy.cuda, "compiler", None), "CompileException", BackendError)
VARIANT_FAILURES: tuple[type[BaseException], ...] = (BackendError, MemoryError, _COMPILE)
# Longer than the host takes to launch any variant (gpu_tc's calls: 20-60 us on an H200).
HOLD_NS = 200_000
_HOLD_SOURCE = r"""
extern "C" __global__ void gpu_tc_hold(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""


class _Hold:
    """The hold kernel (one thread spinning on the global timer), built for each device
    on first use; where it cannot be built, off (``why`` says why) and rounds are timed
    without it. A launch error (a sticky error of earlier work) is raised."""

    def __init__(self) -> None:
        self.why = ""

    @property
    def off(self) -> bool:
        """Whether the kernel could not be built."""
        return bool(self.why)

    def __call__(self) -> None:
        """Keep the current stream busy for ``HOLD_NS`` once the work queued on it
        before is done."""
        if self.why:
            return
        try:
            kernel = built(_HOLD_SOURCE, "gpu_tc_hold")
        except BackendError as err:  # no hold: the reason names what stopped the build
            cause = err.__cause__
            self.why = f"{type(cause).__name__}: {cause}"
            return
        kernel((1,), (1,), _HOLD_ARGS)


_HOLD_ARGS = (np.uint64(HOLD_NS),)
HOLD = _Hold()


class EventTimings:
    """The timing state of competing variants (by index; ``names`` for messages).

    Args:
        names: One per variant.
        warm_ups: Untimed calls of each variant first (default ``WARM_UPS`` each).
    """

    def __init__(self, names: Sequence[str], warm_ups: Sequence[int] | None = None,
                 failed: Iterable[int] = ()) -> None:
        self.names = tuple(names)
        self._quota = [w + ROUNDS for w in (warm_ups or [WARM_UPS] * len(self.names))]
        self._started = [0] * len(self.names)  # calls begun per variant while timing
        self._times: list[list[float]] = [[] for _ in self.names]  # milliseconds
        # (variant, start event, end event, host milliseconds)
        self._pending: list[tuple[int, Any, Any, float]] = []
        self._failed: set[int] = set(failed)
        self._chosen: int | None = None
        self._lock = threading.Lock()

    def next(self) -> int:
        """The variant the next call should run: the chosen one, else the one with the
        fewest calls begun of those still to time, else (timings in flight) the leader."""
        with self._lock:
            self._collect()
            if self._chosen is not None:
                return self._chosen
            open_ = [i for i, begun in enumerate(self._started)
                     if i not in self._failed and begun < self._quota[i]]
            if open_:
                return min(open_, key=lambda i: self._started[i])
            return self._leader()

    def leader(self) -> int:
        """The chosen variant, else the fastest median so far (the first working one
        before any)."""
        with self._lock:
            self._collect()
            return self._leader()

    def execute(self, allowed: Sequence[int], call: Callable[[int], None]) -> None:
        """``call(i)`` for the variant of ``allowed`` (those that can run this call) to
        run: the chosen one once settled (no lock, no events), else the next to time,
        timed; where it fails in its library (VARIANT_FAILURES), it is out of the running
        and the next of ``allowed`` runs.

        Raises:
            The last failure, when every variant of ``allowed`` failed; the caller's
            own errors at once (they take no timing round).
        """
        chosen = self._chosen
        if chosen is not None and chosen in allowed:
            try:
                call(chosen)
                return
            except VARIANT_FAILURES:
                self._fail(chosen)
                left = [i for i in allowed if i != chosen]
                if not left:
                    raise
        else:
            left = list(allowed)
        while True:
            index = self._pick(left)
            try:
                self._run(index, call)
                return
            except VARIANT_FAILURES:
                self._fail(index)
                left.remove(index)
                if not left:
                    raise

    def _pick(self, allowed: list[int]) -> int:
        """The variant to run of ``allowed``: the next one if allowed, else the first
        that has not failed, else the first."""
        wanted = self.next()
        if wanted in allowed:
            return wanted
        with self._lock:
            return next((i for i in allowed if i not in self._failed), allowed[0])

    def _run(self, index: int, call: Callable[[int], None]) -> None:
        """``call(index)``, timed while variant ``index`` is still timed."""
        stream = cupy.cuda.get_current_stream()
        with self._lock:
            self._collect()
            begun = self._started[index]
            timed = (self._chosen is None and index not in self._failed
                     and begun < self._quota[index] and not _capturing(stream))
            if timed:
                self._started[index] += 1
        if not timed:
            call(index)
            return
        measured = begun >= self._quota[index] - ROUNDS  # else a warm-up
        try:
            if not measured:
                call(index)
                return
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            HOLD()
            start.record(stream)
            began = time.perf_counter()
            call(index)
            host = (time.perf_counter() - began) * 1e3
            end.record(stream)
        except BaseException as err:
            if not isinstance(err, VARIANT_FAILURES):  # the caller's: no round used up
                with self._lock:
                    self._started[index] -= 1
            raise
        with self._lock:
            self._pending.append((index, start, end, host))

    def _fail(self, index: int) -> None:
        """Variant ``index`` failed in its library: out of the running."""
        with self._lock:
            self._failed.add(index)
            if self._chosen == index:
                self._chosen = None
            self._collect()

    def retuned(self, tuned: Sequence[bool], iterations: int) -> EventTimings:
        """Timings to start again once the variants that autotune (``tuned``) have spent
        ``iterations`` untimed calls on kernel candidates; failed variants stay out."""
        with self._lock:
            failed = frozenset(self._failed)
        return EventTimings(self.names, [WARM_UPS + (iterations if t else 0) for t in tuned],
                            failed)

    def describe(self, noun: str) -> str:
        """"timing N <noun>" or "NAME kept", then each variant's median so far."""
        with self._lock:
            self._collect()
            timings = ", ".join(
                f"{name} failed" if i in self._failed
                else f"{name} {statistics.median(times):.4g} ms" if times
                else f"{name} not yet"
                for i, (name, times) in enumerate(zip(self.names, self._times))
            )
            state = (f"timing {len(self.names)} {noun}" if self._chosen is None
                     else f"{self.names[self._chosen]} kept")
        how = ("CUDA events behind a hold kernel" if not HOLD.off
               else f"CUDA events, no hold kernel ({HOLD.why})")
        return (f"{state} ({how}, or the host's time where longer; median of {ROUNDS} "
                f"after warm-up): {timings}")

    def _collect(self) -> None:
        """Read the timings whose end events completed; choose once all are in."""
        waiting = []
        for index, start, end, host in self._pending:
            if end.done:
                device = float(cupy.cuda.get_elapsed_time(start, end))
                self._times[index].append(max(device, host))
            else:
                waiting.append((index, start, end, host))
        self._pending = waiting
        working = [i for i in range(len(self.names)) if i not in self._failed]
        if self._chosen is None and working and all(
                len(self._times[i]) >= ROUNDS for i in working):
            self._chosen = self._leader()

    def _leader(self) -> int:
        if self._chosen is not None:
            return self._chosen
        working = [i for i in range(len(self.names)) if i not in self._failed] or [0]
        medians = {i: statistics.median(self._times[i]) for i in working if self._times[i]}
        if not medians:
            return working[0]
        return min(medians, key=lambda i: (medians[i], i))


def _capturing(stream: Any) -> bool:
    """Whether work on ``stream`` is being captured into a CUDA graph (events recorded
    there time nothing); a stream that cannot say counts as captured."""
    try:
        return bool(stream.is_capturing())
    except Exception:  # noqa: BLE001 - e.g. the legacy stream during a global capture
        return True
