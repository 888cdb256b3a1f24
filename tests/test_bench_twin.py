"""The noise floor: a twin of a peer (``gpu-tc bench --twin PEER``) and what reports say
of it, and the count of cases below 0.9x the best peer.

No test asserts a timing: only what is computed from timings given to it.
"""

from __future__ import annotations

import json

import pytest
from test_bench import _synthetic_doc

from gpu_tc import cli
from gpu_tc.bench import cli_args, memory_probe, noise, peers, report, runner, session


def test_a_twin_calls_what_its_peer_calls_under_its_own_name():
    copy = peers.twin("numpy")
    assert copy.name == "numpy-twin" and copy.twin_of == "numpy"
    original = peers.PEERS["numpy"]
    assert (copy.build, copy.kinds, copy.device, copy.module) == (
        original.build, original.kinds, original.device, original.module)
    assert copy.title.startswith(original.title) and "second copy" in copy.title
    assert peers.lookup("numpy-twin") == copy
    assert peers.lookup("numpy") is original
    assert original.twin_of is None
    with pytest.raises(KeyError):
        peers.lookup("nothing-twin")
    # A fresh process of the memory probes finds it by name.
    assert memory_probe.implementation("torch-twin") == peers.twin("torch")
    with pytest.raises(ValueError, match="nor a twin of one"):
        memory_probe.implementation("nothing-twin")


def _doc_with_twin() -> dict:
    """The synthetic report plus p's twin: faster than every peer on case 1, slower on 2."""
    doc = _synthetic_doc()
    first, second = doc["cases"]
    first["results"]["p-twin"] = dict(first["results"]["p"], seconds=0.25, value=4.0)
    second["results"]["p-twin"] = dict(second["results"]["p"], seconds=2.1, value=1 / 2.1)
    doc["implementations"].append("p-twin")
    doc["twins"] = {"p-twin": "p"}
    return doc


def test_a_twin_is_never_the_best_peer_and_gives_the_noise_floor():
    doc = report.analyse(_doc_with_twin())
    first, second = doc["cases"]
    # Case 1: the twin ran 4x gpu_tc's speed, q mismatched: the best peer is still p.
    assert first["best_peer"] == "p" and first["ratio_best"] == 2.0
    assert first["ratios"]["p-twin"] == 0.25  # the twin's own ratio is kept
    assert second["best_peer"] == "q" and second["ratio_best"] == 0.25
    [item] = doc["summary"]["noise_floor"]
    assert item["twin"] == "p-twin" and item["peer"] == "p" and item["cases"] == 2
    assert item["ratios"] == {1: 0.125, 2: pytest.approx(1.05)}
    assert item["low"] == 0.125 and item["high"] == pytest.approx(1.05)
    assert item["beyond"] == [{"case": 1, "ratio": 0.125}]  # 1.05 is within 1/0.9
    # Without a twin, the same report ranks the same peers.
    plain = report.analyse(_synthetic_doc())
    assert [c["best_peer"] for c in plain["cases"]] == ["p", "q"]
    assert "noise_floor" not in plain["summary"]


def test_reports_say_the_noise_floor_and_the_cases_below_the_margin(tmp_path):
    doc = report.analyse(_doc_with_twin())
    assert doc["summary"]["cases_below_margin"] == [{"case": 2, "peer": "q", "ratio": 0.25}]
    text = report.markdown(doc)
    assert ("Noise floor: p-twin calls exactly what p calls, timed in the same rounds, and is "
            "never the best peer; its median / p's per case: 0.125-1.05, beyond 0.9x either "
            "way in 1 of 2 cases (1: 0.125).") in text
    assert "(1/2 cases at or above the best peer; below 0.9x in 1: 2 (0.250x q))" in text
    report.write(doc, tmp_path, plot=False)
    summary = (tmp_path / "summary.md").read_text()
    assert "- tccg float64 cpu: p-twin / p 0.125-1.05, beyond 0.9x either way in 1 of 2 " \
           "cases (1: 0.125)" in summary
    header, _, row = summary.splitlines()[:3]
    cells = dict(zip(header.split(" | "), row.split(" | ")))
    assert cells["below 0.9x"] == "1" and cells["cases >= best"] == "1/2"
    # A report from before the count says so instead of a number.
    del doc["summary"]["cases_below_margin"]
    assert "below 0.9x: not counted" in report.markdown(doc)
    assert " | 1/2 | - | " in report.summary_markdown([doc])


