"""When a measured choice (:class:`cpu_fallback.measure.Choice`) times its variants again.

A re-check comes after at least RECHECK_FIRST calls of the choice, then RECHECK_GROWTH x
as many each time, and never before the calls since the decision have taken
1 / RECHECK_SHARE times what the re-check will cost by the last timings (the choice
prices it: its slower variants' calls, and threads left spinning): where a variant is
several times slower than the choice, a one-thread reduction against a threaded one, its
re-check waits until it costs at most a RECHECK_SHARE of the time. After the first, where
a re-check times variants of several engines, the price counts the longest SPIN_SECONDS
among them (calls wait, or run beside the spinning threads): TCCG's 0.2 ms 6-d products
at half extents, settled on the small-K kernel, had run 400 calls at 0.31 ms a call with
a re-check of all twelve variants among them (0.20 without), most of it in the 0.12 s
OpenBLAS's threads spun after its variants were timed.

The first re-check comes soon, to undo a first measurement a passing load disturbed
(TCCG case 19 at half extents once timed the small-K kernel at 5.1 ms against its usual
1.8-2.2 and kept BLAS at 3.5 ms: 0.73x torch in the runner), but not before
FIRST_RECHECK_SECONDS from the first decision: on a 2-core EPYC VM two threads' work ran
at one thread's speed for seconds at a time, the first measurement and a re-check 16
calls later fell in one such spell, and TCCG case 36 at half extents kept MKL's batched
GEMM (0.31-0.35 ms in a spell or out of one) over the small-K kernel (0.31 in the spell,
0.19 out of it).

A decision that makes the choice, changes it or doubts a change (cpu_fallback.measure)
starts the pace again, as a first decision does: a change that a disturbed measurement
made is undone, and a doubted one confirmed or dropped, as soon as a first decision's
would be, not RECHECK_GROWTH x later each time.

A choice restored from gpu_tc's route cache starts RECHECK_GROWTH x later than a fresh
one, with no wait in seconds.
"""

from __future__ import annotations

import math
import time

RECHECK_FIRST = 16
# Seconds from a decision that makes the choice, changes it or doubts a change before the
# next re-check, at the least (see above).
FIRST_RECHECK_SECONDS = 1.0
RECHECK_GROWTH = 8
RECHECK_SHARE = 0.05


class Pacing:
    """Counts a settled choice's calls and says when its next re-check begins.

    Args:
        restored: Whether the choice was restored from the route cache (see above).
    """

    def __init__(self, restored: bool = False) -> None:
        self.rechecks = 0  # re-checks begun
        self.wait = RECHECK_FIRST  # calls of the choice before the next re-check
        self.calls = 0
        self._fewest = RECHECK_FIRST * (RECHECK_GROWTH if restored else 1)
        self._not_before = 0.0  # time.perf_counter() before which none begins
        self._restarted = False  # since restart(), no re-check begun

    def due(self) -> bool:
        """Counts a call of the settled choice: whether a re-check begins with it."""
        self.calls += 1
        if self.calls <= self.wait or time.perf_counter() < self._not_before:
            return False
        self.calls = 0
        self._restarted = False
        self.rechecks += 1
        self._fewest *= RECHECK_GROWTH
        return True

    def restart(self) -> None:
        """A decision made or changed the choice: the next re-check as a first one's."""
        self._fewest = RECHECK_FIRST
        self._not_before = time.perf_counter() + FIRST_RECHECK_SECONDS
        self._restarted = True

    def pending(self) -> bool:
        """Whether the re-check that the last restart brought soon has yet to begin."""
        return self._restarted

    def schedule(self, extra_seconds: float, choice_seconds: float) -> None:
        """Sets the calls before the next re-check: at least the fewest the pace allows,
        and enough that ``extra_seconds`` (what the re-check costs beyond calls of the
        choice) are at most RECHECK_SHARE of the time those calls take."""
        if not 0 < choice_seconds < math.inf:
            self.wait = self._fewest
            return
        share = math.ceil(extra_seconds / (RECHECK_SHARE * choice_seconds) - 1e-9)
        self.wait = max(self._fewest, share)
