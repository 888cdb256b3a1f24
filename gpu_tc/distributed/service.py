"""The contraction service: ``gpu-tc scheduler`` and ``gpu-tc worker``, dask's own
scheduler and workers with gpu_tc preloaded (``gpu_tc.distributed.preload``).

dask.distributed's protocol is the network API: clients connect with
``distributed.Client`` and call gpu_tc's functions (on dask arrays, or
``gpu_tc.distributed.contract``), whose tasks run on the workers. Both commands listen
on localhost unless ``--host`` says otherwise; arguments after ``--`` go to dask's own
command (``dask scheduler --help``, ``dask worker --help``: TLS, memory limits, ...).
Where dask-cuda is installed and a GPU is visible, ``gpu-tc worker`` starts
``dask cuda worker`` (one worker per GPU) instead of ``dask worker``.

Example:
    $ gpu-tc scheduler --scheduler-file /tmp/scheduler.json &
    $ gpu-tc worker --scheduler-file /tmp/scheduler.json --nworkers 2 &
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys

LOCALHOST = "127.0.0.1"
PRELOAD = "gpu_tc.distributed.preload"


def add_arguments(commands: argparse._SubParsersAction) -> None:
    """The ``scheduler`` and ``worker`` commands of ``gpu-tc``."""
    scheduler = commands.add_parser(
        "scheduler", help="a dask scheduler for gpu_tc workers (localhost by default)")
    scheduler.add_argument("--host", default=LOCALHOST, help=f"listen here (default {LOCALHOST})")
    scheduler.add_argument("--port", type=int, default=8786, help="0: any free port")
    scheduler.add_argument("--scheduler-file", help="write the address to this JSON file")
    scheduler.set_defaults(handler=run_scheduler, passed_on=[])

    worker = commands.add_parser(
        "worker", help="dask workers with gpu_tc preloaded (dask-cuda's where it can)")
    worker.add_argument("address", nargs="?", help="the scheduler's address (tcp://host:port)")
    worker.add_argument("--scheduler-file", help="read the address from this JSON file")
    worker.add_argument("--host", default=LOCALHOST, help=f"listen here (default {LOCALHOST})")
    worker.add_argument("--nworkers", default="1", help="worker processes (CPU workers)")
    worker.add_argument("--nthreads", type=int, default=1, help="threads per worker")
    worker.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=None,
                        help="dask cuda worker (default: when dask-cuda and a GPU are found)")
    worker.set_defaults(handler=run_worker, passed_on=[])


def scheduler_command(args: argparse.Namespace) -> list[str]:
    """The dask scheduler's command line."""
    command = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", args.host,
               "--port", str(args.port), "--preload", PRELOAD, "--no-dashboard"]
    if args.scheduler_file:
        command += ["--scheduler-file", args.scheduler_file]
    return command + args.passed_on


def worker_command(args: argparse.Namespace) -> list[str]:
    """The dask (or dask-cuda) worker's command line.

    Raises:
        SystemExit: neither an address nor a scheduler file was given (a usage error).
    """
    if not (args.address or args.scheduler_file):
        raise SystemExit("gpu-tc worker: give the scheduler's address or --scheduler-file")
    target = [args.address] if args.address else ["--scheduler-file", args.scheduler_file]
    cuda = _cuda_workers() if args.cuda is None else args.cuda
    common = ["--host", args.host, "--nthreads", str(args.nthreads), "--preload", PRELOAD,
              "--no-dashboard"]
    if cuda:
        dask = shutil.which("dask") or "dask"
        return [dask, "cuda", "worker", *target, *common, *args.passed_on]
    return [sys.executable, "-m", "distributed.cli.dask_worker", *target, *common,
            "--nworkers", str(args.nworkers), *args.passed_on]


def run_scheduler(args: argparse.Namespace, argv: list[str]) -> int:
    """Replace this process by the scheduler (signals reach dask directly)."""
    return _exec(scheduler_command(args))


def run_worker(args: argparse.Namespace, argv: list[str]) -> int:
    """Replace this process by the worker(s)."""
    return _exec(worker_command(args))


def _cuda_workers() -> bool:
    """dask-cuda is installed and CUDA sees a GPU."""
    if importlib.util.find_spec("dask_cuda") is None or importlib.util.find_spec("cupy") is None:
        return False
    from ..bench.environment import gpu_status

    return gpu_status().available


def _exec(command: list[str]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(command[0], command)
    return 1  # not reached: execvp replaces the process or raises
