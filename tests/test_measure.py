"""Routes chosen by timing real calls (cpu_fallback.measure): warm-ups, enough samples,
a margin before leaving a preferred default or a choice made, re-checks that undo a
choice one disturbed call made; and the competing GEMM lowerings the CPU backend
measures, every result right."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gpu_tc
from cpu_fallback import measure, pacing
from cpu_fallback.measure import CONTENDERS, GLANCE, MARGIN, RUN, SAMPLES, SPIN_SECONDS, Choice
from cpu_fallback.measured_plan import MeasuredPlan, engines
from cpu_fallback.pacing import RECHECK_FIRST, RECHECK_GROWTH, RECHECK_SHARE
from gpu_tc import reference
from gpu_tc.backend import Scalars
from gpu_tc.gemm import lower, policies

# The hand-computed waits below assume these.
assert (SAMPLES, RUN, GLANCE, RECHECK_SHARE, RECHECK_FIRST, RECHECK_GROWTH) == (
    3, 4, 2, 0.05, 16, 8)
# Calls of one measurement of two variants: each a lead-in, then timed SAMPLES times.
TWO = 2 * RUN


@pytest.fixture(autouse=True)
def _short_calls(monkeypatch):
    """The hand-made seconds below stay short calls unless a test makes them long."""
    monkeypatch.setattr(measure, "LONG_SECONDS", float("inf"))
    # the calls below are counted, not timed: the first re-check waits for calls only
    # (test_the_first_recheck_waits_a_second_from_the_first_decision sets the clock)
    monkeypatch.setattr(pacing, "FIRST_RECHECK_SECONDS", 0.0)


def _drive(choice: Choice, seconds, calls: int, log: list[int] | None = None) -> None:
    """``calls`` calls; variant v takes ``seconds(v, call number)``."""
    for number in range(calls):
        variant, timed = choice.next()
        if log is not None:
            log.append(variant)
        choice.record(variant, seconds(variant, number), timed)


def test_each_variant_in_turn_is_led_in_then_timed_samples_times():
    choice, log, timed = Choice(["a", "b", "c"]), [], []
    for _ in range(3 * RUN + 2):
        variant, is_timed = choice.next()
        log.append(variant)
        timed.append(is_timed)
        choice.record(variant, [3.0, 1.0, 2.0][variant], is_timed)
    assert log[: 3 * RUN] == [0] * RUN + [1] * RUN + [2] * RUN
    assert timed[: 3 * RUN] == ([False] + [True] * SAMPLES) * 3
    assert log[3 * RUN:] == [1, 1] and choice.best == 1 and choice.settled
    assert "measured: b kept (a 3e+03 ms, b 1e+03 ms, c 2e+03 ms" in choice.describe()


def test_the_default_stays_unless_another_is_faster_by_the_margin():
    near = Choice(["rule", "other"])
    _drive(near, lambda v, n: [1.0, 1.0 - MARGIN / 2][v], TWO)
    assert near.best == 0
    far = Choice(["rule", "other"])
    _drive(far, lambda v, n: [1.0, 1.0 - 2 * MARGIN][v], TWO)
    assert far.best == 1


def _until_rechecked(choice: Choice, seconds, rechecks: int) -> None:
    """Calls (``seconds`` as _drive's) until ``rechecks`` re-checks have been decided."""
    for _ in range(100_000):
        if choice._pacing.rechecks >= rechecks and choice.settled:
            return
        _drive(choice, seconds, 1)
    raise AssertionError(f"{rechecks} re-checks not reached")


def test_where_the_default_is_a_guess_the_first_measurement_keeps_the_fastest():
    """incumbent=False (a contraction's lowerings): 5% faster is enough the first time;
    a re-check then needs the margin to go back, or a lead that the re-check after it
    sees too (two measurements running)."""
    guess = Choice(["rule", "other"], incumbent=False)
    _drive(guess, lambda v, n: [1.0, 1.0 - MARGIN / 2][v], TWO)
    assert guess.best == 1
    assert ("10% margin for a change after the first measurement, or a lead in two "
            "measurements running" in guess.describe())
    # A re-check sees the rule 5% faster: not enough to change back at once ...
    closer = lambda v, n: [1.0 - MARGIN, 1.0 - MARGIN / 2][v]  # noqa: E731
    _until_rechecked(guess, closer, 1)
    assert guess._decided_times == [1.0 - MARGIN, 1.0 - MARGIN / 2]  # a re-check ran
    assert guess.best == 1
    # ... the next re-check sees it faster again: the lead holds, the rule is back.
    _until_rechecked(guess, closer, 2)
    assert guess.best == 0
    # A lead that the next measurement does not repeat changes nothing.
    _until_rechecked(guess, lambda v, n: [1.0, 1.0 - MARGIN / 2][v], 3)
    assert guess.best == 0
    _until_rechecked(guess, lambda v, n: [1.0 - MARGIN / 2, 1.0][v], 4)
    assert guess.best == 0
    _drive(guess, lambda v, n: [1.0, 0.5][v], 200_000)
    assert guess.best == 1


def test_a_preferred_default_keeps_its_margin_at_every_recheck():
    """incumbent=True (a reduction's own sums): a rival faster under the margin in
    every measurement still does not take over; once a disturbed measurement has taken
    the choice away from the default, a lead of the default's under the margin at two
    re-checks running brings it back."""
    preferred = Choice(["own", "other"])
    near = lambda v, n: [1.0, 1.0 - MARGIN / 2][v]  # noqa: E731
    _until_rechecked(preferred, near, 3)
    assert preferred.best == 0 and preferred._decided_times == [1.0, 1.0 - MARGIN / 2]
    left = Choice(["own", "other"])
    _drive(left, lambda v, n: [2.0, 1.0][v], TWO)  # a load slowed "own": it is left
    assert left.best == 1
    back = lambda v, n: [1.0 - MARGIN / 2, 1.0][v]  # noqa: E731
    _until_rechecked(left, back, 1)
    assert left.best == 1  # one lead under the margin: not yet
    _until_rechecked(left, back, 2)
    assert left.best == 0


def test_contraction_plans_measure_without_an_incumbent(rng, without_mkl):
    """The backend's measured contraction (and a new result's orientation trial) take
    the fastest at the first measurement; a reduction's keeps its preferred sums."""
    subscripts, sizes = HALF_TCCG_3
    terms = subscripts.split("->")[0].split(",")
    a, b = (rng.standard_normal([sizes[x] for x in t]) for t in terms)
    out = np.empty([sizes[x] for x in subscripts.split("->")[1]])
    into = gpu_tc.prepare(subscripts, a, b, out=out)  # no orientation: a MeasuredPlan
    fresh = gpu_tc.prepare(subscripts, a, b)  # an orientation trial
    _until_measured(into, lambda: into.execute(a, b, out=out))
    _until_measured(fresh, lambda: fresh.execute(a, b))
    for plan in (into, fresh):
        assert "margin for a change after the first measurement" in plan.reason
    x = rng.standard_normal((2048, 2048))
    total = gpu_tc.prepare("ab->", x)
    _until_measured(total, lambda: total.execute(x))
    assert "10% margin for a change;" in total.reason


def _until_measured(plan, call, most: int = 400) -> None:
    """``call()`` until ``plan``'s reason no longer says it is measuring (at most
    ``most`` calls)."""
    for _ in range(most):
        if "measuring" not in plan.reason:
            return
        call()


def test_one_disturbed_call_cannot_pin_the_slow_variant():
    """A variant's time is its median timed call: one disturbed call does not count,
    nor one lucky call of a variant whose calls vary by themselves; a choice made
    under a long disturbance is undone at the first re-check, which times every
    variant."""
    choice = Choice(["fast", "slow"])
    disturbed_calls = (1,)  # one of the timed calls of "fast" takes 10x as long

    def seconds(variant: int, number: int) -> float:
        return 10.0 if variant == 0 and number in disturbed_calls else [1.0, 2.0][variant]

    _drive(choice, seconds, TWO)
    assert choice.best == 0
    assert "fast 1e+03 ms, slow 2e+03 ms; the median of the last 3" in choice.describe()
    # The incumbent at 1 s against a variant fast in one call of three (0.5 s, else 3 s).
    lucky = Choice(["steady", "erratic"])
    _drive(lucky, lambda v, n: 1.0 if v == 0 else 0.5 if n == RUN + 1 else 3.0, TWO)
    assert lucky.best == 0 and "erratic 3e+03 ms" in lucky.describe()
    disturbed = Choice(["fast", "slow"])
    during = TWO
    _drive(disturbed, lambda v, n: [5.0, 2.0][v] if n < during else [1.0, 2.0][v], during)
    assert disturbed.best == 1  # the load made "fast" look slow
    # "fast" was never within CONTENDERS x the choice: the re-check glances at it (a
    # lead-in, one timed call) at 5 s less 2 s each, 6 s, 5% of 60 calls of 2 s; its call
    # comes within CONTENDERS x, so it gets the rest of a run (a lead-in, 2 timed calls).
    log: list[int] = []
    _drive(disturbed, lambda v, n: [1.0, 2.0][v], 60, log)
    assert disturbed.best == 1 and log == [1] * 60
    _drive(disturbed, lambda v, n: [1.0, 2.0][v], GLANCE + RUN + SAMPLES, log)
    assert log[60:] == [0] * GLANCE + [1] * RUN + [0] * SAMPLES
    assert disturbed.best == 0 and disturbed.settled  # the first re-check saw the truth


def test_rechecks_time_all_then_the_close_variants_at_growing_intervals():
    """The first re-check times every variant, the second only the choice and those
    within CONTENDERS x its time, the third all again, ..."""
    choice, log = Choice(["a", "b"]), []
    _drive(choice, lambda v, n: [1.0, 2.0][v], TWO)
    # The first re-check glances at "b" (2x "a": never within CONTENDERS x), 2 x (2 s -
    # 1 s), 5% of 40 calls of 1 s: after 40 calls, not 16. The second times "a" alone,
    # after the 16 x 8 calls that come first; the third both again, after 16 x 8 x 8.
    assert "re-checked after 40 calls" in choice.describe()
    first = 40  # the call that starts the first re-check
    both = RUN + GLANCE  # the calls of a re-check of both: "b" glanced at
    second = first + both + RECHECK_FIRST * RECHECK_GROWTH
    third = second + RUN + RECHECK_FIRST * RECHECK_GROWTH ** 2
    _drive(choice, lambda v, n: [1.0, 2.0][v], second, log)
    assert choice._pacing.rechecks == 1 and choice.settled
    _drive(choice, lambda v, n: [1.0, 2.0][v], RUN, log)
    assert choice._pacing.rechecks == 2 and choice.settled  # "a" alone: RUN calls
    _drive(choice, lambda v, n: [1.0, 2.0][v], third + RUN + 1 - len(log), log)
    # Inside the third re-check ("a" timed afresh, "b" not yet): the decision's times
    assert "a 1e+03 ms, b 2e+03 ms" in choice.describe()
    _drive(choice, lambda v, n: [1.0, 2.0][v], third + both - len(log), log)
    slow = [i for i, v in enumerate(log) if v == 1]
    glance = [RUN + j for j in range(GLANCE)]  # after the run of "a"
    assert slow == [first + g for g in glance] + [third + g for g in glance]
    assert choice._pacing.rechecks == 3 and choice.best == 0 and choice.settled


@pytest.mark.parametrize("later, again, best", [
    (2.0, False, 0),  # still far behind: one timed call
    (1.2, True, 0),  # came close: the rest of a run, but not faster by the margin
    (0.8, True, 1),  # came close and faster: it takes over
])
def test_a_recheck_glances_at_a_variant_far_behind_and_times_it_again_where_it_came_close(
        later, again, best):
    """A re-check times a variant never within CONTENDERS x the choice with a GLANCE (a
    lead-in, one timed call); only where that call comes within CONTENDERS x the choice's
    time now does it get the rest of a run (a lead-in, SAMPLES - 1 timed calls)."""
    choice, log = Choice(["a", "b"]), []
    _drive(choice, lambda v, n: [1.0, 3.0][v], TWO)
    # the glance costs 2 x (3 s - 1 s), 5% of 80 calls of 1 s
    assert choice._pacing.wait == 80
    assert (f"re-checks time those never within {CONTENDERS}x the choice once ({SAMPLES} "
            f"times where that call is)") in choice.describe()
    calls = RUN + GLANCE + (SAMPLES if again else 0)
    _drive(choice, lambda v, n: [1.0, later][v], 80 + calls, log)
    assert log == [0] * (80 + RUN) + [1] * (calls - RUN)
    assert choice._pacing.rechecks == 1 and choice.settled and choice.best == best
    assert choice._decided_times == [1.0, later]


@pytest.mark.parametrize("second_run, others", [(1.0, False), (1.5, True)])
def test_a_close_recheck_that_finds_the_choice_slowed_times_it_again_then_the_others(
        second_run, others):
    """Where a re-check of the close variants only finds the choice over CONTENDERS x
    slower than at the last decision (as the first calls after the host idles run), it
    times the choice again, whose calls cost nothing more; only if it is still that slow
    are the others timed too, a glance each."""
    choice = Choice(["a", "b"])
    steady = lambda v, n: [1.0, 3.0][v]  # noqa: E731
    _drive(choice, steady, TWO)
    _until_rechecked(choice, steady, 1)
    wait, log = choice._pacing.wait, []

    def seconds(variant: int, number: int) -> float:
        woken = not wait <= number < wait + RUN  # the choice's first run is slow
        return 3.0 if variant else second_run if woken else 1.5

    calls = wait + 2 * RUN + (GLANCE if others else 0)
    _drive(choice, seconds, calls, log)
    assert log == [0] * (wait + 2 * RUN) + [1] * (calls - wait - 2 * RUN)
    assert choice._pacing.rechecks == 2 and choice.settled
    assert choice.best == 0 and choice._decided_times == [second_run, 3.0]


def test_a_close_recheck_that_finds_the_choice_slowed_times_every_variant():
    """A re-check of the close variants only times the others too where the choice ran
    more than CONTENDERS x slower than at the last decision: the times the others kept
    from then no longer compare, and one of them takes over."""
    choice = Choice(["a", "b"])
    steady = lambda v, n: [1.0, 2.0][v]  # noqa: E731
    _drive(choice, steady, TWO)
    _until_rechecked(choice, steady, 1)
    assert choice.best == 0 and choice._decided_times == [1.0, 2.0]
    # The second re-check times "a" alone ("b" took 2x): slowed by CONTENDERS x, "b" is
    # left out and keeps its time; slowed by more, "b" is timed too and takes over.
    within = Choice(["a", "b"])
    _drive(within, steady, TWO)
    _until_rechecked(within, steady, 1)
    _until_rechecked(within, lambda v, n: [CONTENDERS, 1.1][v], 2)
    assert within.best == 0 and within._decided_times == [CONTENDERS, 2.0]
    _until_rechecked(choice, lambda v, n: [3.0, 2.0][v], 2)
    assert choice._decided_times == [3.0, 2.0]
    # "a" ran 3x its fastest: the change waits for the next re-check to confirm it
    assert choice.best == 0 and "to confirm b is faster" in choice.describe()
    _until_rechecked(choice, lambda v, n: [3.0, 2.0][v], 3)
    assert choice.best == 1


def test_a_change_from_a_choice_far_slower_than_at_its_fastest_waits_to_be_confirmed():
    """A re-check that finds the choice over CONTENDERS x slower than at its fastest (a
    spell of the host, maybe) changes nothing yet: the next re-check comes after
    RECHECK_FIRST calls, times the choice and the variant that led, and makes the change
    only if it still leads by the margin."""
    steady = lambda v, n: [1.0, 1.6, 5.0][v]  # noqa: E731
    spell = lambda v, n: [6.0, 1.8, 5.0][v]  # noqa: E731
    for second, kept in ((steady, 0), (spell, 1)):
        choice = Choice(["threaded", "one thread", "slow"])
        _drive(choice, steady, 3 * RUN)
        _until_rechecked(choice, spell, 1)  # the first re-check times all three
        assert choice.best == 0 and choice._decided_times == [6.0, 1.8, 5.0]
        assert "to confirm one thread is faster" in choice.describe()
        assert choice._pacing.wait == RECHECK_FIRST
        log: list[int] = []
        _drive(choice, second, RECHECK_FIRST + 2 * RUN, log)
        assert log == [0] * RECHECK_FIRST + [0] * RUN + [1] * RUN  # not "slow"
        assert choice._pacing.rechecks == 2 and choice.settled and choice.best == kept
        assert "to confirm" not in choice.describe()


def test_a_close_recheck_times_a_variant_that_was_close_before_a_slow_measurement():
    """A variant that a slow spell made look slow, but that came within CONTENDERS x
    the choice at an earlier decision, is timed at the next re-check of the close
    variants only too: the spell does not keep it out until the one after (RECHECK_GROWTH
    x later)."""
    choice = Choice(["threaded", "one thread"])
    steady = lambda v, n: [1.0, 1.6][v]  # noqa: E731
    spell = lambda v, n: [6.0, 1.8][v]  # noqa: E731  # threads lose most
    _drive(choice, steady, TWO)
    assert choice.best == 0
    _until_rechecked(choice, spell, 2)  # doubted at the first, confirmed at the second
    assert choice.best == 1 and choice._decided_times == [6.0, 1.8]
    _until_rechecked(choice, spell, 3)  # every variant: still the spell
    assert choice.best == 1
    _until_rechecked(choice, steady, 4)  # the close variants only: "threaded" among them
    assert choice._decided_times == [1.0, 1.6]
    assert choice.best == 0
    # A variant never within CONTENDERS x stays out of the close re-checks.
    far = Choice(["a", "b"])
    _drive(far, lambda v, n: [1.0, 3.0][v], TWO)
    _until_rechecked(far, lambda v, n: [1.0, 2.0][v], 1)
    _until_rechecked(far, lambda v, n: [1.0, 1.1][v], 2)
    assert far._decided_times == [1.0, 2.0] and far.best == 0


@pytest.mark.parametrize("seconds, first, second", [
    # 4 x 0.05 s: 5% of 4 calls; the least wait rules (16, then 16 x 8)
    ([1.0, 1.05], RECHECK_FIRST, RECHECK_FIRST * RECHECK_GROWTH),
    # far behind, glanced at: 2 x 4 s, 5% of 160; then "v0" alone
    ([1.0, 5.0], 160, RECHECK_FIRST * RECHECK_GROWTH),
    ([3.0, 1.0, 2.0], 120, RECHECK_FIRST * RECHECK_GROWTH),  # 2 x (2 s + 1 s): 5% of 120
    ([1.0, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2], 96, 128),  # all close: 6 x 4 x 0.2 s, 5% of 96
])
def test_a_recheck_waits_until_it_costs_a_small_share_of_the_calls(seconds, first, second):
    choice, log = Choice([f"v{i}" for i in range(len(seconds))]), []
    count = len(seconds)
    best = seconds.index(min(seconds))
    close = [v for v in range(count) if seconds[v] <= CONTENDERS * seconds[best]]
    _drive(choice, lambda v, n: seconds[v], count * RUN)
    assert f"re-checked after {first} calls" in choice.describe()
    calls = [RUN if v in close else GLANCE for v in range(count)]
    _drive(choice, lambda v, n: seconds[v], first + sum(calls), log)
    assert log[:first] == [best] * first
    assert log[first:] == [v for v in range(count) for _ in range(calls[v])]
    assert f"re-checked after {second} calls" in choice.describe()
    log.clear()
    _drive(choice, lambda v, n: seconds[v], second + RUN * len(close), log)
    assert log[:second] == [best] * second
    assert log[second:] == [v for v in close for _ in range(RUN)]


@pytest.mark.parametrize("blas, waits", [
    # close: 4 x 0.1 ms and the choice's 0.01 s of spinning (5% of 208 calls of 1 ms);
    # after the first, BLAS's 0.15 s instead
    (0.0011, [208, 3008, 3008]),
    # far, glanced at: 2 x 2 ms and 0.01 s; the second times "own" alone; the third
    # 2 x 2 ms + 0.15 s
    (0.003, [280, RECHECK_FIRST * RECHECK_GROWTH, 3080]),
])
def test_rechecks_after_the_first_count_the_threads_left_spinning(blas, waits):
    """After a BLAS variant is timed its threads spin for SPIN_SECONDS, and the choice's
    calls run beside them: a re-check that times one, after the first (which comes soon,
    to undo a disturbed first measurement), costs that much more."""
    choice = Choice(["own", "blas"], engines=["openmp", "blas"])
    seconds = [0.001, blas]
    _drive(choice, lambda v, n: seconds[v], TWO)
    assert choice.best == 0
    for number, wait in enumerate(waits, start=1):
        assert f"re-checked after {wait} calls" in choice.describe()
        far = blas > CONTENDERS * seconds[0]
        timed = [0] if number == 2 and far else [0, 1]
        calls = [RUN, GLANCE if far else RUN]
        log: list[int] = []
        _drive(choice, lambda v, n: seconds[v], wait + sum(calls[v] for v in timed), log)
        assert log == [0] * wait + [v for v in timed for _ in range(calls[v])]
        assert choice._pacing.rechecks == number and choice.settled


def test_the_variants_of_the_longest_spinning_engine_are_timed_last():
    choice, log = Choice(["b1", "o1", "b2", "o2"], engines=["blas", "openmp"] * 2), []
    _drive(choice, lambda v, n: 1.0, 4 * RUN, log)
    assert log == [1] * RUN + [3] * RUN + [0] * RUN + [2] * RUN


def test_the_first_recheck_waits_a_second_from_the_first_decision(monkeypatch):
    """A slow spell of the host (two threads' work at one thread's speed, for seconds)
    can cover the first measurement and the calls after it: the first re-check comes
    after its calls and FIRST_RECHECK_SECONDS, whichever is later, and the reason says
    it is pending until then; so does the first after a re-check that changed the
    choice; the others wait for calls only."""
    monkeypatch.setattr(pacing, "FIRST_RECHECK_SECONDS", 1.0)
    now = [100.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: now[0])
    choice = Choice(["threaded", "one thread"], incumbent=False)
    # in the spell both take 1 s; after it the threaded one takes 0.5 s
    spell = [True]

    def seconds(variant: int, number: int) -> float:
        return [1.0, 0.95][variant] if spell[0] else [0.5, 0.95][variant]

    _drive(choice, seconds, TWO)
    assert choice.best == 1 and ": pending" in choice.describe()
    log: list[int] = []
    _drive(choice, seconds, 3 * RECHECK_FIRST, log)  # calls enough, no time passed
    assert log == [1] * (3 * RECHECK_FIRST) and choice._pacing.rechecks == 0
    now[0] += 1.0
    spell[0] = False
    variant, timed = choice.next()  # now it comes: every variant timed afresh
    assert choice._pacing.rechecks == 1 and not timed
    assert ": re-checking now" in choice.describe()
    choice.record(variant, seconds(variant, 0), timed)
    _drive(choice, seconds, TWO - 1)
    assert choice.best == 0 and choice.settled
    # It changed the choice: the next waits a second too, after RECHECK_FIRST calls (it
    # times "threaded" alone: "one thread" was never within CONTENDERS x its 0.5 s).
    assert ", not before 1 s from the last decision: pending" in choice.describe()
    assert choice._pacing.wait == RECHECK_FIRST
    log.clear()
    _drive(choice, seconds, 3 * RECHECK_FIRST, log)
    assert log == [0] * (3 * RECHECK_FIRST) and choice._pacing.rechecks == 1
    now[0] += 1.0
    _drive(choice, seconds, RUN + 1)
    assert choice._pacing.rechecks == 2 and choice.best == 0 and choice.settled
    # It changed nothing: the next waits for its calls only, RECHECK_GROWTH x more.
    described = choice.describe()
    assert "pending" not in described and "re-checking now" not in described
    waits = choice._pacing.wait
    assert waits == RECHECK_FIRST * RECHECK_GROWTH
    log.clear()
    _drive(choice, seconds, waits + 1, log)  # no clock needed
    assert choice._pacing.rechecks == 3 and log[:waits] == [0] * waits


def test_timed_calls_wait_while_another_variants_threads_spin(monkeypatch):
    """After a call of a BLAS variant its threads spin for SPIN_SECONDS["blas"]: the
    next variant's lead-in goes on (untimed calls) until then, never longer than the
    longest spin; a variant of the same engine, or a choice of one engine, does not
    wait, nor does any choice for threads that another choice's calls left spinning."""
    now = [100.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: now[0])
    choice = Choice(["o", "b"], engines=["openmp", "blas"])
    choice.spinning.left("blas", now[0] - SPIN_SECONDS["blas"] + 0.1)  # its BLAS call
    assert choice.next() == (0, False)  # the lead-in
    assert [choice.next() for _ in range(3)] == [(0, False)] * 3  # still spinning
    now[0] += 0.1
    assert choice.next() == (0, True)  # the threads sleep: timed
    choice.spinning.left("blas", now[0] + 10.0)
    assert choice.next() == (0, False)
    now[0] += SPIN_SECONDS["blas"]
    assert choice.next() == (0, True)  # waited the longest spin: timed as they leave it
    other = Choice(["o", "b"], engines=["openmp", "blas"])
    choice.spinning.left("blas", now[0])  # (or a chain's other step, or the caller)
    other.next()
    assert other.next() == (0, True)
    one_engine = Choice(["o1", "o2"])
    one_engine.spinning.left("openmp", now[0])
    one_engine.next()
    assert one_engine.next() == (0, True)


LONG = {"blas": 2.0, "slow": 4.0, "close": 2.1, "slower": 5.0}


@pytest.mark.parametrize("close", [2.1, 3.0], ids=["two-contenders", "one-contender"])
def test_long_calls_time_each_variant_once_and_only_contenders_again(monkeypatch, close):
    """Calls of seconds: no lead-ins; the slow variants cost one call each, and only
    the variants within CONTENDERS x the fastest are timed SAMPLES times."""
    monkeypatch.setattr(measure, "LONG_SECONDS", 1.0)
    times = dict(LONG, close=close)
    names = list(times)
    choice, log, timed = Choice(names), [], []
    for _ in range(40):
        variant, is_timed = choice.next()
        log.append(names[variant])
        timed.append(is_timed)
        choice.record(variant, times[names[variant]], is_timed)
        if choice.settled:
            break
    # The first call (a lead-in) shows the calls are long; then one timed call each,
    # the current choice first.
    assert log[:5] == ["blas", "blas", "slow", "close", "slower"] and all(timed[1:])
    contenders = ["blas", "close"] if close < CONTENDERS * 2.0 else ["blas"]
    extra = log[5:]
    assert sorted(set(extra)) == (contenders if len(contenders) > 1 else [])
    assert all(extra.count(n) == SAMPLES - 1 for n in set(extra))
    assert log.count("slow") == 1 and log.count("slower") == 1
    assert choice.settled and choice.best == 0
    assert "one where a call took 1.25x the fastest" in choice.describe()


def test_a_long_lead_in_alone_keeps_the_measurement_short(monkeypatch):
    """A plan's first call (page faults, threads started) may take long where its
    variants do not: only a timed call makes the measurement long."""
    monkeypatch.setattr(measure, "LONG_SECONDS", 1.0)
    choice, log = Choice(["a", "b"]), []
    _drive(choice, lambda v, n: 5.0 if n == 0 else [0.2, 0.1][v], TWO, log)
    assert log == [0] * RUN + [1] * RUN and choice.settled and choice.best == 1


def _until_settled(choice: Choice, seconds, most: int = 50) -> list[tuple[int, bool]]:
    """Calls (variant v taking ``seconds[v]``) until ``choice`` is settled again."""
    calls = []
    for _ in range(most):
        variant, is_timed = choice.next()
        calls.append((variant, is_timed))
        choice.record(variant, seconds[variant], is_timed)
        if choice.settled:
            return calls
    raise AssertionError(f"not settled after {most} calls: {calls}")


def test_long_rechecks_time_the_close_variants_without_holds(monkeypatch):
    monkeypatch.setattr(measure, "LONG_SECONDS", 1.0)
    choice = Choice(["blas", "own"], engines=["blas", "openmp"])
    seconds = {0: 2.0, 1: 2.4}  # 'own' within CONTENDERS x 'blas'
    _until_settled(choice, seconds)
    assert choice.best == 0
    choice._pacing.wait = 0  # the next call starts a re-check
    choice.spinning.left("blas", float("inf"))  # BLAS's threads spin: no hold when long
    calls = _until_settled(choice, seconds)
    # the choice first, then 'own'; both close: SAMPLES timed calls each, all timed
    assert calls[:2] == [(0, True), (1, True)] and all(timed for _, timed in calls)
    assert sorted(calls) == [(0, True)] * SAMPLES + [(1, True)] * SAMPLES


def test_every_other_long_recheck_times_only_the_variants_close_to_the_choice(monkeypatch):
    """A variant more than CONTENDERS x slower than the choice when last decided
    is left out of the first re-check (each call of it costs seconds more), keeping its
    time, and the first re-check's share of time counts the close variants only; the
    second re-check times it again (a load may have slowed its one timed call)."""
    monkeypatch.setattr(measure, "LONG_SECONDS", 1.0)
    choice = Choice(["blas", "close", "slow"])
    seconds = {0: 2.0, 1: 2.2, 2: 10.0}
    calls = _until_settled(choice, seconds)
    assert [v for v, _ in calls[1:4]] == [0, 1, 2] and [v for v, _ in calls].count(2) == 1
    assert choice.best == 0
    # The re-check's extra: SAMPLES calls of 'close' (0.6 s; 5% of 6 calls), not 'slow'
    # too (8 s more: 86 calls).
    assert choice._pacing.wait == RECHECK_FIRST
    choice._pacing.wait = 0
    seconds[1] = 1.5  # 'close' got faster
    calls = _until_settled(choice, seconds)
    assert 2 not in [v for v, _ in calls] and choice.best == 1
    assert "slow 1e+04 ms" in choice.describe() and "close 1.5e+03 ms" in choice.describe()
    choice._pacing.wait = 0
    seconds[2] = 1.0  # 'slow' was slowed by a load at its one call
    calls = _until_settled(choice, seconds)
    assert 2 in [v for v, _ in calls] and choice.best == 2


def test_a_variant_a_long_recheck_left_out_is_still_picked_among_those_allowed(monkeypatch):
    """Where the choice is not allowed (an `out` in the other layout), the fastest
    allowed variant at the last decision runs, timed in that re-check or not."""
    monkeypatch.setattr(measure, "LONG_SECONDS", 1.0)
    choice = Choice(["best", "slow", "fair"])
    seconds = {0: 2.0, 1: 9.0, 2: 6.0}
    _until_settled(choice, seconds)
    choice._pacing.wait = 0
    calls = _until_settled(choice, seconds)  # the first re-check: 'best' alone is close
    assert {v for v, _ in calls} == {0}
    assert choice.next(allowed=[1, 2]) == (2, False)


def test_engines_must_name_one_known_engine_per_variant():
    with pytest.raises(ValueError, match="engines"):
        Choice(["a", "b"], engines=["blas"])
    with pytest.raises(ValueError, match="engines"):
        Choice(["a", "b"], engines=["blas", "mkl"])


def test_allowed_restricts_the_variants_run():
    choice = Choice(["a", "b", "c"])
    picked = [choice.next(allowed=[2])[0] for _ in range(5)]
    assert picked == [2] * 5
    assert choice.peek(allowed=[1]) == 1


def test_concurrent_calls_share_the_measurement():
    choice = Choice(["a", "b"])
    errors: list[Exception] = []

    def worker() -> None:
        try:
            _drive(choice, lambda v, n: [1.0, 2.0][v], 50)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and choice.settled and choice.best == 0


class _Plan:
    temporary_bytes = 0

    def __init__(self, route: str, seconds: float, clock: list[float]) -> None:
        self.route, self.reason = route, f"{route} because"
        self.seconds, self.clock = seconds, clock
        self.calls = 0

    def execute(self, inputs, out, scalars, addend):
        self.calls += 1
        self.clock[0] += self.seconds


def test_measured_plan_reports_the_chosen_route_and_the_timings(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    slow, fast = _Plan("blas:packed", 0.004, clock), _Plan("blas:batched", 0.001, clock)
    plan = MeasuredPlan([slow, fast])
    assert plan.route == "blas:packed" and "measuring 2 variants" in plan.reason
    for _ in range(TWO + 5):
        plan.execute((), None, Scalars(), None)
    assert plan.route == "blas:batched"
    assert plan.reason.startswith("blas:batched because; measured: blas:batched kept")
    assert "blas:packed 4 ms, blas:batched 1 ms" in plan.reason
    assert fast.calls == RUN + 5 and slow.calls == RUN


def test_a_measured_plan_times_its_own_kernels_first_and_marks_blas_spinning(monkeypatch):
    """The small-K variant (gpu_tc's OpenMP kernel) is timed before the BLAS one; each
    call marks its engine's threads spinning from its end, for that engine's time."""
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    blas, own = _Plan("blas:packed", 0.004, clock), _Plan("small-k:gathered", 0.001, clock)
    plan = MeasuredPlan([blas, own])
    assert plan.choice.engines == ("blas", "openmp")
    plan.execute((), None, Scalars(), None)
    assert (own.calls, blas.calls) == (1, 0)
    assert plan.choice.spinning.until == {"openmp": 0.001 + SPIN_SECONDS["openmp"]}
    for _ in range(RUN):
        plan.execute((), None, Scalars(), None)
    assert blas.calls == 1
    assert plan.choice.spinning.until["blas"] == clock[0] + SPIN_SECONDS["blas"]


def test_a_chain_s_steps_do_not_hold_each_other_s_timed_calls(monkeypatch):
    """Two measured steps of one chain, each with a BLAS and an OpenMP variant, called in
    turn: every call of either step leaves some threads spinning, which is how the
    other step runs. Each waits only after a switch between its own variants, and both
    settle in a few calls (holding for each other's threads, every timed OpenMP call
    waited a BLAS spin: 150 calls of 1 ms each)."""
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    steps = [MeasuredPlan([_Plan("blas:direct", 0.001, clock),
                           _Plan("small-k:direct", 0.0012, clock)]) for _ in range(2)]
    calls = 0
    while not all(step.choice.settled for step in steps):
        for step in steps:
            step.execute((), None, Scalars(), None)
        calls += 1
        assert calls < 40, [step.reason for step in steps]
    for step in steps:
        own, blas = step.plans[1].calls, step.plans[0].calls
        assert own == RUN and RUN <= blas <= RUN + 1 + SPIN_SECONDS["openmp"] / 0.001
        assert step.route == "blas:direct"


class _FreshPlan(_Plan):
    """Writes its value into ``out``; its own fresh call (if ``own``) returns it in a new
    array and counts as a fresh call."""

    def __init__(self, route: str, seconds: float, clock: list[float], value: float,
                 own: bool) -> None:
        super().__init__(route, seconds, clock)
        self.value, self.fresh_calls = value, 0
        self.fresh = self._fresh if own else None

    def execute(self, inputs, out, scalars, addend):
        super().execute(inputs, out, scalars, addend)
        out[...] = self.value

    def _fresh(self, *inputs):
        self.fresh_calls += 1
        self.clock[0] += self.seconds
        return np.full((2, 3), self.value, order="F")  # laid out as D, as fresh calls are


def test_a_measured_plan_s_fresh_call_runs_the_chosen_plan_s_once_settled(monkeypatch):
    """While measured, every call (lead-ins and timed ones) runs a variant into a new
    array laid out as D (here Fortran order: D's strides), timed as execute() would be;
    once settled, the chosen plan's own fresh call runs, still counted towards the
    re-check, and its engine marked spinning."""
    from gpu_tc.problem import TensorSpec

    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    slow = _FreshPlan("blas:packed", 0.004, clock, 1.0, own=False)
    fast = _FreshPlan("small-k:gathered", 0.001, clock, 2.0, own=True)
    d = TensorSpec("ab", (2, 3), (1, 2), "float64")
    plan = MeasuredPlan([slow, fast], d=d)
    results = []
    while not plan.choice.settled and len(results) < 100:
        results.append(plan.fresh())
    assert all(r.shape == (2, 3) and r.strides == (8, 16) for r in results)
    # The fast plan's lead-in (untimed) is its own fresh call, its timed calls execute();
    # the slow one's lead-ins (longer while the fast one's threads spin) execute() too.
    assert (fast.fresh_calls, fast.calls) == (1, SAMPLES) and slow.calls >= RUN
    assert sorted(float(r[0, 0]) for r in results) == [1.0] * slow.calls + [2.0] * RUN
    assert plan.route == "small-k:gathered" and "measured: small-k:gathered kept" in plan.reason
    plan.choice.spinning.until.clear()
    assert np.array_equal(plan.fresh(), np.full((2, 3), 2.0))
    assert fast.fresh_calls == 2 and plan.choice.spinning.until == {
        "openmp": clock[0] + SPIN_SECONDS["openmp"]}
    calls_before = plan.choice._pacing.calls
    plan.fresh()
    assert plan.choice._pacing.calls == calls_before + 1  # towards the re-check


def test_a_measured_plan_has_no_fresh_call_where_no_variant_has_one(monkeypatch):
    from gpu_tc.problem import TensorSpec

    clock = [0.0]
    d = TensorSpec("ab", (2, 3), (3, 1), "float64")
    plans = [_FreshPlan(r, 0.001, clock, 1.0, own=False) for r in ("blas:packed", "x")]
    assert MeasuredPlan(plans, d=d).fresh is None
    assert MeasuredPlan([_FreshPlan("x", 0.001, clock, 1.0, own=True)] * 2).fresh is None


def test_a_large_trace_takes_the_warm_fresh_path_and_is_numpy_s(rng):
    """A 2048^2 trace: its sums are measured (one thread against OpenMP's); every call,
    measured or settled, returns numpy.trace's value as a NumPy scalar."""
    a = rng.standard_normal((2048, 2048))
    plan = gpu_tc.prepare("ii->", a)
    assert plan._plan.fast is not None
    for _ in range(3 * TWO):
        value = gpu_tc.einsum("ii->", a)
        assert isinstance(value, np.float64)
        np.testing.assert_allclose(value, np.trace(a), rtol=1e-13)
    assert "measur" in gpu_tc.prepare("ii->", a).reason


HALF_TCCG_3 = ("aebd,ce->dcba", {"a": 36, "b": 36, "c": 12, "d": 36, "e": 36})


def test_competing_lowerings_are_measured_and_every_result_is_right(rng):
    """TCCG case 3 at half extents: packing A and looping over 'a' compete (the rule
    packs, below its loop threshold), and the packed GEMM by BLAS or by the small-K
    kernel (K = 36), and the small-K kernel on the operands where they lie; all run
    while measured, each result exact."""
    subscripts, sizes = HALF_TCCG_3
    terms = subscripts.split("->")[0].split(",")
    a, b = (rng.standard_normal([sizes[x] for x in t]) for t in terms)
    expected = reference.einsum(subscripts, a, b)
    plan = gpu_tc.prepare(subscripts, a, b)
    calls = 0  # two orientations x four variants, RUN calls each, and longer lead-ins
    while calls < 8 * RUN or "measuring" in plan.reason and calls < 400:
        np.testing.assert_allclose(plan.execute(a, b), expected, rtol=1e-12, atol=1e-12)
        calls += 1
    assert "GEMM orientation and lowering measured:" in plan.reason
    for variant in ("blas:packed", "blas:batched", "small-k:packed", "small-k:gathered"):
        assert f"preferred {variant}" in plan.reason and f"flipped {variant}" in plan.reason
    problem = plan._plan.program.final
    assert [lower(problem, p).route for p in policies(problem)] == ["packed", "batched"]


@pytest.mark.parametrize("subscripts, shapes", [
    ("ij,jk->ik", [(4, 4), (4, 4)]),       # small: the rule alone
    ("ab,bc->ac", [(300, 300), (300, 300)]),  # complex: one lowering, NumPy's BLAS alone
])
def test_nothing_is_measured_without_competition_or_below_the_size(rng, without_mkl, subscripts,
                                                                   shapes):
    operands = [rng.standard_normal(s).astype(complex) for s in shapes]
    out = np.empty((shapes[0][0], shapes[1][1]), complex)
    plan = gpu_tc.prepare(subscripts, *operands, out=out)
    assert "measur" not in plan.reason


def test_numpys_broadcast_multiply_leaves_no_threads_spinning():
    """Its calls put no hold on the next variant's timed calls; BLAS's do."""
    plans = [_Plan("blas:multiply", 0.001, [0.0]), _Plan("small-k:gathered", 0.001, [0.0]),
             _Plan("blas:packed", 0.001, [0.0])]
    assert engines(plans) == ["numpy", "openmp", "blas"]
    assert measure.SPIN_SECONDS["numpy"] == 0
