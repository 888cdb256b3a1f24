"""The engines whose worker threads keep spinning after a call returns (OpenBLAS's,
GNU OpenMP's), and until when a choice's own calls left them spinning: a timed call of
one variant waits while the threads of another variant of the same choice spin
(cpu_fallback.measure; every measured call marks its own, cpu_fallback.measured_plan).
Threads that the calls around a plan keep spinning (the other steps of a chain, the
caller's own BLAS calls) are how the plan runs, and hold nothing: a chain of two
measured 300^3 GEMMs, each step's lead-ins waiting for the other step's OpenBLAS
threads, was still measuring after 30 calls and ran 0.76x numpy.einsum."""

from __future__ import annotations

# Seconds the worker threads of an engine keep spinning after its call returns, taking
# CPUs from the next call's threads: OpenBLAS's about 0.12 s (a core kept busy, on the
# 2-core test host; a gathered small-K call timed in that window took 1.7x its time),
# GOMP's a few milliseconds; NumPy's own loops (a broadcast multiply) leave none. A
# variant's timed calls wait until the other variants' threads have gone to sleep.
SPIN_SECONDS = {"openmp": 0.01, "blas": 0.15, "numpy": 0.0}


class Spinning:
    """Until when (time.perf_counter) each engine's threads spin after the last call
    that one choice's variants made on it."""

    def __init__(self) -> None:
        self.until: dict[str, float] = {}

    def left(self, engine: str, end: float) -> None:
        """A call on ``engine`` returned at ``end``: its threads spin SPIN_SECONDS more."""
        self.until[engine] = end + SPIN_SECONDS[engine]

    def others_until(self, engine: str) -> float:
        """Until when the threads of the engines other than ``engine`` spin (0: none).
        (A copy of the items: a concurrent call's :meth:`left` may add an engine.)"""
        return max((end for name, end in tuple(self.until.items()) if name != engine),
                   default=0.0)
