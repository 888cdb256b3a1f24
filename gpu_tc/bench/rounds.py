"""Timing a group of cases: every implementation warmed up and checked on each case,
then timed in rounds that interleave over the group's cases and rotate over the
implementations. The first call of each implementation gives the result that is
checked: every peer's against gpu_tc's (relative error, max-norm).

A case's timed runs are a round apart, and a round runs every case of the group: on a
2-core virtual machine the host has slow spells of a few seconds (work on two threads
at about one thread's speed), and with a case's runs back to back one spell could
cover two of an implementation's three runs and move its median (TCCG case 39 at half
extents in float32 on an EPYC host: gpu_tc 0.283, 0.455, 0.468 ms, torch 0.339, 0.626,
0.337; a different case or two below 0.9x the best peer in each run). Interleaved, a
spell lands on one run of the cases it meets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ceilings, suites, timing, warmup
from .peers import GPU_TC, Peer, Runner, runs_case
from .progress import Progress
from .settings import Device, Settings
from .suites import Case

# A peer's result "mismatches" when its relative error against gpu_tc's exceeds this.
TOLERANCE = {"float32": 1e-3, "complex64": 1e-3, "float64": 1e-9, "complex128": 1e-9}

# A group holds at most GROUP_CASES cases and GROUP_BYTES of operands and outputs, an
# output for each implementation (a case above that runs alone), all live while its
# rounds run. On the CPU with the default peers: TCCG at half extents in groups of 3-12
# (a round of 12 took 10-16 s on the EPYC host, longer than its spells), at full extents
# one case at a time but two pairs (a case's round alone takes 1-60 s there), the trace
# and reduce suites whole in float64 and float32.
GROUP_CASES = 12
GROUP_BYTES = 1 << 30


def limits() -> dict[str, int]:
    """The most cases and bytes a group holds (reports and checkpoints name them)."""
    return {"cases": GROUP_CASES, "bytes": GROUP_BYTES}


def groups(cases: list[Case], implementations: int) -> Iterator[list[Case]]:
    """Consecutive ``cases`` in groups, as GROUP_CASES and GROUP_BYTES allow with an
    output for each of ``implementations``."""
    group: list[Case] = []
    held = 0
    for case in cases:
        size = case.footprint(implementations)
        if group and (len(group) == GROUP_CASES or held + size > GROUP_BYTES):
            yield group
            group, held = [], 0
        group.append(case)
        held += size
    if group:
        yield group


@dataclass
class _Live:
    """An implementation being timed on one case."""

    peer: Peer
    runner: Runner
    number: int
    samples: list[float]


@dataclass
class _Warm:
    """A case whose implementations are warmed up and checked: its entries so far and
    the implementations still to time."""

    case: Case
    results: dict[str, dict[str, Any]]
    live: list[_Live]


def time_group(
    cases: list[Case], peers: list[Peer], dev: Device, settings: Settings, progress: Progress
) -> list[dict[str, Any]]:
    """Each case's record (its entries, timings, routes and copy ceiling), in order.

    Every case is warmed up first (see :func:`_warm_case`), then ``settings.repeat``
    rounds each time every case once; a case's round starts at the next implementation
    (run r at the r-th), with a pause before each run, so a passing load on the host or
    another library's spinning thread pool is shared by all rather than landing on one.
    An untimed call follows each pause: on a virtual machine the first threaded call
    after an idle pause runs slower ('ab->' of a 4096^2 float64 array on a 2-core VM,
    medians: a bare 2-thread NumPy split 4.6 ms back to back and 8.4 ms after a 0.2 s
    sleep, torch 4.5 and 6.5), a cost that lands on the threaded implementations only;
    it also brings back into cache the operands and buffers that the group's other
    cases pushed out. The copy ceilings are measured once every implementation of the
    group is closed.
    """
    warm = [_warm_case(case, peers, dev, settings, progress) for case in cases]
    for turn in range(settings.repeat):
        for item in warm:
            _time_turn(item, turn, settings, progress)
    records = [_record(item) for item in warm]
    for case, record in zip(cases, records):
        if case.suite in ("permute", "trace", "reduce"):
            record["ceiling"] = ceilings.copy(case, dev.xp, dev.sync, settings.repeat)
    return records


def _warm_case(
    case: Case, peers: list[Peer], dev: Device, settings: Settings, progress: Progress
) -> _Warm:
    """Warm up and check every implementation on ``case``, each after a pause.

    The pause matters most before gpu_tc: its measured plans time their variants in
    their first calls, and the calls of one variant timed while the previous
    implementation's BLAS workers still spun ran up to 1.7x slow (a slower variant
    then kept for the whole case: TCCG x0.5 cases 2, 4 and 9 in one of three runs).
    """
    operands = [dev.put(x) for x in case.operands()]
    warm = _Warm(case, {}, [])
    reference = None
    for peer in [GPU_TC, *[p for p in peers if runs_case(p, case)]]:
        progress.start(f"{case.suite} {case.dtype} #{case.id} {peer.name} warm-up")
        time.sleep(settings.settle)
        entry, value, prepared = _prepare(peer, case, operands, settings)
        if peer is GPU_TC:
            reference = value
        elif value is not None and reference is not None:
            error = relative_error(value, reference)
            entry["rel_error"] = error
            entry["mismatch"] = not error <= TOLERANCE[case.dtype]
        warm.results[peer.name] = entry
        if prepared is not None:
            warm.live.append(prepared)
        progress.done()
    return warm


def _time_turn(warm: _Warm, turn: int, settings: Settings, progress: Progress) -> None:
    """Timed run ``turn`` of every live implementation of one case, starting at the
    ``turn``-th; a failing call is recorded as that implementation's error."""
    case, live = warm.case, warm.live
    shift = turn % len(live) if live else 0
    for item in live[shift:] + live[:shift]:
        progress.start(f"{case.suite} {case.dtype} #{case.id} {item.peer.name} run {turn + 1}")
        time.sleep(settings.settle)
        try:
            timing.run(item.runner.call, 1, item.runner.sync)
            item.samples.append(timing.run(item.runner.call, item.number, item.runner.sync))
        except Exception as err:  # noqa: BLE001 - a failing implementation is reported
            warm.results[item.peer.name]["error"] = _describe(err)
        progress.done()


