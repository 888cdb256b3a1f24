"""The ``gpu-tc`` command: info, selftest, demo, bench, and the service's scheduler and
worker (gpu_tc.distributed.service).

Example:
    $ gpu-tc info
    $ gpu-tc selftest
    $ gpu-tc demo
    $ gpu-tc bench tccg --dtype float64,float32 --output benchmarks/results
    $ gpu-tc scheduler --scheduler-file /tmp/scheduler.json &
    $ gpu-tc worker --scheduler-file /tmp/scheduler.json --nworkers 2 &

Bad flags and unknown suites are usage errors (exit status 2); every command returns
0 on success and 1 when a check failed or the asked-for backend is missing.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__

BACKENDS = ("cpu", "gpu")
GPU_VERSIONS = (
    ("cupy", "CuPy"),
    ("cutensor", "cuTENSOR"),
    ("cublas", "cuBLAS"),
    ("nvmath-python", "nvmath-python"),
    ("cuda_runtime", "CUDA runtime"),
    ("cuda_driver", "CUDA driver"),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    extra: list[str] = []
    if "--" in argv:  # the rest goes to the command gpu-tc starts (scheduler, worker)
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(argv)
    if extra and not hasattr(args, "passed_on"):
        parser.error(f"{args.command} takes no arguments after --")
    args.passed_on = extra
    return int(args.handler(args, argv))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="gpu-tc", description="gpu_tc: einsum-style tensor contraction on CPU and GPU."
    )
    parser.add_argument("--version", action="version", version=f"gpu_tc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser("info", help="versions, backends, devices and plan-cache settings")
    info.set_defaults(handler=_info)

    selftest = commands.add_parser(
        "selftest", help="every operation on every available backend against the reference"
    )
    selftest.add_argument("--backend", choices=BACKENDS, action="append",
                          help="only this backend (repeatable; default: every available one)")
    selftest.set_defaults(handler=_selftest)

    demo = commands.add_parser(
        "demo", help="worked contractions plus a short benchmark table on the best backend"
    )
    demo.add_argument("--backend", choices=BACKENDS, help="default: gpu when usable, else cpu")
    demo.set_defaults(handler=_demo)

    from .bench.cli_args import add_bench_arguments
    from .distributed.service import add_arguments as add_service_arguments

    bench = commands.add_parser(
        "bench", help="benchmark suites against the peer libraries; JSON, markdown and PNG"
    )
    add_bench_arguments(bench)
    bench.set_defaults(handler=_bench, parser=bench)
    add_service_arguments(commands)
    return parser


def _info(args: argparse.Namespace, argv: list[str]) -> int:
    from .bench import blas_env, environment
    from .cache import plan_cache
    from .host import cpu_name

    found = blas_env.inspect()
    host = environment.host(found)
    print(f"gpu_tc {host['gpu_tc']}")
    print(f"Python {host['python']} ({host['platform']})")
    print(f"NumPy {host['numpy']}; BLAS {host['blas']['text']}")
    overrides = ", ".join(f"{k}={v}" for k, v in found.variables.items()) or "none set"
    print(f"BLAS and threading variables: {overrides}")
    for warning in found.warnings:
        print(f"  warning: {warning}")
    print(f"opt_einsum {host['opt_einsum'] or 'not installed'}")
    gpu = environment.gpu_status()
    for key, label in GPU_VERSIONS:
        print(f"{label}: {gpu.versions.get(key, 'not available')}")
    print("Backends:")
    print("  cpu: available (NumPy/BLAS, cpu_fallback)")
    if gpu.available:
        libraries = [name for key, name in (("cutensor", "cuTENSOR"), ("cublas", "cuBLAS"))
                     if not gpu.versions[key].startswith("not loadable")]
        print(f"  gpu: available (CuPy, {', '.join(libraries)})")
    else:
        print(f"  gpu: unavailable: {gpu.reason}")
    print("Devices:")
    print(f"  cpu: {cpu_name()}, {host['cpu_count']} logical cores")
    for device in gpu.devices:
        print(f"  gpu {device}")
    stats = plan_cache().stats()
    print(f"Plan cache: capacity {stats.capacity}, size {stats.size}, hits {stats.hits}, "
          f"misses {stats.misses}, evictions {stats.evictions}")
    from .bench.peers import PEERS

    peers = ", ".join(f"{p.name} ({'yes' if p.missing() is None else 'no'})"
                      for p in PEERS.values())
    print(f"Benchmark peers: {peers}")
    return 0


def _selftest(args: argparse.Namespace, argv: list[str]) -> int:
    from .bench.selftest import run_selftest

    return run_selftest(args.backend)


def _demo(args: argparse.Namespace, argv: list[str]) -> int:
    from .bench.demo import run_demo

    return run_demo(args.backend)


def _bench(args: argparse.Namespace, argv: list[str]) -> int:
    from .bench.cli_args import resolve
    from .bench.session import run_session

    command = "gpu-tc " + " ".join(shlex.quote(a) for a in argv)
    request = resolve(args, args.parser)
    output = Path(args.output) if args.output else None
    return run_session(request, command, output)


if __name__ == "__main__":
    sys.exit(main())
