"""Choosing among interchangeable plans by timing real calls, robust to noise.

Where routes compete (GEMM lowerings that pack an operand or loop over it, the two
orientations of a new result) no constant tuned on one host and one size picks well on
another, so the CPU backend times them on the calls themselves: every call computes the
full, correct result with one of the variants. A :class:`Choice` runs each variant in
turn, one untimed call, then SAMPLES timed calls in a row, and keeps the one whose
median timed call is fastest: one call slowed by a load on the host, page faults or
another library's threads does not count, nor does one lucky call of a variant whose
calls vary by themselves (a ufunc sum split over Python's threads, whose worker wakes
late now and then: a 4096^2 'ab->' ran 3.8-8 ms, and kept on its fastest call it ran
0.44x TBLIS in the benchmark). The current choice stays unless another beats it by
MARGIN. At first the choice is variant 0 (a reduction's: NumPy's own reduction, or the
OpenMP sums where NumPy's would be split over threads), or, where variant 0 is only the
rule's guess (a contraction's lowerings and orientations), none: the first measurement
keeps the fastest, and later one faster than the choice at two decisions running takes
over under the margin too (so does a preferred variant 0 that a decision left): a near
tie that the first measurement's noise settled does not hold the slower variant for good
(TCCG case 13, float32, half extents: OpenBLAS's packed GEMM kept at 22.1 ms, MKL's at
20.9, 0.877x torch; a 4096^2 'ab->' kept the ufunc's split at 4.09 ms over the OpenMP
sums' 3.75, 0.868x torch). The untimed call leads in (page faults, and threads woken: on
a virtual machine an OpenMP thread that went to sleep during another variant's BLAS call
took about a millisecond to wake, which a timed call right after the switch would have
charged to a 0.25 ms kernel), so a variant is timed as a run of its own calls finds it,
or, inside a chain of steps, as the steps around it leave the threads. The lead-in lasts
longer while threads another variant left spin (SPIN_SECONDS, cpu_fallback.spinning;
OpenBLAS's keep a core busy for a tenth of a second after each call), and each
measurement times the variants of that engine last. Later the variants are timed
SAMPLES times afresh and the choice made again under the same margin (or lead, as
above): one disturbed run of calls cannot pin a slow variant, and a choice made under
a passing load is undone at the next re-check that times the faster variant. When re-checks come is
:mod:`cpu_fallback.pacing`'s: soon after a decision that makes or changes the choice,
then further apart, each costing at most a small share of the time. The first re-check
times every variant; after it, every other re-check times only the choice and the
variants within CONTENDERS x its time at the last decision at their fastest at any
decision (after a spell at the first re-check timed a 64^4 'ijkj->ik''s threaded
column loops at 2.76 ms, first 0.34-0.48, its one-thread loops ran a benchmark's
rounds: 0.553x TBLIS), the others keeping their times till the next (unless the choice
ran over CONTENDERS x slower than then, and again in a second run of its calls, which
cost nothing more: those times no longer compare, and the others are timed too; the
same trace had kept its threaded column loops at 0.712 ms in a spell against the
threaded loops' 0.593 from before it, 0.652x torch; the second run, as the first calls
after the host idles run slow for every implementation, 2-5 calls of that trace). A
re-check that would change the choice while the choice ran over CONTENDERS x
slower than at its fastest at any decision (a spell of the host, maybe, not the variant)
changes nothing yet: the next re-check, as soon as after a first decision, times the two
again, and the change holds if it still leads by the margin (in a benchmark's rounds a
64^4 'ijkj->ik''s threaded column loops were timed at 1.0 ms, their usual 0.33, and
the one-thread loops, 0.59, took over until after its last run: 0.51x TBLIS). A
variant never within CONTENDERS x the choice gets a GLANCE in a re-check, the rest of a
run only where its one timed call comes within CONTENDERS x the choice now: such calls
cost much and decide little (that trace's choice, slowed just after the host woke from
idle, had its five others timed in full, 18 calls of 0.75-2.2 ms in a benchmark run of
60 calls of 0.34 ms: 0.41x TBLIS). Host timings are real here: CPU calls are synchronous.

Where a timed call takes LONG_SECONDS or more (a large GEMM: seconds a call) lead-ins
and holds matter little (a call's own costs, and other engines' spinning threads, are
small beside it) and each timed call costs much: the rest of the measurement is long,
one timed call of each variant, the current choice first, then SAMPLES in all of those
within CONTENDERS x the fastest; later re-checks time the same way, every other one (the
first too) of the close variants only: a re-check of TCCG case 12 at half extents (~0.3
s a call) had timed a variant 1.5x slower than the choice, one call of 0.44-0.49 s among
a benchmark's three timed runs, while a variant whose one timed call a load slowed still
gets timed again.

A choice given a ``key`` (its problem as plain text) saves each decision in the
persistent cache (:mod:`cpu_fallback.decisions`), and a later process's choice of the
same key starts from it: no call timed until its first re-check, of every variant (later
than a fresh choice's: :mod:`cpu_fallback.pacing`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Collection, Sequence

from . import choice_reason, decisions
from .pacing import Pacing
from .spinning import SPIN_SECONDS, Spinning

# Below this many flops a call takes well under a millisecond: the rule's pick runs, untimed.
MIN_FLOPS = 1 << 22
SAMPLES = 3
# Calls of a variant in one measurement: an untimed lead-in, then SAMPLES timed calls.
RUN = 1 + SAMPLES
GLANCE = 2  # a lead-in and one timed call: a variant far behind (see above)
MARGIN = 0.10
# A timed call this long makes the rest of its measurement long (see above; TCCG case 12
# at full extents, ~2 s a call, had timed 4 calls each of 4 variants, 2 of them 1.6-2.8x).
LONG_SECONDS = 0.25
# A re-check of the close variants only times those within this factor of the choice at
# their fastest (see above); a long measurement, those within it of the fastest, SAMPLES times.
CONTENDERS = 1.25


class Choice:
    """The fastest of ``len(names)`` variants, from timings of the calls that run them.

    Callers ask :meth:`next` which variant to run (and whether to time it), run it,
    and report the seconds with :meth:`record`. Thread-safe: concurrent calls share
    the queue of runs still to time.

    Args:
        names: The variants' names, as a reason shows them.
        key: The problem the variants solve, as plain text: decisions are saved under
            it and restored from it (see the module docstring); None keeps none.
        engines: Whose threads each variant's calls leave spinning (keys of
            SPIN_SECONDS, see cpu_fallback.measured_plan.engines); None: all the same.
        incumbent: Whether the first decision too keeps variant 0 unless another beats
            it by MARGIN (variant 0 preferred for its own sake; back to it, a lead in
            two measurements running is enough); False: the first decision takes the
            fastest (variant 0 only a guess), re-checks the margin or a lead in two
            measurements running.
    """

    def __init__(self, names: Sequence[str], key: str | None = None,
                 engines: Sequence[str] | None = None, incumbent: bool = True) -> None:
        self.names = tuple(names)
        self._incumbent = incumbent
        count = len(self.names)
        self.engines = tuple(engines) if engines is not None else ("openmp",) * count
        if len(self.engines) != count or not set(self.engines) <= SPIN_SECONDS.keys():
            raise ValueError(f"engines {self.engines!r}: one of {sorted(SPIN_SECONDS)} "
                             f"for each of {count} variants")
        self.best = 0
        self._long = False  # see LONG_SECONDS
        self._samples: list[list[float]] = [[] for _ in range(count)]
        # The timings the last decision saw (a re-check's partial samples are not shown).
        self._decided_times: list[float] = []
        self._fastest_times = [math.inf] * count  # each variant's, at any decision
        self._pacing = Pacing()
        self._confirm: int | None = None  # the variant a doubted change would take
        self._glanced: set[int] = set()  # variants this measurement times once (GLANCE)
        self._retimed = False  # whether this measurement timed the choice twice (_widens)
        # (variant, timed) for each call of a measurement: a run of each variant in turn.
        self._queue: deque[tuple[int, bool]] = deque(self._rounds())
        self._decided = False
        self._lock = threading.Lock()
        self._held_until: float | None = None  # a lead-in's end, at the latest
        self.spinning = Spinning()  # the threads its own calls left spinning
        self._key = key
        self.restored = False
        saved = None if key is None else decisions.recall(key, self.names)
        if saved is not None:  # decided in an earlier process: re-checked later only
            self.best, self.restored, self._decided = saved["best"], True, True
            self._samples = [[t] for t in saved["seconds"]]
            self._decided_times = list(saved["seconds"])
            self._fastest_times = list(saved["seconds"])
            self._queue.clear()
            self._pacing = Pacing(restored=True)
            self._schedule_recheck()

    @property
    def settled(self) -> bool:
        """Whether a choice was made and no timing is pending."""
        return self._decided and not self._queue

    def peek(self, allowed: Sequence[int] | None = None) -> int:
        """The variant the next call would run (among ``allowed``, default all)."""
        with self._lock:
            return self._pick(allowed, pop=False)[0]

    def next(self, allowed: Sequence[int] | None = None) -> tuple[int, bool]:
        """(the variant to run now, among ``allowed``; whether to time it)."""
        with self._lock:
            if not self._queue:
                if not self._pacing.due():
                    # settled: the choice, untimed (a warm call's whole budget is a few
                    # microseconds: no search of the empty queue where all are allowed)
                    return (self.best, False) if allowed is None else self._pick(allowed, False)
                self._samples = [[] for _ in self.names]
                self._queue.extend(self._rounds())
            variant, timed = self._pick(allowed, pop=False)
            if timed and not self._long and self._lead_in_longer(variant):
                return variant, False
            self._held_until = None
            return self._pick(allowed, pop=True)

    def _lead_in_longer(self, variant: int) -> bool:
        """Whether a timed call of ``variant`` should wait (an untimed call instead):
        while the threads another variant's calls left spinning spin, for at most the
        longest spin."""
        now = time.perf_counter()
        if self.spinning.others_until(self.engines[variant]) <= now:
            return False
        if self._held_until is None:
            self._held_until = now + max(SPIN_SECONDS.values())
        return now < self._held_until

    def _rounds(self) -> list[tuple[int, bool]]:
        """The calls of one measurement: each variant in turn, a lead-in then SAMPLES
        timed calls; the variants whose engine spins longest last, so that the others
        are timed without waiting for those threads. Long calls: one timed call of
        each, the current choice first (more follow for the contenders, see record).
        Every other re-check, of the choice and the close ones only (see
        :meth:`_close_only`)."""
        recheck = self._pacing.rechecks
        variants = self._timed_next(recheck)
        if self._long:
            return [(v, True) for v in [self.best] + [v for v in variants if v != self.best]]
        self._glanced = {v for v in variants if self._glance_only(v, recheck)}
        self._retimed = False  # see _widens
        return self._runs(variants, self._glanced)

    def _runs(self, variants: Sequence[int], glanced: Collection[int] = (),
              timed: int = SAMPLES) -> list[tuple[int, bool]]:
        """A lead-in then ``timed`` calls (``glanced``: a GLANCE) of each of ``variants``,
        those whose engine spins longest last."""
        order = sorted(variants, key=lambda v: SPIN_SECONDS[self.engines[v]])
        return [(v, is_timed) for v in order for is_timed in
                [False] + [True] * (GLANCE - 1 if v in glanced else timed)]

    def _glance_only(self, variant: int, recheck: int) -> bool:
        """Whether measurement number ``recheck`` times ``variant`` with a GLANCE: a
        re-check of every variant, the variant never close (see :meth:`_close`)."""
        return (bool(self._decided_times) and not self._close_only(recheck)
                and variant != self.best and not self._close(variant))

    def _look_again(self) -> bool:
        """After a re-check's glances, the rest of a run for those whose call came within
        CONTENDERS x the choice's time now; whether any were queued."""
        glanced, self._glanced = self._glanced, set()
        again = [v for v in sorted(glanced) if self._time(v) <= CONTENDERS * self._time(self.best)]
        self._queue.extend(self._runs(again, timed=SAMPLES - 1))
        return bool(again)

    def _timed_next(self, recheck: int) -> list[int]:
        """The variants measurement number ``recheck`` (0: the first) times: where it
        confirms a doubted change, the choice and the variant that would take over."""
        if self._confirm is not None:
            return sorted({self.best, self._confirm})
        close_only = self._close_only(recheck)
        return [v for v in range(len(self.names))
                if v == self.best or not close_only or self._close(v)]

    def _close_only(self, recheck: int) -> bool:
        """Whether re-check number ``recheck`` (1: the first) times only the choice and
        the variants close to it, after a decision: the even ones, or the odd ones where
        calls are long; and one that confirms a doubted change."""
        parity = 1 if self._long else 0
        return self._confirm is not None or (
            recheck >= 1 and recheck % 2 == parity and bool(self._decided_times))

    def _close(self, variant: int) -> bool:
        """Whether ``variant`` at its fastest at any decision was within CONTENDERS x
        the choice's time at the last (one slow measurement does not leave it out)."""
        return (self._fastest_times[variant]
                <= CONTENDERS * self._decided_times[self.best])

    def _pick(self, allowed: Sequence[int] | None, pop: bool) -> tuple[int, bool]:
        for position, (variant, timed) in enumerate(self._queue):
            if allowed is None or variant in allowed:
                if pop:
                    del self._queue[position]
                return variant, timed
        if allowed is None or self.best in allowed:
            return self.best, False
        # the fastest allowed at the last decision (a re-check leaves some untimed)
        key = self._decided_times.__getitem__ if self._decided_times else self._time
        return min(allowed, key=key), False

    def record(self, variant: int, seconds: float, timed: bool) -> None:
        """The seconds a call of ``variant`` took (``timed`` as :meth:`next` said)."""
        with self._lock:
            if not timed:
                return
            self._samples[variant].append(seconds)
            del self._samples[variant][:-SAMPLES]
            if not self._long and seconds >= LONG_SECONDS:
                self._go_long()
            if self._queue:
                return
            if self._long and not self._contenders_timed():
                return
            if not self._long and self._look_again():
                return
            self._decide()

    def _go_long(self) -> None:
        """A timed call took LONG_SECONDS or more (a lead-in, often a plan's first call,
        may take longer than the variant does): the rest of the measurement is a long
        one, a timed call of each variant not yet timed, the current choice first."""
        self._long = True
        self._glanced = set()
        self._queue.clear()
        self._queue.extend((v, True) for v, _ in self._rounds() if not self._samples[v])

    def _contenders_timed(self) -> bool:
        """After a long measurement's round of one timed call each: whether the variants
        within CONTENDERS x the fastest time, when more than one, have SAMPLES timed
        calls each; if not, their calls are queued."""
        fastest = min(self._time(v) for v in range(len(self.names)))
        contenders = [v for v in range(len(self.names))
                      if self._time(v) <= CONTENDERS * fastest]
        if len(contenders) < 2:
            return True
        self._queue.extend((v, True) for v in contenders
                           for _ in range(SAMPLES - len(self._samples[v])))
        return not self._queue

    def _time(self, variant: int) -> float:
        """The variant's time: the median of its last SAMPLES timed calls (of two, the
        slower)."""
        samples = sorted(self._samples[variant])
        return samples[len(samples) // 2] if samples else float("inf")

    def _widens(self) -> bool:
        """Whether a re-check of the close variants only queues more calls before it
        decides: the choice ran over CONTENDERS x slower than at the last decision (the
        others' times from then no longer compare; see the module docstring), a run of
        the choice again (its calls cost nothing more), then, if still so, the others."""
        left_out = [v for v in range(len(self.names)) if not self._samples[v]]
        if (not left_out or not self._decided or not self._close_only(self._pacing.rechecks)
                or self._time(self.best) <= CONTENDERS * self._decided_times[self.best]):
            return False
        if not self._long and not self._retimed:
            self._retimed, self._samples[self.best] = True, []
            self._queue.extend(self._runs([self.best]))
            return True
        self._glanced = set() if self._long else set(left_out)  # far behind: a glance each
        self._queue.extend([(v, True) for v in left_out] if self._long
                           else self._runs(left_out, self._glanced))
        return True

    def _decide(self) -> None:
        if self._widens():
            return
        fastest = min(range(len(self.names)), key=self._time)
        first = not self._decided and not self._incumbent
        change = fastest != self.best and (
            first or self._time(fastest) < (1 - MARGIN) * self._time(self.best)
            or self._ahead_twice(fastest))
        # the choice ran over CONTENDERS x its fastest: a spell, maybe, not the variant
        doubt = (change and self._decided and self._confirm is None
                 and self._time(self.best) > CONTENDERS * self._fastest_times[self.best])
        self._confirm = fastest if doubt else None
        if not self._decided or change:
            self._pacing.restart()  # a first decision, a change or a doubt: re-check soon
        if change and not doubt:
            self.best = fastest
        self._decided, self.restored = True, False
        # A variant a re-check left out keeps its time from before.
        self._decided_times = [self._time(i) if self._samples[i] or not self._decided_times
                                else self._decided_times[i] for i in range(len(self.names))]
        self._fastest_times = list(map(min, self._fastest_times, self._decided_times))
        self._schedule_recheck()
        if self._key is not None:
            decisions.remember(self._key, self.names, self.best, self._decided_times)

    def _ahead_twice(self, variant: int) -> bool:
        """Whether ``variant`` leads the choice now and led it at the last decision too
        (a lead under MARGIN that two measurements agree on), where variant 0 is only a
        guess or ``variant`` is the preferred variant 0 itself."""
        times, best = self._decided_times, self.best
        return ((not self._incumbent or variant == 0) and variant != best
                and times[variant] < times[best] and self._time(variant) < self._time(best))

    def _schedule_recheck(self) -> None:
        """Prices the next re-check for its pacing, by the last decision's times: the
        time it takes beyond calls of the choice. That time: each variant it times, less
        the choice, RUN calls of it (GLANCE where far behind; where calls are long,
        SAMPLES of each close variant and one of each other); where it times variants of
        several engines, the choice's SPIN_SECONDS (lead-ins wait for its threads), after
        the first re-check the longest among them (see cpu_fallback.pacing)."""
        times = self._decided_times
        best = times[self.best]
        recheck = self._pacing.rechecks + 1
        timed = self._timed_next(recheck)
        extra = 0.0
        for variant in timed:
            seconds = times[variant]
            if variant == self.best or not best < seconds < float("inf"):
                continue
            if not self._long:
                extra += (GLANCE if self._glance_only(variant, recheck) else RUN) * (
                    seconds - best)
            else:
                extra += (SAMPLES if self._close(variant) else 1) * (seconds - best)
        engines = {self.engines[v] for v in timed}
        if len(engines) > 1 and not self._long:
            extra += (SPIN_SECONDS[self.engines[self.best]] if self._pacing.rechecks == 0
                      else max(SPIN_SECONDS[engine] for engine in engines))
        self._pacing.schedule(extra, best)

    def describe(self) -> str:
        """What was measured and kept, for a plan's reason (see choice_reason)."""
        with self._lock:
            if not self._decided:
                return choice_reason.measuring(len(self.names),
                                               sum(len(s) for s in self._samples), SAMPLES)
            since = "the first" if self._pacing.rechecks == 0 else "the last"
            return choice_reason.measured(
                self.names, self.best, self._decided_times, restored=self.restored,
                long=self._long, incumbent=self._incumbent, samples=SAMPLES, margin=MARGIN,
                contenders=CONTENDERS, wait=self._pacing.wait, confirm=self._confirm,
                rechecking=bool(self._queue),
                pending_since=since if self._pacing.pending() and not self._queue else None)
