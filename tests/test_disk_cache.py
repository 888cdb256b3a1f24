"""The persistent cache (GPU_TC_CACHE_DIR): measured route decisions saved and restored
across processes, files written whole under concurrent writers, corrupt and
foreign-version files ignored with a warning, the cache off with an empty value.

The CPU backend's decisions are real here; cuTENSOR's plan cache files are tested in
tests/test_gpu_plan_cache.py (gpu marker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import platformdirs
import pytest

from cpu_fallback import decisions, measure
from cpu_fallback.measure import SAMPLES, Choice
from cpu_fallback.pacing import RECHECK_FIRST, RECHECK_GROWTH
from gpu_tc import CacheWarning, disk_cache
from gpu_tc.host import blas_variables
from gpu_tc.version import __version__

KEY = "test problem"


@pytest.fixture(autouse=True)
def _short_calls(monkeypatch):
    """The hand-made seconds below count as short calls (see measure.LONG_SECONDS)."""
    monkeypatch.setattr(measure, "LONG_SECONDS", float("inf"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory for this test (conftest turns the cache off elsewhere)."""
    monkeypatch.setenv(disk_cache.ENV, str(tmp_path))
    monkeypatch.setattr(disk_cache, "_warned", set())
    return tmp_path


def _settle(choice: Choice, seconds: list[float]) -> int:
    """Drive ``choice`` until it decides; variant v takes seconds[v]. The timed calls."""
    timed_calls = 0
    while not choice.settled:
        variant, timed = choice.next()
        timed_calls += timed
        choice.record(variant, seconds[variant], timed)
    return timed_calls


def _record_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("cpu-routes/*/*.json") if p.name != "host.json")


def test_a_decision_is_saved_and_a_new_choice_of_the_same_key_starts_from_it(cache):
    first = Choice(["rule", "other"], key=KEY)
    assert _settle(first, [2.0, 1.0]) == 2 * SAMPLES and first.best == 1
    (path,) = _record_files(cache)
    record = json.loads(path.read_text())
    assert record["gpu_tc"] == __version__ and record["value"]["best"] == "other"
    assert record["value"]["median_seconds"] == [2.0, 1.0]

    again = Choice(["rule", "other"], key=KEY)
    assert again.restored and again.settled and again.best == 1
    assert [again.next() for _ in range(5)] == [(1, False)] * 5  # nothing timed
    assert "measured in an earlier process" in again.describe()


def test_a_restored_decision_is_still_rechecked_later_and_a_change_saved(cache):
    _settle(Choice(["rule", "other"], key=KEY), [2.0, 1.0])
    restored = Choice(["rule", "other"], key=KEY)
    calls = RECHECK_FIRST * RECHECK_GROWTH
    for _ in range(calls):
        assert restored.next() == (1, False)
    # The re-check times both again; "rule" has become faster by more than the margin.
    while True:
        variant, timed = restored.next()
        restored.record(variant, [0.5, 1.0][variant], timed)
        if restored.settled:
            break
    assert restored.best == 0 and not restored.restored
    assert Choice(["rule", "other"], key=KEY).best == 0  # the new decision was saved


def test_a_restored_decision_waits_as_its_saved_times_say(cache):
    """The saved times price the re-check: a glance at "rule" (a lead-in, one timed call:
    it was never within CONTENDERS x the choice) at 5 s less 1 s each (8 s) is 5% of 160
    calls of 1 s, more than the 128 a restored choice waits."""
    _settle(Choice(["rule", "other"], key=KEY), [5.0, 1.0])
    restored = Choice(["rule", "other"], key=KEY)
    assert "re-checked after 160 calls" in restored.describe()
    assert [restored.next() for _ in range(160)] == [(1, False)] * 160
    assert restored.next()[0] == 0  # the re-check


