"""The benchmark runner's rounds: cases grouped, their timed runs interleaved."""

from __future__ import annotations

import io
import time
import weakref

import numpy as np
import pytest

from gpu_tc.bench import memory, peers, report, rounds, runner, suites
from gpu_tc.bench.checkpoint import Checkpoint
from gpu_tc.bench.peers import PEERS, Peer, Runner
from gpu_tc.bench.progress import Progress
from gpu_tc.bench.settings import Settings

FAST = Settings(quick=True, repeat=3, min_run_time=0.0, settle=0.0)
SPELL = 0.05  # seconds a call slows in a spell


def _quick(*ids: int) -> list[suites.Case]:
    return [c for c in suites.cases("tccg", "float64", quick=True) if c.id in ids]


def test_case_footprint_counts_operands_and_outputs():
    [case] = _quick(12)  # "ca,bc->ba"
    a, b, c = (case.sizes[x] for x in "abc")
    assert case.expr == "ca,bc->ba"
    assert case.footprint() == 8 * (c * a + b * c + b * a)
    assert case.footprint(3) == sum(x.nbytes for x in case.operands()) + 3 * 8 * b * a


def test_groups_hold_at_most_so_many_cases_and_bytes(monkeypatch):
    cases = suites.cases("tccg", "float64", quick=True)
    assert [len(g) for g in rounds.groups(cases, 5)] == [12, 12, 12, 12]
    sizes = [c.footprint(2) for c in cases[:5]]
    # A budget that the first two fit in but not the first three: a new group at the third.
    monkeypatch.setattr(rounds, "GROUP_BYTES", sizes[0] + sizes[1])
    monkeypatch.setattr(rounds, "GROUP_CASES", 3)
    found = list(rounds.groups(cases[:5], 2))
    assert [c.id for c in found[0]] == [1, 2]
    assert [c for g in found for c in g] == cases[:5]  # every case once, in order
    for group in found:
        assert len(group) <= 3
        assert len(group) == 1 or sum(c.footprint(2) for c in group) <= sizes[0] + sizes[1]
    assert [len(g) for g in rounds.groups(cases[:2], 3)] == [1, 1]  # an output more: apart
    # A case above the budget on its own still runs, alone.
    monkeypatch.setattr(rounds, "GROUP_BYTES", 1)
    assert [len(g) for g in rounds.groups(cases[:3], 2)] == [1, 1, 1]
    assert rounds.limits() == {"cases": 3, "bytes": 1}


def test_report_and_checkpoint_key_name_the_group_limits():
    plan = runner.SuitePlan("tccg", "float64", _quick(12), [PEERS["numpy"]])
    assert runner.checkpoint_key(plan, FAST)["groups"] == {"cases": 12, "bytes": 1 << 30}
    doc = runner.run(plan, FAST, _Steps())
    assert doc["groups"] == rounds.limits()
    assert "Timed runs: 3 per implementation, in rounds over groups of up to 12 cases and " \
        "1024 MiB." in report.markdown(doc)


class _Steps(Progress):
    """A silent Progress that keeps the label of every step, in order."""

    def __init__(self) -> None:
        super().__init__(0, io.StringIO(), bar=False)
        self.labels: list[str] = []

    def start(self, label: str) -> None:
        self.labels.append(label)


def _recorder(log: list[int]) -> Peer:
    def build(case, ops):
        def call():
            log.append(case.id)
            return np.einsum(case.expr, *ops)

        return Runner(call)

    return Peer("spy", "records its calls", "cpu", "numpy", peers.ALL_KINDS, build)


def test_timed_runs_interleave_over_the_groups_cases():
    """Every case warms up first; then run r of every case comes before run r+1 of any."""
    log: list[int] = []
    plan = runner.SuitePlan("tccg", "float64", _quick(1, 2, 12), [_recorder(log)])
    steps = _Steps()
    doc = runner.run(plan, FAST, steps)
    warm = [f"tccg float64 #{i} spy warm-up" for i in (1, 2, 12)]
    timed = [f"tccg float64 #{i} spy run {r}" for r in (1, 2, 3) for i in (1, 2, 12)]
    assert [label for label in steps.labels if " spy " in label] == warm + timed
    # The calls follow the same order: the last of each case's calls are its third run.
    last = {case: max(i for i, c in enumerate(log) if c == case) for case in (1, 2, 12)}
    assert last[1] < last[2] < last[12]
    assert [c["id"] for c in doc["cases"]] == [1, 2, 12]
    for case in doc["cases"]:
        assert len(case["results"]["spy"]["samples"]) == FAST.repeat
        assert len(case["results"]["gpu_tc"]["samples"]) == FAST.repeat


