"""Run a suite: its cases through gpu_tc and every peer in groups (warmed up, checked
and timed by :mod:`gpu_tc.bench.rounds`), with the GEMM ceiling, the environment and
checkpoints. The report is a plain dict, ready for JSON (see :mod:`gpu_tc.bench.report`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from . import blas_env, ceilings, environment, heap, memory, report, rounds, suites
from .checkpoint import Checkpoint
from .peers import GPU_TC, Peer, lookup, runs_case
from .progress import Progress
from .settings import Device, Settings, device
from .suites import Case


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


def plan(
    suite: str, dtype: str, peers: list[str], quick: bool, case_ids: Collection[int] | None,
    scale: float = 1.0,
) -> SuitePlan:
    """The cases (all, or those in ``case_ids``; tccg's extents times ``scale``) and peers
    (twins, ``<peer>-twin``, included)."""
    every = suites.cases(suite, dtype, quick, scale)
    chosen = [c for c in every if case_ids is None or c.id in case_ids]
    return SuitePlan(suite, dtype, chosen, [lookup(name) for name in peers])


def probes(settings: Settings) -> bool:
    """Whether a run with ``settings`` probes memory (asked for, and possible here)."""
    return settings.memory and memory.unavailable(settings.backend) is None


def checkpoint_key(suite_plan: SuitePlan, settings: Settings) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: everything but the command line (the
    group limits of the rounds included).

    Whether memory is measured joins the key only when it is: the checkpoints made
    before memory was measured, which hold none, still resume a run without it.
    """
    measured = {k: v for k, v in asdict(settings).items()
                if k != "command" and (k != "memory" or settings.memory)}
    names = [GPU_TC.name] + [p.name for p in suite_plan.peers]
    return {"suite": suite_plan.suite, "dtype": suite_plan.dtype, "implementations": names,
            "settings": measured, "groups": rounds.limits()}


def run(
    suite_plan: SuitePlan,
    settings: Settings,
    progress: Progress,
    checkpoint: Checkpoint | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Measure every case of ``suite_plan``; returns the analysed report dict.

    The cases are timed in groups (:func:`gpu_tc.bench.rounds.groups`), their timed runs
    interleaved. With a ``checkpoint`` the finished cases are saved after each group;
    with ``resume`` the cases it already holds are kept instead of measured again.
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
    finished: dict[int, dict[str, Any]] = {}
    to_time = []
    for case in suite_plan.cases:
        if case.id in done:
            finished[case.id] = done[case.id]
            progress.skip(suite_plan.case_steps(case, settings.repeat, probes(settings)))
        else:
            to_time.append(case)
    for group in rounds.groups(to_time, 1 + len(suite_plan.peers)):
        records = rounds.time_group(group, suite_plan.peers, dev, settings, progress)
        for case, record in zip(group, records):
            if probes(settings):
                # After the group's timings, its operands freed: no probe runs beside them.
                record["memory"] = _probe_case(case, record, settings.backend, progress)
            finished[case.id] = record
        if checkpoint is not None:
            checkpoint.save([finished[c.id] for c in suite_plan.cases if c.id in finished])
    cases = [finished[case.id] for case in suite_plan.cases]
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
        "twins": {p.name: p.twin_of for p in suite_plan.peers if p.twin_of},
        "ceiling": None if ceiling is None else asdict(ceiling),
        "tolerance": rounds.TOLERANCE[suite_plan.dtype],
        "groups": rounds.limits(),
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
