"""The flags of ``gpu-tc bench`` and their checking into a :class:`BenchRequest`.

Every bad value is reported through ``parser.error``: a usage message and exit
status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from .peers import PEERS
from .suites import DTYPES, SUITES


@dataclass(frozen=True)
class BenchRequest:
    """What ``gpu-tc bench`` was asked to do, checked.

    Attributes:
        suites: Suite names, in the order given.
        dtypes: NumPy dtype names.
        backend: "cpu" or "gpu".
        peers: Peer names, or None for each suite's default peers.
        case_ids: Case ids to keep, or None for all.
        quick: Shrunk extents.
        repeat: Timed runs per implementation, or None for the suite's default.
        plot: Whether to draw PNGs when writing files.
        resume: Keep the finished cases of an interrupted run into the same --output.
        scale: Every extent of the tccg cases times this (0.5: half extents).
        memory: Measure each implementation's peak extra memory on the tccg cases.
        twin: A peer to time twice, as itself and as ``<peer>-twin``: the noise floor.
    """

    suites: tuple[str, ...]
    dtypes: tuple[str, ...]
    backend: str
    peers: tuple[str, ...] | None
    case_ids: frozenset[int] | None
    quick: bool
    repeat: int | None
    plot: bool = True
    resume: bool = False
    scale: float = 1.0
    memory: bool = True
    twin: str | None = None


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpu-tc bench``."""
    parser.add_argument("suites", nargs="*", metavar="SUITE",
                        help=f"one or more of {', '.join(SUITES)} (default: all)")
    parser.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                        help="operands as NumPy (cpu, default) or CuPy (gpu) arrays")
    parser.add_argument("--dtype", action="append", metavar="DTYPE",
                        help=f"{', '.join(DTYPES)}; repeatable or a comma list "
                        "(default: float64)")
    parser.add_argument("--peers", metavar="LIST",
                        help=f"comma list of {', '.join(PEERS)} (default: the suite's peers "
                        "that are installed)")
    parser.add_argument("--cases", metavar="IDS", help="case ids and ranges, e.g. 1-8,12")
    parser.add_argument("--quick", action="store_true", help="shrunk extents: a fast check")
    parser.add_argument("--scale", type=_positive_float, default=1.0, metavar="FACTOR",
                        help="multiply every extent of the tccg cases by FACTOR (rounded, at "
                        "least 1; e.g. 0.5); files get a -xFACTOR suffix (default: 1)")
    parser.add_argument("--repeat", type=_positive_int, metavar="N",
                        help="timed runs per implementation; the median is reported")
    parser.add_argument("--output", metavar="DIR",
                        help="write <backend>-<suite>-<dtype>.json/.md/.png and summary.md here")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG files")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the peak-memory probes of the tccg suite (by default, after "
                        "the timings, each implementation runs each case again in a fresh "
                        "process per implementation, a cold then a warm call, and its peak "
                        "resident memory above the inputs, less the result, is reported; "
                        "Linux and --backend cpu only)")
    parser.add_argument("--twin", metavar="PEER",
                        help="also time a second, identical copy of PEER, named PEER-twin, in "
                        "the same rounds: the report gives how far the two land apart per "
                        "case, the noise floor of this host and run; the copy is never the "
                        "best peer")
    parser.add_argument("--resume", action="store_true",
                        help="with --output: keep the cases an interrupted run of the same "
                        "suite, dtype, peers and settings finished, and run the rest")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _split(values: list[str] | str | None) -> list[str]:
    if values is None:
        return []
    items = [values] if isinstance(values, str) else values
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def parse_case_ids(text: str) -> frozenset[int]:
    """``"1-8,12"`` -> {1, ..., 8, 12}.

    Raises:
        ValueError: a part is not an id or an ascending range of ids >= 1.

    Example:
        >>> sorted(parse_case_ids("1-3,7"))
        [1, 2, 3, 7]
    """
    ids: set[int] = set()
    for part in _split(text):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise ValueError(f"{part!r} is not a case id or a range like 1-8") from None
        if first < 1 or last < first:
            raise ValueError(f"{part!r} is not an ascending range of ids from 1")
        ids.update(range(first, last + 1))
    if not ids:
        raise ValueError(f"{text!r} names no case")
    return frozenset(ids)


def resolve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> BenchRequest:
    """Check the parsed flags; a bad one ends in ``parser.error`` (exit status 2)."""
    for suite in args.suites:
        if suite not in SUITES:
            parser.error(f"unknown suite {suite!r} (choose from {', '.join(SUITES)})")
    dtypes = _split(args.dtype) or ["float64"]
    for dtype in dtypes:
        if dtype not in DTYPES:
            parser.error(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    peers = None
    if args.peers is not None:
        peers = _split(args.peers)
        if not peers:
            parser.error("--peers needs at least one peer name")
        for name in peers:
            if name not in PEERS:
                parser.error(f"unknown peer {name!r} (choose from {', '.join(PEERS)})")
            if PEERS[name].device != args.backend:
                parser.error(f"peer {name!r} runs on the {PEERS[name].device}, "
                             f"not on --backend {args.backend}")
    if args.twin is not None:
        _check_twin(args.twin, args.backend, peers, parser)
    if args.resume and args.output is None:
        parser.error("--resume needs --output (the checkpoint lives there)")
    case_ids = None
    if args.cases is not None:
        try:
            case_ids = parse_case_ids(args.cases)
        except ValueError as err:
            parser.error(f"--cases: {err}")
    return BenchRequest(
        suites=tuple(dict.fromkeys(args.suites or SUITES)),
        dtypes=tuple(dict.fromkeys(dtypes)),
        backend=args.backend,
        peers=None if peers is None else tuple(dict.fromkeys(peers)),
        case_ids=case_ids,
        quick=args.quick,
        repeat=args.repeat,
        plot=not args.no_plot,
        resume=args.resume,
        scale=args.scale,
        memory=not args.no_memory,
        twin=args.twin,
    )


def _check_twin(name: str, backend: str, peers: list[str] | None,
                parser: argparse.ArgumentParser) -> None:
    """--twin names a peer of the backend, one of --peers when they are given."""
    if name not in PEERS:
        parser.error(f"--twin: unknown peer {name!r} (choose from {', '.join(PEERS)})")
    if PEERS[name].device != backend:
        parser.error(f"--twin: peer {name!r} runs on the {PEERS[name].device}, "
                     f"not on --backend {backend}")
    if peers is not None and name not in peers:
        parser.error(f"--twin: peer {name!r} is not among --peers {','.join(peers)}")
