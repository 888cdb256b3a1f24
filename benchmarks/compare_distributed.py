"""gpu_tc on dask: sliced network contraction and dask-array einsum, side by side.

Two parts, each printing one JSON line per measurement (and ``--output`` the document):

* ``--sliced``: a 5 x 5 lattice tensor network (cotengra's ``lattice_equation``, bond
  dimension ``--bond``) whose largest intermediate, on cotengra's best unsliced path, is
  ``--ratio`` (8) times ``memory_limit``, contracted by
  ``gpu_tc.distributed.contract`` in this process (``client=None``) and on a
  ``LocalCluster`` of 1 and 2 worker processes (one thread each; dask sets their BLAS to
  one thread), against one in-memory ``gpu_tc.einsum`` of the whole network and one
  in-memory call of one slice's held plan; per-slice overhead = time on N workers x N /
  slices - one slice on one BLAS thread.
* ``--arrays``: ``gpu_tc.einsum`` on dask arrays (chunk sums "tree" and "accumulate")
  against ``dask.array.einsum`` on the same chunks, chunked along the contracted label:
  time on the 2-worker cluster, and peak resident memory of a fresh process computing
  with dask's threaded scheduler (VmHWM above the process once the inputs exist).

Usage:
    python benchmarks/compare_distributed.py --sliced --arrays --output F.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MIB = 1 << 20


def _timed(function, repeat: int) -> list[float]:
    function()  # warm: plans built, operands sent
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def _row(name: str, times: list[float], **extra) -> dict:
    row = {"name": name, "median_s": statistics.median(times), "min_s": min(times),
           "max_s": max(times), **extra}
    print(json.dumps(row), flush=True)
    return row


def sliced_rows(repeat: int, ratio: int, bond: int) -> list[dict]:
    import cotengra
    from cotengra.utils import lattice_equation
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_limits

    import gpu_tc
    from gpu_tc import distributed
    from gpu_tc.distributed import slicing

    network = lattice_equation((5, 5), d_min=bond, d_max=bond, seed=1)
    eq = ",".join("".join(t) for t in network.inputs) + "->" + "".join(network.output)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) / bond for s in network.shapes]
    best = cotengra.HyperOptimizer(methods=["greedy"], max_repeats=16, parallel=False,
                                   progbar=False).search(
        [tuple(t) for t in network.inputs], tuple(network.output), network.size_dict)
    whole_path = ["einsum_path", *best.get_path()]
    largest = int(best.max_size()) * 8
    limit = largest // ratio
    plan = distributed.plan(eq, *arrays, memory_limit=limit)
    expected = gpu_tc.einsum(eq, *arrays, optimize=whole_path)
    info = {"expression": eq, "largest_unsliced_bytes": largest,
            "unsliced_flops": 2 * int(best.total_flops()), "memory_limit": limit,
            "sliced": plan.sliced, "slices": plan.slices,
            "largest_sliced_bytes": plan.largest_bytes, "flops": plan.flops}
    print(json.dumps(info), flush=True)
    rows = [info]
    rows.append(_row("in-memory gpu_tc.einsum (whole, unsliced path)", _timed(
        lambda: gpu_tc.einsum(eq, *arrays, optimize=whole_path), repeat)))
    views = [x[tuple(0 if label in plan.sliced else slice(None) for label in term)]
             for x, term in zip(arrays, plan.job.terms)]
    one = slicing.held_plan(plan.job, views)
    rows.append(_row("one slice, held plan, in memory", _timed(lambda: one.execute(*views),
                                                                 repeat)))
    with threadpool_limits(1):  # as in a worker: dask sets its BLAS to one thread
        single = _row("one slice, held plan, in memory, 1 BLAS thread",
                      _timed(lambda: one.execute(*views), repeat))
    rows.append(single)
    local = _row("distributed.contract, client=None", _timed(
        lambda: plan.execute(*arrays), repeat))
    rows.append(local)
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None, silence_logs=50) as cluster, \
                Client(cluster) as client:
            result = plan.execute(*arrays, client=client)
            error = float(np.abs(result - expected).max() / np.abs(expected).max())
            times = _timed(lambda client=client: plan.execute(*arrays, client=client), repeat)
            overhead = (statistics.median(times) * workers / plan.slices
                        - single["median_s"])
            rows.append(_row(f"distributed.contract, LocalCluster {workers} worker(s)", times,
                             relative_error=error, overhead_per_slice_s=overhead))
    return rows


ARRAY_CASES = [  # (subscripts, shapes, chunks): chunked along the contracted labels
    ("ij,jk->ik", [(3000, 3000), (3000, 3000)], [(1500, 375), (375, 1500)]),
    ("abc,cbd->ad", [(64, 96, 96), (96, 96, 64)], [(32, 24, 24), (24, 24, 32)]),
]


def _memory_of(mode: str, case: int) -> int:
    """Peak resident bytes above the inputs of one computation, in a fresh process."""
    code = f"""