def test_a_slow_spell_lands_on_one_run_of_each_case_it_meets():
    """Two consecutive timed runs made slow (a spell of the host) move no case's median:
    back to back they would have been two of one case's three."""
    steps = _Steps()
    timed: list[str] = []

    def build(case, ops):
        result = np.einsum(case.expr, *ops, optimize=True)  # each call then takes no time

        def call():
            label = steps.labels[-1]
            if " run " in label:
                if not timed or timed[-1] != label:
                    timed.append(label)
                if len(timed) in (2, 3):
                    time.sleep(SPELL)
            return result

        return Runner(call)

    spelled = Peer("spelled", "slow in a spell", "cpu", "numpy", peers.ALL_KINDS, build)
    plan = runner.SuitePlan("tccg", "float64", _quick(1, 2, 12), [spelled])
    doc = runner.run(plan, FAST, steps)
    assert len(timed) == 9
    for case in doc["cases"]:
        samples = case["results"]["spelled"]["samples"]
        assert sum(s >= SPELL for s in samples) <= 1, (case["id"], samples)
        assert case["results"]["spelled"]["seconds"] < SPELL


def test_resume_keeps_suite_order_when_a_later_case_was_done(tmp_path):
    log: list[int] = []
    spy = _recorder(log)
    full = runner.SuitePlan("tccg", "float64", _quick(1, 12), [spy])
    later = runner.SuitePlan("tccg", "float64", _quick(12), [spy])
    key = runner.checkpoint_key(full, FAST)
    path = tmp_path / "cpu-tccg-float64.partial.json"
    quiet = io.StringIO()
    first = runner.run(later, FAST, Progress(1, quiet, bar=False), Checkpoint(path, key))
    assert set(log) == {12}
    log.clear()
    resumed = runner.run(full, FAST, Progress(1, quiet, bar=False), Checkpoint(path, key),
                         resume=True)
    assert set(log) == {1}  # case 12 came from the checkpoint
    assert [c["id"] for c in resumed["cases"]] == [1, 12]
    assert resumed["cases"][1]["results"] == first["cases"][0]["results"]


def test_a_failing_run_is_that_implementations_error_only():
    steps = _Steps()

    def build(case, ops):
        def call():
            if steps.labels[-1].endswith("flaky run 2"):
                raise MemoryError("out of memory")
            return np.einsum(case.expr, *ops)

        return Runner(call)

    flaky = Peer("flaky", "fails in its second run", "cpu", "numpy", peers.ALL_KINDS, build)
    plan = runner.SuitePlan("tccg", "float64", _quick(1, 12), [PEERS["numpy"], flaky])
    doc = runner.run(plan, FAST, steps)
    for case in doc["cases"]:
        results = case["results"]
        assert results["flaky"]["error"] == "MemoryError: out of memory"
        assert "samples" not in results["flaky"]
        assert results["numpy"]["error"] is None and len(results["numpy"]["samples"]) == 3
    assert [e["implementation"] for e in doc["summary"]["errors"]] == ["flaky", "flaky"]


def test_memory_probes_come_after_the_groups_timings_with_its_operands_freed(monkeypatch):
    alive: list[weakref.ref] = []
    events: list[str] = []
    steps = _Steps()

    def build(case, ops):
        alive.append(weakref.ref(ops[0]))

        def call():
            events.append(steps.labels[-1])
            return np.einsum(case.expr, *ops)

        return Runner(call)

    def measure(case, name, backend, timeout=memory.PROBE_TIMEOUT):
        assert all(ref() is None for ref in alive), "a probe beside the group's operands"
        events.append(f"probe #{case.id} {name}")
        return memory.Footprint.missing("not measured: a test double")

    monkeypatch.setattr(memory, "unavailable", lambda backend: None)
    monkeypatch.setattr(memory, "measure", measure)
    spy = Peer("spy", "records its calls", "cpu", "numpy", peers.ALL_KINDS, build)
    plan = runner.SuitePlan("tccg", "float64", _quick(1, 12), [spy])
    settings = Settings(quick=True, repeat=2, min_run_time=0.0, settle=0.0, memory=True)
    doc = runner.run(plan, settings, steps)
    probes = [i for i, event in enumerate(events) if event.startswith("probe")]
    assert [events[i] for i in probes] == [
        "probe #1 gpu_tc", "probe #1 spy", "probe #12 gpu_tc", "probe #12 spy"]
    assert probes[0] > max(i for i, e in enumerate(events) if e.endswith("spy run 2"))
    assert len(alive) == 2 and all(ref() is None for ref in alive)
    for case in doc["cases"]:
        assert case["memory"]["spy"]["reason"] == "not measured: a test double"


def test_the_checkpoint_is_saved_after_each_group(monkeypatch, tmp_path):
    def build(case, ops):
        if case.id == 12:
            raise KeyboardInterrupt  # the run stopped in the second group's warm-up
        return Runner(lambda: np.einsum(case.expr, *ops))

    monkeypatch.setattr(rounds, "GROUP_CASES", 1)
    stopping = Peer("stopping", "stops at case 12", "cpu", "numpy", peers.ALL_KINDS, build)
    plan = runner.SuitePlan("tccg", "float64", _quick(1, 12), [stopping])
    key = runner.checkpoint_key(plan, FAST)
    path = tmp_path / "cpu-tccg-float64.partial.json"
    with pytest.raises(KeyboardInterrupt):
        runner.run(plan, FAST, _Steps(), Checkpoint(path, key))
    assert list(Checkpoint(path, key).load()) == [1]
    other = dict(key, groups={"cases": 12, "bytes": 1 << 30})  # another grouping: not resumed
    assert Checkpoint(path, other).load() == {}