def test_reports_without_a_twin_say_nothing_of_it():
    doc = report.analyse(_synthetic_doc())
    assert "Noise floor" not in report.markdown(doc)
    assert "Noise floor" not in report.summary_markdown([doc])
    assert noise.report_lines(doc) == [] and noise.summary_lines([doc]) == []


def _resolve(argv: list[str]) -> cli_args.BenchRequest:
    args = cli.build_parser().parse_args(["bench", *argv])
    return cli_args.resolve(args, args.parser)


@pytest.mark.parametrize(("argv", "message"), [
    (["--twin", "nothing"], "--twin: unknown peer 'nothing'"),
    (["--twin", "cupy"], "--twin: peer 'cupy' runs on the gpu, not on --backend cpu"),
    (["--peers", "numpy", "--twin", "torch"], "--twin: peer 'torch' is not among --peers numpy"),
])
def test_a_twin_of_a_peer_that_cannot_run_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        _resolve(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_the_twin_joins_every_suite_its_peer_runs():
    request = _resolve(["overhead", "permute", "--twin", "numpy", "--quick"])
    assert request.twin == "numpy"
    notes: list[str] = []
    plans = session.plans(request, notes)
    for plan in plans:
        names = [p.name for p in plan.peers]
        assert names[-1] == "numpy-twin" and "numpy" in names
    # opt_einsum has no permutation to time: no twin there, and a note says so.
    request = _resolve(["overhead", "permute", "--twin", "opt_einsum", "--quick"])
    plans = session.plans(request, notes := [])
    assert [p.name for p in plans[0].peers][-1] == "opt_einsum-twin"
    assert all(not p.twin_of for p in plans[1].peers)
    # (Peers not installed here add notes of their own.)
    assert [n for n in notes if n.startswith("--twin")] == [
        "--twin opt_einsum: opt_einsum does not run the permute suite here; no twin there"]


def test_bench_with_a_twin_end_to_end(tmp_path):
    argv = ["bench", "tccg", "--quick", "--cases", "1-2", "--peers", "numpy", "--twin", "numpy",
            "--repeat", "2", "--no-memory", "--no-plot", "--output", str(tmp_path)]
    assert cli.main(argv) == 0
    doc = json.loads((tmp_path / "cpu-tccg-float64.json").read_text())
    assert doc["implementations"] == ["gpu_tc", "numpy", "numpy-twin"]
    assert doc["twins"] == {"numpy-twin": "numpy"}
    for case in doc["cases"]:
        twin = case["results"]["numpy-twin"]
        assert twin["rel_error"] < 1e-12 and not twin["mismatch"] and not twin["error"]
        assert len(twin["samples"]) == 2
        assert case["best_peer"] == "numpy"
    [item] = doc["summary"]["noise_floor"]
    ratios = {int(k): v for k, v in item["ratios"].items()}
    assert ratios == {c["id"]: pytest.approx(c["results"]["numpy-twin"]["seconds"]
                                             / c["results"]["numpy"]["seconds"])
                      for c in doc["cases"]}
    assert "Noise floor: numpy-twin" in (tmp_path / "cpu-tccg-float64.md").read_text()
    # The twin's name joins the checkpoint's key: a run without it does not resume this one.
    with_twin = runner.plan("tccg", "float64", ["numpy", "numpy-twin"], True, {1})
    without = runner.plan("tccg", "float64", ["numpy"], True, {1})
    settings = session.settings_for("tccg", _resolve(["--quick"]), "")
    assert runner.checkpoint_key(with_twin, settings) != runner.checkpoint_key(without, settings)
