"""``gpu-tc demo``: worked contractions, then a short TCCG table on the best backend.

Part 1 prepares a few einsums, prints each plan's route and the reason for it, and
checks the result against :mod:`gpu_tc.reference`. Part 2 times eight TCCG cases
(one or two per group, extents shrunk on the CPU so it ends within a minute on two
cores) against every installed peer, with the GEMM ceiling measured in the same run.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, TextIO

import numpy as np

from .. import __version__, prepare, reference
from . import environment, report, runner, session, suites
from .peers import PEERS, default_peers
from .progress import Progress
from .settings import Settings

# (what it shows, expression, operand shapes): small enough for the reference kernel.
EXAMPLES = (
    ("matrix product: one GEMM on the operands in place", "ij,jk->ik", ((96, 80), (80, 64))),
    ("TCCG 3 (intensli), row-major", "aebd,ce->dcba", ((12, 12, 12, 12), (8, 12))),
    ("batched product: batch axes become matmul's stack", "bij,bjk->bik",
     ((8, 24, 16), (8, 16, 20))),
    ("trace: a strided diagonal view, reduced; no copy", "ii->", ((300, 300),)),
    ("partial trace", "ijkj->ik", ((10, 12, 14, 12),)),
    ("broadcasting with '...'", "...ij,...jk->...ik", ((3, 1, 8, 6), (4, 6, 5))),
    ("three operands: pairwise order from opt_einsum", "ij,jk,kl->il",
     ((40, 30), (30, 50), (50, 20))),
    ("CCSD-like ladder term", "abij,ijcd->abcd", ((6, 6, 8, 8), (8, 8, 6, 6))),
)
DEMO_CASES = (1, 6, 9, 12, 13, 20, 31, 44)
DEMO_FLOPS = 2.5e8
TOLERANCE = 1e-12


def _show(text: str, stream: TextIO) -> None:
    print(text, file=stream, flush=True)


def worked_examples(xp: Any, stream: TextIO) -> bool:
    """Part 1: print plan, route, reason and check of each example; True if all match."""
    rng = np.random.default_rng(7)
    ok = True
    for number, (what, expr, shapes) in enumerate(EXAMPLES, start=1):
        host = [rng.standard_normal(shape) for shape in shapes]
        operands = [xp.asarray(x) for x in host]
        plan = prepare(expr, *operands)
        got = np.asarray(_to_host(plan.execute(*operands)))
        expected = reference.einsum(expr, *host)
        scale = max(1.0, float(np.max(np.abs(expected))))
        error = float(np.max(np.abs(got - expected))) / scale
        verdict = "OK" if error <= TOLERANCE else "MISMATCH"
        ok &= verdict == "OK"
        sizes = " x ".join(str(s) for s in shapes)
        _show(f"{number}. {what}\n   gpu_tc.einsum({expr!r}, ...)  {sizes} -> {got.shape}", stream)
        _show(f"   route:  {plan.route}\n   reason: {plan.reason}", stream)
        _show(f"   check:  max relative error {error:.1e} against gpu_tc.reference: {verdict}",
              stream)
        plan.free()
    return ok


def _to_host(x: Any) -> Any:
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else x


def benchmark(backend: str, stream: TextIO) -> dict[str, Any]:
    """Part 2: the TCCG subset against the installed peers; returns the report."""
    notes: list[str] = []
    peers = session.available_peers(default_peers(backend, "tccg"), notes)
    for note in notes:
        _show(f"({note})", stream)
    quick = backend == "cpu"
    cases = [c for c in suites.tccg_cases("float64", quick, DEMO_FLOPS)
             if c.id in DEMO_CASES]
    plan = runner.SuitePlan("tccg", "float64", cases, [PEERS[p] for p in peers])
    settings = Settings(backend, quick, repeat=3, min_run_time=0.01,
                        settle=0.0 if backend == "gpu" else 0.03, command="gpu-tc demo")
    progress = Progress(plan.steps(settings.repeat))
    try:
        return runner.run(plan, settings, progress)
    finally:
        progress.close()


def run_demo(backend: str | None = None, stream: TextIO | None = None) -> int:
    """The whole demo; 0 when every check and every peer agreed with gpu_tc."""
    stream = stream if stream is not None else sys.stdout
    gpu = environment.gpu_status()
    if backend == "gpu" and not gpu.available:
        _show(f"gpu-tc demo: the gpu backend is not usable here: {gpu.reason}", stream)
        return 1
    backend = backend or ("gpu" if gpu.available else "cpu")
    host = environment.host()
    where = "; ".join(gpu.devices) if backend == "gpu" else (
        f"{host['cpu']}, {host['cpu_count']} cores, NumPy {host['numpy']}, "
        f"BLAS {host['blas']['text']}"
    )
    _show(f"gpu_tc {__version__} demo on the {backend} backend ({where})", stream)
    if backend == "cpu" and not gpu.available:
        _show(f"(gpu backend not used: {gpu.reason})", stream)
    xp: Any = importlib.import_module("cupy") if backend == "gpu" else np
    _show("\n== Part 1: contractions, each plan's route and a check against the reference ==\n",
          stream)
    ok = worked_examples(xp, stream)
    _show("\n== Part 2: TCCG cases (float64), gpu_tc against the installed peers ==\n", stream)
    if backend == "cpu":
        _show(f"Extents shrunk to about {DEMO_FLOPS / 1e9:g} GFLOP a case; the full suite: "
              "gpu-tc bench tccg --dtype float64,float32 --output benchmarks/results\n", stream)
    doc = benchmark(backend, stream)
    _show(report.markdown(doc), stream)
    problems = session.failures(doc)
    for line in problems:
        _show(f"problem: {line}", stream)
    _show("demo: all checks passed" if ok and not problems else "demo: some checks FAILED", stream)
    return 0 if ok and not problems else 1
