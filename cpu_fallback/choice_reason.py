"""The words a measured choice (:class:`cpu_fallback.measure.Choice`) adds to a plan's
reason: what it timed, what it kept, and when it re-checks. The benchmark runner reads
some of them (gpu_tc.bench.warmup): "measuring", "re-checked after N calls", and the
endings ": re-checking now" and ": pending"."""

from __future__ import annotations

from collections.abc import Sequence

from . import pacing


def measuring(count: int, timed: int, samples: int) -> str:
    """Before the first decision: ``timed`` of ``count`` variants' ``samples`` calls each."""
    return f"measuring {count} variants ({timed} of {count * samples} calls timed)"


def measured(names: Sequence[str], best: int, seconds: Sequence[float], *, restored: bool,
             long: bool, incumbent: bool, samples: int, margin: float, contenders: float,
             wait: int, confirm: int | None, rechecking: bool, pending_since: str | None
             ) -> str:
    """After a decision: ``names[best]`` kept, each variant's ``seconds`` at the last
    decision, and the next re-check (after ``wait`` calls; ``confirm``: the variant it
    would confirm; ``pending_since``: "the first" or "the last" decision, where it must
    wait FIRST_RECHECK_SECONDS from it)."""
    times = ", ".join(f"{name} {t * 1e3:.3g} ms" for name, t in zip(names, seconds))
    if restored:
        return (f"measured in an earlier process (gpu_tc's route cache): {names[best]} kept "
                f"({times}; re-checked after {wait} calls)")
    median = (f"the median of up to {samples} timed calls, one where a call took "
              f"{contenders}x the fastest" if long
              else f"the median of the last {samples} timed calls")
    lead = ("" if incumbent
            else " after the first measurement, or a lead in two measurements running")
    which = ("every other re-check, the first too," if long
             else f"re-checks time those never within {contenders}x the choice once "
             f"({samples} times where that call is); after the first re-check, every other one")
    recheck = f"re-checked after {wait} calls"
    if confirm is not None:
        recheck += f" to confirm {names[confirm]} is faster"
    if rechecking:
        recheck += ": re-checking now"
    elif pending_since is not None:
        recheck += (f", not before {pacing.FIRST_RECHECK_SECONDS:g} s from {pending_since} "
                    f"decision: pending")
    return (f"measured: {names[best]} kept ({times}; {median}, {margin:.0%} margin for a "
            f"change{lead}; {which} of those ever within {contenders}x the choice only; "
            f"{recheck})")