def _record(warm: _Warm) -> dict[str, Any]:
    """The case's record once its rounds are done (its copy ceiling still to come);
    closes its implementations."""
    case, results = warm.case, warm.results
    metric = suites.metric(case.suite)
    for item in warm.live:
        entry = results[item.peer.name]
        entry["route"] = item.runner.route() or entry["route"]
        entry["reason"] = item.runner.reason()
        item.runner.close()
        if entry["error"] is None and item.samples:
            measured = timing.Timing.of(item.samples, item.number)
            entry.update(seconds=measured.median, best=measured.best,
                         calls_per_run=measured.calls_per_run,
                         value=metric.value(measured.median, case.work),
                         samples=list(item.samples))
    warm.live.clear()
    return {
        "id": case.id,
        "name": case.name,
        "kind": case.kind,
        "expr": case.expr,
        "sizes": case.sizes,
        "work": case.work,
        "ceiling": None,
        "results": results,
    }


def _prepare(
    peer: Peer, case: Case, operands: list[Any], settings: Settings
) -> tuple[dict[str, Any], np.ndarray | None, _Live | None]:
    """Build, warm up (the first call's result comes back to the host) and calibrate."""
    entry: dict[str, Any] = {"rel_error": None, "mismatch": False, "error": None, "route": None,
                             "reason": None}
    runner = None
    try:
        runner = peer.build(case, operands)
        entry["route"] = runner.route()
        start = time.perf_counter()
        first = runner.call()
        runner.sync()
        elapsed = time.perf_counter() - start
        value = np.asarray(runner.host(first))
        del first
        for _ in range(settings.warmup - 1):
            elapsed = timing.run(runner.call, 1, runner.sync)
        fastest = warmup.untimed_calls(runner, elapsed)
        number = timing.calibrate(runner.call, fastest, settings.min_run_time, runner.sync)
    except Exception as err:  # noqa: BLE001 - a failing implementation is reported, not fatal
        entry["error"] = _describe(err)
        if runner is not None:
            runner.close()
        return entry, None, None
    return entry, value, _Live(peer, runner, number, [])


def relative_error(value: np.ndarray, reference: np.ndarray) -> float:
    """max |value - reference| / max |reference| (inf when the shapes differ).

    Example:
        >>> relative_error(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
        0.2
    """
    if value.shape != reference.shape:
        return float("inf")
    if reference.size == 0:
        return 0.0
    diff = float(np.max(np.abs(value - reference)))
    scale = float(np.max(np.abs(reference)))
    return diff / scale if scale > 0 else diff


def _describe(err: Exception) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= 300 else text[:297] + "..."
