"""The probe process of :mod:`gpu_tc.bench.memory`: one implementation on one case.

Run as ``python -m gpu_tc.bench.memory_probe --peer NAME --backend cpu --case JSON``
(the case as :func:`dataclasses.asdict` writes it). It prints one line, ``gpu-tc-memory:``
and a :class:`~gpu_tc.bench.memory.Footprint` as JSON; a failure of the implementation
is answered the same way, with its reason.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import json
import sys
from typing import Any

import numpy as np

from .memory import PREFIX, Footprint
from .peers import GPU_TC, Peer, lookup
from .settings import device
from .suites import Case

STATUS = "/proc/self/status"
# Calls before the baseline of a warm probe: enough for a measured plan of gpu_tc's CPU
# backend to time all its variants (two GEMM orientations x up to six variants with
# MKL's (TCCG case 27: twelve in all), each a lead-in then three timed calls:
# cpu_fallback.measure), so that each has run, loading what it loads, and the probed
# calls run the variant kept.
WARM_CALLS = 48


def status(fields: tuple[str, ...] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """Fields of ``/proc/self/status`` in bytes (the kernel writes kB)."""
    found = {}
    with open(STATUS, encoding="ascii") as lines:
        for line in lines:
            key, _, value = line.partition(":")
            if key in fields:
                found[key] = int(value.split()[0]) * 1024
    return found


def reset_peak() -> bool:
    """Reset the kernel's peak resident memory (VmHWM) to the current; False if refused."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def release_free_heap() -> None:
    """Hand free heap pages back to the kernel (glibc), so the baseline holds live data only.

    Making the inputs frees scratch arrays (the random numbers before the cast) that
    glibc may keep resident; a call could then reuse them unseen by VmHWM.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        pass


def implementation(name: str) -> Peer:
    """gpu_tc or the peer of that name (a twin's included).

    Raises:
        ValueError: no implementation has that name.
    """
    if name == GPU_TC.name:
        return GPU_TC
    try:
        return lookup(name)
    except KeyError:
        raise ValueError(f"unknown implementation {name!r} (not gpu_tc nor a peer of PEERS, "
                         "nor a twin of one)") from None


def probe(case: Case, peer: Peer, backend: str, warm: bool = False) -> Footprint:
    """Measure ``peer`` on ``case`` in this process (which must be fresh).

    With ``warm``, WARM_CALLS calls run before the baseline, so that what the library
    loads once per process (modules imported on first use, compiled kernels) is part of
    it; gpu_tc's host pool is then emptied, so that its buffers count again.
    """
    importlib.import_module(peer.module)  # the library's import is not the call's memory
    dev = device(backend)
    operands = [dev.put(x) for x in case.operands()]
    if warm:
        first = peer.build(case, operands)  # held (not closed): its plan stays cached
        for _ in range(WARM_CALLS):
            first.call()
            first.sync()
        if "gpu_tc" in sys.modules:
            sys.modules["gpu_tc"].host_pool().clear()
    gc.collect()
    release_free_heap()
    reset = reset_peak()
    # Where the counter cannot be reset, VmHWM keeps the peak of making the inputs.
    before = status()
    baseline = before["VmRSS"]
    runner = peer.build(case, operands)
    first = runner.call()
    runner.sync()
    del first
    second = runner.call()
    runner.sync()
    peak = status()["VmHWM"]
    result = int(np.asarray(runner.host(second)).nbytes)
    runner.close()
    return Footprint.of(peak, baseline, result, reset, before["VmHWM"])


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, probe, print the answer line; 0 unless the arguments are bad."""
    parser = argparse.ArgumentParser(prog="python -m gpu_tc.bench.memory_probe")
    parser.add_argument("--peer", required=True, help="gpu_tc or a peer's name")
    parser.add_argument("--backend", default="cpu", choices=("cpu",))
    parser.add_argument("--case", required=True, help="the case as JSON")
    parser.add_argument("--warm", action="store_true",
                        help="call a few times before the baseline (one-time costs excluded)")
    args = parser.parse_args(argv)
    case = Case(**json.loads(args.case))
    try:
        found = probe(case, implementation(args.peer), args.backend, args.warm)
    except Exception as err:  # noqa: BLE001 - the implementation's failure is the answer
        text = f"{type(err).__name__}: {err}"
        found = Footprint.missing(text if len(text) <= 300 else text[:297] + "...")
    answer: dict[str, Any] = found.as_dict()
    print(PREFIX + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