@pytest.mark.parametrize("field", ["medians", "seconds"])
def test_a_record_kept_under_an_earlier_rule_is_measured_again(cache, field):
    """Records kept each variant's median ("medians"), then its fastest call
    ("seconds"), before a variant's time was its median again: such a record is not
    restored (and no warning: it is well formed)."""
    _settle(Choice(["rule", "other"], key=KEY), [2.0, 1.0])
    (path,) = _record_files(cache)
    text = path.read_text()
    assert '"median_seconds"' in text
    path.write_text(text.replace('"median_seconds"', f'"{field}"'), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh = Choice(["rule", "other"], key=KEY)
    assert not fresh.restored and not fresh.settled


def test_other_variants_or_another_key_do_not_use_the_record(cache):
    _settle(Choice(["rule", "other"], key=KEY), [2.0, 1.0])
    assert not Choice(["rule", "other", "third"], key=KEY).restored
    assert not Choice(["rule", "other"], key="another problem").restored
    assert not Choice(["rule", "other"]).restored  # no key: nothing kept


@pytest.mark.parametrize("damage, message", [
    (lambda text: text[: len(text) // 2], "is not a gpu_tc record"),
    (lambda text: "\x00\xff garbage", "is not a gpu_tc record"),
    (lambda text: text.replace(f'"gpu_tc": "{__version__}"', '"gpu_tc": "0.0.1"'),
     "was written by gpu_tc 0.0.1"),
    (lambda text: text.replace(f'"format": {disk_cache.FORMAT}', '"format": 99'),
     "(format 99)"),
])
def test_a_corrupt_or_foreign_record_is_ignored_with_a_warning_then_replaced(
        cache, damage, message):
    _settle(Choice(["rule", "other"], key=KEY), [2.0, 1.0])
    (path,) = _record_files(cache)
    path.write_text(damage(path.read_text()), encoding="utf-8", errors="surrogateescape")
    with pytest.warns(CacheWarning, match=message):
        fresh = Choice(["rule", "other"], key=KEY)
    assert not fresh.restored and not fresh.settled  # measured again
    assert _settle(fresh, [1.0, 2.0]) == 2 * SAMPLES and fresh.best == 0
    assert json.loads(path.read_text())["value"]["best"] == "rule"  # replaced whole
    assert disk_cache.stats()["ignored"] >= 1


def test_the_warning_comes_once_per_reason_and_directory(cache):
    for key in ("p1", "p2"):
        _settle(Choice(["a", "b"], key=key), [1.0, 2.0])
    for path in _record_files(cache):
        path.write_text("{", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Choice(["a", "b"], key="p1")
        Choice(["a", "b"], key="p2")
    assert [type(w.message) for w in caught] == [CacheWarning]


def test_an_unwritable_directory_loses_only_the_record(tmp_path, monkeypatch):
    blocked = tmp_path / "a file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(disk_cache.ENV, str(blocked))
    monkeypatch.setattr(disk_cache, "_warned", set())
    with pytest.warns(CacheWarning, match="cannot be written"):
        choice = Choice(["a", "b"], key=KEY)
        _settle(choice, [1.0, 2.0])
    assert choice.best == 0


def test_an_empty_value_turns_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV, "")
    monkeypatch.chdir(tmp_path)
    _settle(Choice(["a", "b"], key=KEY), [2.0, 1.0])
    assert not Choice(["a", "b"], key=KEY).restored
    assert disk_cache.cache_dir() is None and disk_cache.stats()["directory"] is None
    assert list(tmp_path.iterdir()) == []


def test_the_default_directory_is_the_users_cache_dir(monkeypatch):
    monkeypatch.delenv(disk_cache.ENV)
    assert disk_cache.cache_dir() == Path(platformdirs.user_cache_dir("gpu_tc",
                                                                     appauthor=False))


def test_records_are_kept_per_host_and_the_host_is_described(cache, monkeypatch):
    _settle(Choice(["a", "b"], key=KEY), [2.0, 1.0])
    (host_file,) = cache.glob("cpu-routes/*/host.json")
    described = json.loads(host_file.read_text())
    assert described == json.loads(json.dumps(decisions.host()))
    assert described["cores"] >= 1 and described["numpy"] == np.__version__
    assert described["overrides"] == blas_variables()  # the report's own list
    # A BLAS override changes the host: its decisions are not this host's.
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Prescott")
    decisions.host.cache_clear()
    try:
        assert not Choice(["a", "b"], key=KEY).restored
    finally:
        monkeypatch.undo()
        decisions.host.cache_clear()


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from gpu_tc.disk_cache import RecordStore

    store, writer = RecordStore(Path(sys.argv[1])), sys.argv[2]
    for round in range(int(sys.argv[3])):
        for key in range(8):
            store.save(f"shared {key}", {"writer": writer, "round": round,
                                         "padding": "x" * 20000})
        store.save(f"own {writer} {round}", {"writer": writer, "round": round})
""")


def test_processes_writing_at_once_leave_whole_records(tmp_path):
    rounds = 60
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name,
                                 str(rounds)]) for name in ("one", "two")]
    store = disk_cache.RecordStore(tmp_path)
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # a part-written file would warn
        while any(w.poll() is None for w in writers):
            for key in range(8):
                value = store.load(f"shared {key}")
                if value is not None:
                    assert value["writer"] in ("one", "two") and len(value["padding"]) == 20000
                    seen += 1
        assert [w.wait() for w in writers] == [0, 0]
        for key in range(8):
            assert store.load(f"shared {key}")["round"] == rounds - 1
        for name in ("one", "two"):
            assert all(store.load(f"own {name} {r}") == {"writer": name, "round": r}
                       for r in range(rounds))
    assert seen > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries


_FIRST_CALLS = textwrap.dedent("""
    import json
    import numpy as np
    import gpu_tc
    from cpu_fallback import measure
    from gpu_tc import disk_cache

    timed = []
    record = measure.Choice.record
    def counting(self, variant, seconds, was_timed):
        timed.append(was_timed)
        record(self, variant, seconds, was_timed)
    measure.Choice.record = counting

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((48, 40, 56)), rng.standard_normal((56, 40, 64))
    plan = gpu_tc.prepare("abc,cbd->ad", a, b)
    results = []  # 12 calls, and more until the choice is made
    while len(results) < 12 or "measuring" in plan.reason and len(results) < 300:
        results.append(plan.execute(a, b))
    exact = np.einsum("abc,cbd->ad", a, b)
    print(json.dumps({"reason": plan.reason, "timed": sum(timed),
                      "stats": disk_cache.stats(),
                      "error": max(float(np.abs(r - exact).max()) for r in results)}))
""")


def _first_calls(cache: Path) -> dict:
    env = {**os.environ, disk_cache.ENV: str(cache)}
    done = subprocess.run([sys.executable, "-c", _FIRST_CALLS], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def test_a_second_process_is_served_from_the_cache_without_measuring(tmp_path):
    first = _first_calls(tmp_path)
    assert first["timed"] >= 2 * SAMPLES and "measured: " in first["reason"]
    assert first["stats"]["saved"] >= 1 and first["stats"]["restored"] == 0
    second = _first_calls(tmp_path)
    assert second["timed"] == 0, second  # nothing re-measured
    assert "measured in an earlier process" in second["reason"]
    assert second["stats"]["restored"] >= 1 and second["stats"]["saved"] == 0
    kept = first["reason"].split("measured: ")[1].split(" kept")[0]
    assert f"earlier process (gpu_tc's route cache): {kept} kept" in second["reason"]
    assert first["error"] < 1e-10 and second["error"] < 1e-10