import sys, numpy as np, dask, dask.array as da, gpu_tc
sys.path.insert(0, {str(Path(__file__).parent)!r})
from compare_distributed import ARRAY_CASES, _lazy
from gpu_tc.bench.memory_probe import status, reset_peak, release_free_heap
eq, shapes, chunks = ARRAY_CASES[{case}]
rng = np.random.default_rng(0)
ops = [da.from_array(rng.standard_normal(s), chunks=c) for s, c in zip(shapes, chunks)]
ops = [x.persist(scheduler="sync") for x in ops]
release_free_heap(); reset_peak(); base = status()["VmRSS"]
r = _lazy({mode!r}, eq, ops).compute(scheduler="threads", num_workers=2)
print(status()["VmHWM"] - base - r.nbytes)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.strip().splitlines()[-1])


def _lazy(mode: str, eq: str, ops: list):
    import dask.array as da

    import gpu_tc
    from gpu_tc import Options

    if mode == "dask.array.einsum":
        return da.einsum(eq, *ops)
    if mode == "dask.array.einsum(optimize=True)":  # its blocks through BLAS
        return da.einsum(eq, *ops, optimize=True)
    return gpu_tc.einsum(eq, *ops, options=Options(chunk_sums=mode))


def array_rows(repeat: int) -> list[dict]:
    import dask.array as da
    from distributed import Client, LocalCluster

    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=50) as cluster, Client(cluster):
        for index, (eq, shapes, chunks) in enumerate(ARRAY_CASES):
            rng = np.random.default_rng(0)
            ops = [da.from_array(rng.standard_normal(s), chunks=c).persist()
                   for s, c in zip(shapes, chunks)]
            expected = np.einsum(eq, *[x.compute() for x in ops], optimize=True)
            for mode in ("dask.array.einsum", "dask.array.einsum(optimize=True)", "tree",
                         "accumulate"):
                lazy = _lazy(mode, eq, ops)
                error = float(np.abs(lazy.compute() - expected).max() / np.abs(expected).max())
                times = _timed(lambda lazy=lazy: lazy.compute(), repeat)
                rows.append(_row(f"{eq} {mode}", times, chunks=str(chunks),
                                 relative_error=error,
                                 peak_extra_bytes=_memory_of(mode, index)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sliced", action="store_true")
    parser.add_argument("--arrays", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ratio", type=int, default=8)
    parser.add_argument("--bond", type=int, default=16)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    doc: dict = {"host": _host()}
    if args.sliced:
        doc["sliced"] = sliced_rows(args.repeat, args.ratio, args.bond)
    if args.arrays:
        doc["arrays"] = array_rows(args.repeat)
    if args.output:
        args.output.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _host() -> dict:
    import os
    import platform

    import dask
    import distributed

    from gpu_tc.bench import environment

    return {**environment.host(), "cores": os.cpu_count(), "python": platform.python_version(),
            "dask": dask.__version__, "distributed": distributed.__version__}


if __name__ == "__main__":
    main()
