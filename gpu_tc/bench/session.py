"""One ``gpu-tc bench`` invocation: resolve peers, run every suite and dtype, write files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from . import blas_env, environment, report, runner
from .checkpoint import Checkpoint
from .cli_args import BenchRequest
from .peers import PEERS, default_peers, twin_name
from .progress import Progress
from .settings import Settings


def settings_for(suite: str, request: BenchRequest, command: str) -> Settings:
    """Per-suite timing defaults: tiny overhead cases get more and longer runs.

    Memory is measured on the tccg suite only, unless ``--no-memory``.
    """
    overhead = suite == "overhead"
    repeat = request.repeat or (7 if overhead else 5 if request.quick else 3)
    min_run_time = (0.05 if overhead else 0.02) / (4 if request.quick else 1)
    settle = 0.0 if request.backend == "gpu" else 0.02 if request.quick else 0.15
    scale = request.scale if suite == "tccg" else 1.0
    return Settings(backend=request.backend, quick=request.quick, scale=scale,
                    repeat=repeat, warmup=1, min_run_time=min_run_time, settle=settle,
                    memory=request.memory and suite == "tccg", command=command)


def available_peers(names: list[str], notes: list[str]) -> list[str]:
    """``names`` without the peers whose module is missing (a note for each of those)."""
    usable = []
    for name in names:
        why = PEERS[name].missing()
        if why is None:
            usable.append(name)
        elif why not in notes:
            notes.append(why)
    return usable


def plans(request: BenchRequest, notes: list[str]) -> list[runner.SuitePlan]:
    """A plan per suite and dtype that has at least one case."""
    found = []
    if request.scale != 1.0 and any(suite != "tccg" for suite in request.suites):
        notes.append(f"--scale {request.scale:g} applies to the tccg suite only; the others "
                     "run at their usual extents")
    for suite in request.suites:
        names = list(request.peers) if request.peers is not None else default_peers(
            request.backend, suite
        )
        usable = available_peers(names, notes)
        if request.twin is not None:
            usable += _twin(request.twin, suite, usable, notes)
        for dtype in request.dtypes:
            scale = request.scale if suite == "tccg" else 1.0
            plan = runner.plan(suite, dtype, usable, request.quick, request.case_ids, scale)
            if plan.cases:
                found.append(plan)
            elif f"{suite}: no case has the ids asked for; skipped" not in notes:
                notes.append(f"{suite}: no case has the ids asked for; skipped")
    return found


def _twin(name: str, suite: str, usable: list[str], notes: list[str]) -> list[str]:
    """``[<name>-twin]`` where peer ``name`` runs in ``suite``; else a note and []."""
    if name in usable:
        return [twin_name(name)]
    note = f"--twin {name}: {name} does not run the {suite} suite here; no twin there"
    if note not in notes:
        notes.append(note)
    return []


def failures(doc: dict[str, Any]) -> list[str]:
    """gpu_tc errors and peer mismatches of a report, one line each."""
    summary = doc["summary"]
    lines = [
        f"{doc['suite']} {doc['dtype']} case {e['case']}: gpu_tc failed: {e['error']}"
        for e in summary["errors"] if e["implementation"] == "gpu_tc"
    ]
    lines += [
        f"{doc['suite']} {doc['dtype']} case {m['case']}: {m['peer']} differs from gpu_tc "
        f"(relative error {m['rel_error']:.3g})"
        for m in summary["mismatches"]
    ]
    return lines


def run_session(
    request: BenchRequest, command: str, output: Path | None, stream: TextIO | None = None
) -> int:
    """Run the request; print markdown to ``stream``; 0 when gpu_tc ran and agreed everywhere."""
    stream = stream if stream is not None else sys.stdout
    if request.backend == "gpu":
        status = environment.gpu_status()
        if not status.available:
            print(f"gpu-tc bench: the gpu backend is not usable here: {status.reason}",
                  file=sys.stderr)
            return 1
    notes: list[str] = []
    chosen = plans(request, notes)
    plot = request.plot and environment.installed("matplotlib")
    if request.plot and output is not None and not plot:
        notes.append("matplotlib is not installed: no PNG plots (pip install 'gpu-tc[bench]')")
    for note in notes:
        print(f"gpu-tc bench: {note}", file=sys.stderr)
    # Every report repeats these; said once here, before the hour a full run takes.
    for warning in blas_env.inspect().warnings:
        print(f"gpu-tc bench: warning: {warning}", file=sys.stderr)
    if not chosen:
        print("gpu-tc bench: nothing to run", file=sys.stderr)
        return 2
    every = [(plan, settings_for(plan.suite, request, command)) for plan in chosen]
    progress = Progress(sum(plan.steps(s.repeat, runner.probes(s)) for plan, s in every))
    docs, written = [], []
    try:
        for plan, settings in every:
            checkpoint = None
            if output is not None:
                stem = report.stem(request.backend, plan.suite, plan.dtype, settings.scale)
                key = runner.checkpoint_key(plan, settings)
                checkpoint = Checkpoint(output / f"{stem}.partial.json", key)
            doc = runner.run(plan, settings, progress, checkpoint, request.resume)
            doc["notes"] = notes
            docs.append(doc)
            if output is not None:
                written += report.write(doc, output, plot=plot)
            if checkpoint is not None:
                checkpoint.remove()
    finally:
        progress.close()
    for doc in docs:
        print(report.markdown(doc), file=stream)
    for path in dict.fromkeys(written):
        print(f"wrote {path}", file=stream)
    problems = [line for doc in docs for line in failures(doc)]
    for line in problems:
        print(f"gpu-tc bench: {line}", file=sys.stderr)
    return 1 if problems else 0
