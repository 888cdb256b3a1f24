"""Run a suite: each case through gpu_tc and every peer, timed, checked and ceilinged.

The first call of each implementation is its warm-up and gives the result that is
checked: every peer's result against gpu_tc's (relative error, max-norm). The report
is a plain dict, ready for JSON (see :mod:`gpu_tc.bench.report`).
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import blas_env, ceilings, environment, heap, memory, report, suites, timing, warmup
from .checkpoint import Checkpoint
from .peers import GPU_TC, PEERS, Peer, Runner, runs_case
from .progress import Progress
from .suites import Case
from .timing import no_sync

# A peer's result "mismatches" when its relative error against gpu_tc's exceeds this.
TOLERANCE = {"float32": 1e-3, "complex64": 1e-3, "float64": 1e-9, "complex128": 1e-9}


@dataclass(frozen=True)
class Settings:
    """How a run measures.

    Attributes:
        backend: "cpu" (NumPy operands) or "gpu" (CuPy operands).
        quick: Shrunk extents (see :mod:`gpu_tc.bench.suites`).
        scale: Every extent of the tccg cases times this (rounded, at least 1).
        repeat: Timed runs per implementation; the median is reported.
        warmup: Untimed calls first (the first one's result is checked).
        min_run_time: Seconds each timed run lasts at least (small cases loop).
        settle: Seconds of pause before each implementation's warm-up and each timed
            run, so the thread pools of the library run before (OpenBLAS, OpenMP)
            stop spinning first; one untimed call follows a timed run's pause (see
            :func:`_run_case`).
        memory: Also measure each implementation's peak extra memory, after each
            case's timings, in a fresh process per implementation (see
            :mod:`gpu_tc.bench.memory`; not on the gpu backend, nor off Linux).
        command: The command line that made the run, stored in the report.
    """

    backend: str = "cpu"
    quick: bool = False
    scale: float = 1.0
    repeat: int = 3
    warmup: int = 1
    min_run_time: float = 0.02
    settle: float = 0.15
    memory: bool = False
    command: str = ""


@dataclass(frozen=True)
class SuitePlan:
    """The cases and peers of one suite in one dtype."""

    suite: str
    dtype: str
    cases: list[Case]
    peers: list[Peer]

    def case_steps(self, case: Case, repeat: int, probes: bool = False) -> int:
        """Warm-ups, timed runs (and with ``probes`` memory probes) of one case."""
        return (repeat + 1 + int(probes)) * (1 + sum(runs_case(p, case) for p in self.peers))

    def steps(self, repeat: int, probes: bool = False) -> int:
        """Warm-ups, timed runs (and memory probes) of every case."""
        return sum(self.case_steps(case, repeat, probes) for case in self.cases)


@dataclass(frozen=True)
class Device:
    """Where operands live: the array module, host-to-device, and its synchronise."""

    xp: Any
    put: Callable[[np.ndarray], Any]
    sync: Callable[[], None]


def device(backend: str) -> Device:
    """NumPy for "cpu"; CuPy on the current device and stream for "gpu"."""
    if backend == "cpu":
        return Device(np, lambda x: x, no_sync)
    import cupy

    return Device(cupy, cupy.asarray, lambda: cupy.cuda.get_current_stream().synchronize())


def plan(
    suite: str, dtype: str, peers: list[str], quick: bool, case_ids: Collection[int] | None,
    scale: float = 1.0,
) -> SuitePlan:
    """The cases (all, or those in ``case_ids``; tccg's extents times ``scale``) and peers."""
    every = suites.cases(suite, dtype, quick, scale)
    chosen = [c for c in every if case_ids is None or c.id in case_ids]
    return SuitePlan(suite, dtype, chosen, [PEERS[name] for name in peers])


def probes(settings: Settings) -> bool:
    """Whether a run with ``settings`` probes memory (asked for, and possible here)."""
    return settings.memory and memory.unavailable(settings.backend) is None


def checkpoint_key(suite_plan: SuitePlan, settings: Settings) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: everything but the command line.

    Whether memory is measured joins the key only when it is: the checkpoints made
    before memory was measured, which hold none, still resume a run without it.
    """
    measured = {k: v for k, v in asdict(settings).items()
                if k != "command" and (k != "memory" or settings.memory)}
    names = [GPU_TC.name] + [p.name for p in suite_plan.peers]
    return {"suite": suite_plan.suite, "dtype": suite_plan.dtype, "implementations": names,
            "settings": measured}


def run(
    suite_plan: SuitePlan,
    settings: Settings,
    progress: Progress,
    checkpoint: Checkpoint | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Measure every case of ``suite_plan``; returns the analysed report dict.

    With a ``checkpoint`` the finished cases are saved after each case; with ``resume``
    the cases it already holds are kept instead of measured again.
    """
    dev = device(settings.backend)
    metric = suites.metric(suite_plan.suite)
    # Before the cases: the pools of peer libraries imported later do not count as NumPy's.
    found = blas_env.inspect()
    heap_state = heap.pin()
    # The GEMM ceiling is measured before and after the cases; the higher one is kept,
    # so a passing slowdown of the host cannot lower it.
    before = _gemm(suite_plan.dtype, settings, dev) if suite_plan.suite == "tccg" else None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    done = checkpoint.load() if checkpoint is not None and resume else {}
    cases = []
    for case in suite_plan.cases:
        if case.id in done:
            cases.append(done[case.id])
            progress.skip(suite_plan.case_steps(case, settings.repeat, probes(settings)))
            continue
        record = _run_case(case, suite_plan.peers, dev, settings, progress)
        if probes(settings):
            # After the case's timings and with its operands freed: no probe runs beside them.
            record["memory"] = _probe_case(case, record, settings.backend, progress)
        cases.append(record)
        if checkpoint is not None:
            checkpoint.save(cases)
    ceiling = None
    if before is not None:
        ceiling = max(before, _gemm(suite_plan.dtype, settings, dev), key=lambda c: c.value)
    doc = {
        "schema": 1,
        "suite": suite_plan.suite,
        "dtype": suite_plan.dtype,
        "backend": settings.backend,
        "metric": asdict(metric),
        "command": settings.command,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": asdict(settings),
        "scale": settings.scale,
        "environment": _environment(settings.backend, found, heap_state),
        # Overrides of the BLAS kernel or threads: numbers made under them are not comparable.
        "warnings": list(found.warnings),
        # Other work on the host skews timings: the 1-minute load before and after.
        "load_average": [load, os.getloadavg()[0] if load is not None else None],
        "implementations": [GPU_TC.name] + [p.name for p in suite_plan.peers],
        "titles": {p.name: p.title for p in [GPU_TC, *suite_plan.peers]},
        "ceiling": None if ceiling is None else asdict(ceiling),
        "tolerance": TOLERANCE[suite_plan.dtype],
        "cases": cases,
    }
    if settings.memory:
        doc["memory"] = {"method": memory.METHOD,
                         "unavailable": memory.unavailable(settings.backend)}
    return report.analyse(doc)


def _gemm(dtype: str, settings: Settings, dev: Device) -> ceilings.Ceiling:
    n = ceilings.gemm_extent(settings.backend, settings.quick)
    return ceilings.gemm(dtype, dev.xp, dev.sync, n, settings.repeat)


def _environment(backend: str, found: blas_env.BlasEnvironment, heap_state: str) -> dict[str, Any]:
    info = {**environment.host(found), "heap": heap_state}
    if backend == "gpu":
        status = environment.gpu_status()
        info.update(status.versions)
        info["devices"] = list(status.devices)
    return info


@dataclass
class _Live:
    """An implementation being timed on one case."""

    peer: Peer
    runner: Runner
    number: int
    samples: list[float]


def _run_case(
    case: Case, peers: list[Peer], dev: Device, settings: Settings, progress: Progress
) -> dict[str, Any]:
    """Warm up and check every implementation, then time them in turns.

    Each warm-up follows a pause too: gpu_tc's measured plans time their variants in
    their first calls, and the calls of one variant timed while the previous
    implementation's BLAS workers still spun ran up to 1.7x slow (a slower variant
    then kept for the whole case: TCCG x0.5 cases 2, 4 and 9 in one of three runs).
    The timed runs rotate over the implementations (run r starts at the r-th), with a
    pause before each, so a passing load on the host or another library's spinning
    thread pool is shared by all rather than landing on one. An untimed call follows
    each pause: on a virtual machine the first threaded call after an idle pause runs
    slower ('ab->' of a 4096^2 float64 array on a 2-core VM, medians: a bare 2-thread
    NumPy split 4.6 ms back to back and 8.4 ms after a 0.2 s sleep, torch 4.5 and 6.5),
    a cost that lands on the threaded implementations only.
    """
    operands = [dev.put(x) for x in case.operands()]
    results: dict[str, dict[str, Any]] = {}
    live: list[_Live] = []
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
        results[peer.name] = entry
        if prepared is not None:
            live.append(prepared)
        progress.done()
    del reference
    for turn in range(settings.repeat):
        shift = turn % len(live) if live else 0
        for item in live[shift:] + live[:shift]:
            progress.start(f"{case.suite} {case.dtype} #{case.id} {item.peer.name} run {turn + 1}")
            time.sleep(settings.settle)
            try:
                if settings.settle:
                    timing.run(item.runner.call, 1, item.runner.sync)
                item.samples.append(timing.run(item.runner.call, item.number, item.runner.sync))
            except Exception as err:  # noqa: BLE001 - a failing implementation is reported
                results[item.peer.name]["error"] = _describe(err)
            progress.done()
    metric = suites.metric(case.suite)
    for item in live:
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
    ceiling = None
    if case.suite in ("permute", "trace", "reduce"):
        ceiling = ceilings.copy(case, dev.xp, dev.sync, settings.repeat)
    return {
        "id": case.id,
        "name": case.name,
        "kind": case.kind,
        "expr": case.expr,
        "sizes": case.sizes,
        "work": case.work,
        "ceiling": ceiling,
        "results": results,
    }


def _probe_case(
    case: Case, record: dict[str, Any], backend: str, progress: Progress
) -> dict[str, dict[str, Any]]:
    """Each implementation's memory footprint on ``case`` (as plain data), one probe each."""
    found = {}
    for name, entry in record["results"].items():
        progress.start(f"{case.suite} {case.dtype} #{case.id} {name} memory")
        if entry["error"]:
            footprint = memory.Footprint.missing("not measured: it failed in the timing run")
        else:
            footprint = memory.measure(case, name, backend)
        found[name] = footprint.as_dict()
        progress.done()
    return found


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
