"""Competing variants timed on their first calls between CUDA events, then the fastest.

Each variant runs in turn: ``WARM_UPS`` untimed calls (module loading, first touch),
then ``ROUNDS`` calls each between two events recorded on the stream it runs on. A
timing is read only once its end event has completed, so nothing waits on the device;
once every variant has ``ROUNDS`` timings, the fastest median runs every later call.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Sequence
from typing import Any

import cupy

WARM_UPS = 1
ROUNDS = 3
# Below this many flops a contraction takes a few microseconds, about what a launch
# costs: its routes or layouts cannot differ by more than the timing's noise.
MIN_FLOPS = 10**8


class EventTimings:
    """The timing state of competing variants (by index; ``names`` for messages)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._started = [0] * len(self.names)  # calls begun per variant while timing
        self._times: list[list[float]] = [[] for _ in self.names]  # milliseconds
        self._pending: list[tuple[int, Any, Any]] = []  # (variant, start event, end event)
        self._chosen: int | None = None
        self._lock = threading.Lock()

    def next(self) -> int:
        """The variant the next call should run: the chosen one, else the one with the
        fewest timed calls begun, else (all begun, timings in flight) the leader."""
        with self._lock:
            self._collect()
            if self._chosen is not None:
                return self._chosen
            fewest = min(range(len(self._started)), key=lambda i: self._started[i])
            if self._started[fewest] < WARM_UPS + ROUNDS:
                return fewest
            return self._leader()

    def leader(self) -> int:
        """The chosen variant, else the fastest median so far (the first before any)."""
        with self._lock:
            self._collect()
            return self._leader()

    def run(self, index: int, call: Callable[[], None]) -> None:
        """``call()``, variant ``index``'s execution, timed while it is still timed."""
        with self._lock:
            self._collect()
            begun = self._started[index]
            timed = self._chosen is None and begun < WARM_UPS + ROUNDS
            if timed:
                self._started[index] += 1
        if not timed:
            call()
            return
        stream = cupy.cuda.get_current_stream()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        call()
        end.record(stream)
        if begun >= WARM_UPS:
            with self._lock:
                self._pending.append((index, start, end))

    def describe(self, noun: str) -> str:
        """"timing N <noun>" or "NAME kept", then each variant's median so far."""
        with self._lock:
            self._collect()
            timings = ", ".join(
                f"{name} {statistics.median(times):.4g} ms" if times else f"{name} not yet"
                for name, times in zip(self.names, self._times)
            )
            state = (f"timing {len(self.names)} {noun}" if self._chosen is None
                     else f"{self.names[self._chosen]} kept")
        return f"{state} (CUDA events, median of {ROUNDS} after {WARM_UPS} warm-up): {timings}"

    def _collect(self) -> None:
        """Read the timings whose end events completed; choose once all are in."""
        waiting = []
        for index, start, end in self._pending:
            if end.done:
                self._times[index].append(float(cupy.cuda.get_elapsed_time(start, end)))
            else:
                waiting.append((index, start, end))
        self._pending = waiting
        if self._chosen is None and all(len(t) >= ROUNDS for t in self._times):
            self._chosen = self._leader()

    def _leader(self) -> int:
        if self._chosen is not None:
            return self._chosen
        if not any(self._times):
            return 0
        medians = [statistics.median(t) if t else float("inf") for t in self._times]
        return min(range(len(medians)), key=lambda i: (medians[i], i))
