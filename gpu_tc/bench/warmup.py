"""The warm-up before an implementation's timed runs: untimed calls until its cold
calls, and gpu_tc's measurement of its variants and first re-check, are past."""

from __future__ import annotations

import re

from . import timing
from .peers import Runner

# After the first call, single calls are timed (at most RETIME_CALLS, for at most
# RETIME_SECONDS) and the runs sized from the fastest: the first calls may be cold
# (plans, page faults, kernels compiled), and a measured plan of gpu_tc times its
# variants on its first calls (up to six variants, four calls each, or, where a call
# takes seconds, one each and three of the close ones: cpu_fallback.measure), which the
# timed runs would otherwise catch in part. 10 s covers the slow variants' calls of a
# 2 s TCCG case at full extents (3 s, two calls, did not).
RETIME_CALLS = 48
RETIME_SECONDS = 10.0
# Where the plan still says it is measuring after those calls (gpu_tc's reason: with
# MKL's variants a full-extent TCCG case times ten, three calls each where a call takes
# seconds), more untimed calls until it has chosen, for at most MEASURE_SECONDS: timed
# runs that caught the measurement ran up to 2x slow (cases 12 and 20-30 at full
# extents in float64, 2-3.5 s a call, 6d62139). 90 s left case 27 in float32 (4.4-5 s a
# call) measuring through its timed runs (27 of 30 calls timed when they ended: 0.937x
# opt_einsum; a 2-core EPYC host, 08ebe0f).
MEASURE_SECONDS = 180.0
# Then, while its reason says its first re-check is still to come (it waits a second
# from the first decision and for its calls, cpu_fallback.measure) or a re-check is under
# way, more untimed calls for at most RECHECK_SECONDS, so that no timed run catches it;
# a pending re-check is waited for only where its calls at the fastest call's time fit
# in that bound (else it falls far past the timed runs). With 5 s, TCCG case 28 at half
# extents in float32 (90 ms calls, its first re-check after 73) re-checked through its
# three timed runs: 91, 116 and 146 ms against numpy's 90 (an EPYC host, 4c116ea).
RECHECK_AFTER = re.compile(r"re-checked after (\d+) calls")
RECHECK_SECONDS = 30.0


def untimed_calls(runner: Runner, elapsed: float) -> float:
    """Call ``runner`` untimed as the constants above say, after a call that took
    ``elapsed`` seconds; the fastest call's seconds."""
    fastest, spent = elapsed, 0.0
    for _ in range(RETIME_CALLS):
        if spent + fastest >= RETIME_SECONDS:
            break
        elapsed = timing.run(runner.call, 1, runner.sync)
        fastest, spent = min(fastest, elapsed), spent + elapsed
    for limit, still in ((MEASURE_SECONDS, _measuring), (RECHECK_SECONDS, _rechecking)):
        spent = 0.0
        while spent < limit and still(runner.reason() or "", fastest):
            elapsed = timing.run(runner.call, 1, runner.sync)
            spent += elapsed
            fastest = min(fastest, elapsed)
    return fastest


def _measuring(reason: str, call_seconds: float) -> bool:
    """Whether a plan's reason says it has not chosen yet."""
    return "measuring" in reason


def _rechecking(reason: str, call_seconds: float) -> bool:
    """Whether a plan's reason says a re-check is under way, or its first is to come
    within RECHECK_SECONDS of calls of ``call_seconds`` (the most calls any of its
    choices waits counted in full: an upper bound)."""
    if ": re-checking now" in reason:
        return True
    calls = [int(n) for n in RECHECK_AFTER.findall(reason)]
    return ": pending" in reason and max(calls, default=0) * call_seconds <= RECHECK_SECONDS
