"""Where a warm small call spends its host time: per-call time, then a profile.

A GPU call of a few kilobytes costs what the host spends launching it (visit 6 on an
H200: gpu_tc's small calls 18-26 us, its traces 20-26 against torch.einsum's 14-22), and
the emulation's costs are not CuPy's, so this runs where the GPU is. For each call
below: the per-call host time of a loop of warm calls (no synchronisation inside it),
beside torch.einsum's where torch is installed, then cProfile's functions by their own
time over as many calls. On the CPU, a warm call that einsum's compiled front serves
(gpu_tc._warm) has no Python frame of gpu_tc's: its lookup counts in the caller's time.

    python benchmarks/host_profile.py --backend gpu --output host-profile.txt
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import gpu_tc

# name -> (subscripts, operand shapes)
CALLS = {
    "4x4 matmul": ("ij,jk->ik", [(4, 4), (4, 4)]),
    "3 x 4x4 chain": ("ij,jk,kl->il", [(4, 4), (4, 4), (4, 4)]),
    "4^4 tensor": ("abcd,dbea->ec", [(4, 4, 4, 4), (4, 4, 4, 4)]),
    "trace 4x4": ("ii->", [(4, 4)]),
    "trace 4096^2": ("ii->", [(4096, 4096)]),
    "batched trace 4096 x 64^2": ("bii->b", [(4096, 64, 64)]),
}
WARM_UPS = 200  # past every timed choice of routes and layouts


def _module(backend: str) -> tuple[Any, Callable[[], None]]:
    """The array module and its synchronisation."""
    if backend == "cpu":
        return np, lambda: None
    import cupy

    return cupy, cupy.cuda.get_current_stream().synchronize


def _torch_call(backend: str, subscripts: str, host: list[np.ndarray]) -> Any:
    """torch.einsum on the same data (None without torch, or without its CUDA)."""
    try:
        import torch
    except ImportError:
        return None
    if backend == "gpu" and not torch.cuda.is_available():
        return None
    device = "cpu" if backend == "cpu" else "cuda"
    tensors = [torch.from_numpy(x).to(device) for x in host]
    return lambda: torch.einsum(subscripts, *tensors)


def _per_call(call: Callable[[], Any], sync: Callable[[], None], calls: int) -> float:
    """Microseconds per call of a loop of warm calls (the best of three loops)."""
    best = float("inf")
    for _ in range(3):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, time.perf_counter() - start)
        sync()
    return best / calls * 1e6


def _profile(call: Callable[[], Any], sync: Callable[[], None], calls: int, top: int) -> str:
    profile = cProfile.Profile()
    sync()
    profile.enable()
    for _ in range(calls):
        call()
    profile.disable()
    sync()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def report(backend: str, calls: int, top: int) -> str:
    """The per-call times and profiles of every call in CALLS, as text."""
    xp, sync = _module(backend)
    rng = np.random.default_rng(0)
    lines = [f"backend {backend}; {calls} calls a loop; gpu_tc {gpu_tc.__version__}", ""]
    for name, (subscripts, shapes) in CALLS.items():
        host = [rng.standard_normal(shape) for shape in shapes]
        operands = [xp.asarray(x) for x in host]

        def call(s: str = subscripts, ops: list[Any] = operands) -> Any:
            return gpu_tc.einsum(s, *ops)

        for _ in range(WARM_UPS):
            call()
        sync()
        for _ in range(WARM_UPS):  # timings read once their events completed
            call()
        plan = gpu_tc.prepare(subscripts, *operands)
        peer = _torch_call(backend, subscripts, host)
        mine = _per_call(call, sync, calls)
        theirs = "" if peer is None else f", torch.einsum {_per_call(peer, sync, calls):.1f} us"
        lines += [f"== {name} `{subscripts}`: gpu_tc {mine:.1f} us a call{theirs}",
                  f"route {plan.route}: {plan.reason}",
                  _profile(call, sync, calls, top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25, help="functions listed per call")
    parser.add_argument("--output", help="write the report here (default: print it)")
    args = parser.parse_args()
    text = report(args.backend, args.calls, args.top)
    if args.output:
        with open(args.output, "w") as file:
            file.write(text)
        print(f"wrote {args.output}")
    else:
        print(text)


if __name__ == "__main__":
    main()
