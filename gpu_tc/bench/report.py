"""Reports: ratios and geomeans, JSON, markdown tables, and the files of a run.

A report is the plain dict :func:`gpu_tc.bench.runner.run` returns. Every ratio is
``peer seconds / gpu_tc seconds``: above 1 means gpu_tc is faster, whatever the
metric. The best peer of a case is its fastest peer whose result matched gpu_tc's.
Ratios come from each implementation's median run; the summary adds the best peer's
ratio from each implementation's fastest run, so the spread of the runs shows there too.
A twin (a second copy of a peer, :mod:`gpu_tc.bench.noise`) is never a best peer; the
report gives its noise floor instead.
A run that measured memory (:mod:`gpu_tc.bench.memory`) adds each implementation's peak
extra memory: per case, and summed over the cases.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import memory, noise
from .suites import DTYPES, SUITES, Metric
from .text import blas_line, engines_note, number, title, torch_blas_note, variables_line

SUMMARY_NAME = "summary.md"

# How the memory columns are measured, in the words of a report.
MEMORY_NOTE = ("a fresh process per implementation: peak resident memory over a cold and a "
               "warm call above the memory once the inputs exist, less the result's bytes")


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean of the positive values (None when there are none).

    Example:
        >>> geomean([1.0, 4.0])
        2.0
    """
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _seconds(case: dict[str, Any], name: str, key: str = "seconds") -> float | None:
    """An implementation's median ("seconds") or fastest run ("best"), per call."""
    entry = case["results"].get(name)
    return None if entry is None else entry.get(key)


def analyse(doc: dict[str, Any]) -> dict[str, Any]:
    """Add per-case ratios and best peer, and the run's ``summary``; returns ``doc``.

    Peers that have no implementation for any case of the suite leave the report. A
    twin is never the best peer.
    """
    own_name, *peers = doc["implementations"]
    peers = [p for p in peers if any(p in case["results"] for case in doc["cases"])]
    doc["implementations"] = [own_name, *peers]
    twins = noise.twins(doc)
    for case in doc["cases"]:
        own = _seconds(case, own_name)
        timed = {p: s for p in peers if (s := _seconds(case, p))}
        case["ratios"] = {p: s / own for p, s in timed.items()} if own else {}
        matched = [p for p in timed if not case["results"][p]["mismatch"] and p not in twins]
        best = min(matched, key=timed.__getitem__) if matched else None
        case["best_peer"] = best
        case["ratio_best"] = timed[best] / own if best and own else None
        own_fastest = _seconds(case, own_name, "best")
        fastest = [s for p in matched if (s := _seconds(case, p, "best"))]
        case["ratio_best_of_runs"] = min(fastest) / own_fastest if fastest and own_fastest else None
    cases = doc["cases"]
    compared = [c["ratio_best"] for c in cases if c["ratio_best"] is not None]
    summary: dict[str, Any] = {
        "geomean": {
            name: geomean(c["results"][name].get("value") for c in cases if name in c["results"])
            for name in doc["implementations"]
        },
        "geomean_ratio": {p: geomean(c["ratios"].get(p) for c in cases) for p in peers},
        "geomean_ratio_best": geomean(compared),
        "geomean_ratio_best_of_runs": geomean(c["ratio_best_of_runs"] for c in cases),
        "cases_compared": len(compared),
        "cases_at_or_above_best": sum(r >= 1 for r in compared),
        "cases_below_margin": [
            {"case": c["id"], "peer": c["best_peer"], "ratio": c["ratio_best"]}
            for c in cases if c["ratio_best"] is not None and c["ratio_best"] < noise.MARGIN
        ],
        "mismatches": [
            {"case": c["id"], "peer": p, "rel_error": e["rel_error"]}
            for c in cases for p, e in c["results"].items() if e["mismatch"]
        ],
        "errors": [
            {"case": c["id"], "implementation": p, "error": e["error"]}
            for c in cases for p, e in c["results"].items() if e["error"]
        ],
    }
    if doc.get("ceiling") and summary["geomean"].get(own_name):
        summary["fraction_of_ceiling"] = summary["geomean"][own_name] / doc["ceiling"]["value"]
    if any("memory" in case for case in cases):
        for case in cases:
            case["least_memory_peer"] = memory.least_peer(
                case, [p for p in peers if p not in twins])
        summary["memory"] = memory.totals(cases, doc["implementations"])
        summary["memory_failures"] = memory.failures(cases)
    if twins:
        summary["noise_floor"] = noise.floor(doc)
    doc["summary"] = summary
    return doc


def _work_column(doc: dict[str, Any]) -> tuple[str, float] | None:
    unit = doc["metric"]["unit"]
    return {"GFLOP/s": ("GFLOP", 1e9), "GB/s": ("MB", 1e6)}.get(unit)


def markdown(doc: dict[str, Any]) -> str:
    """The report as a markdown section: settings, per-case table, geomeans, notes."""
    names = doc["implementations"]
    env = doc["environment"]
    work = _work_column(doc)
    lines = [f"### {title(doc)}", ""]
    if doc.get("command"):
        lines += [f"Command: `{doc['command']}`", ""]
    lines += [
        f"Host: {env.get('cpu')}, {env.get('cpu_count')} cores; NumPy {env.get('numpy')}; "
        f"gpu_tc {env.get('gpu_tc')}; {doc['created']}.",
        "",
        f"BLAS: {blas_line(env)}; BLAS and threading variables: {variables_line(env)}."
        f"{torch_blas_note(env)}{engines_note(env)}",
        "",
    ]
    if env.get("heap"):
        lines += [f"C heap: {env['heap']}.", ""]
    if doc.get("groups"):
        groups = doc["groups"]
        lines += [f"Timed runs: {doc['settings']['repeat']} per implementation, in rounds over "
                  f"groups of up to {groups['cases']} cases and {groups['bytes'] >> 20} MiB.", ""]
    lines += [line for warning in doc.get("warnings", []) for line in
              (f"**Warning:** {warning}.", "")]
    if env.get("devices"):
        lines += [f"GPU: {'; '.join(env['devices'])}.", ""]
    if doc.get("ceiling"):
        lines += [f"Ceiling: {doc['ceiling']['name']}: {number(doc['ceiling']['value'])} "
                  f"{doc['metric']['unit']}.", ""]
    header = ["id", "case", "expr"] + ([work[0]] if work else []) + names
    header += (["copy"] if any(c["ceiling"] for c in doc["cases"]) else [])
    header += ["best peer", "gpu_tc/best"]
    header += ["gpu_tc MiB", "least-memory peer MiB"] if _memory_measured(doc) else []
    header += ["route"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for case in doc["cases"]:
        row = [str(case["id"]), case["name"], f"`{case['expr']}`"]
        if work:
            row.append(number(case["work"] / work[1]))
        spread = {names[0], case["best_peer"]}
        for name in names:
            row.append(_cell(case["results"].get(name), doc, case if name in spread else None))
        if "copy" in header:
            row.append(number(case["ceiling"]))
        route = (case["results"].get(names[0]) or {}).get("route") or ""
        row += [case["best_peer"] or "-", number(case["ratio_best"])]
        if _memory_measured(doc):
            row += _memory_cells(case, names[0])
        row.append(route)
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *_summary_lines(doc)]
    return "\n".join(lines) + "\n"


def _cell(entry: dict[str, Any] | None, doc: dict[str, Any],
          spread_of: dict[str, Any] | None) -> str:
    """The median's value; given the case (``spread_of``), the runs' range: "52.1 (49.8-53.0)"."""
    if entry is None:
        return "n/a"
    if entry["error"]:
        return "error"
    text = number(entry.get("value"))
    samples = entry.get("samples") or []
    if spread_of is not None and len(samples) > 1:
        metric = Metric(**doc["metric"])
        values = [metric.value(s, spread_of["work"]) for s in samples]
        text += f" ({number(min(values))}-{number(max(values))})"
    return text + (" (x)" if entry["mismatch"] else "")


def _memory_measured(doc: dict[str, Any]) -> bool:
    """Whether any probe of the report measured something (older reports: no)."""
    return any(t["cases"] for t in (doc["summary"].get("memory") or {}).values())


def _memory_cells(case: dict[str, Any], own: str) -> list[str]:
    """gpu_tc's peak extra MiB; the least-memory peer's, with its name: "0.25 numpy"."""
    least = case.get("least_memory_peer")
    return [number(memory.mib(memory.peak(case, own))),
            f"{number(memory.mib(memory.peak(case, least)))} {least}" if least else "-"]


def _memory_sums(doc: dict[str, Any]) -> str:
    """Each implementation's peak extra MiB summed over the cases: "gpu_tc 12.0, numpy 30.5".

    An implementation measured on fewer cases than the report's says on how many.
    """
    count = len(doc["cases"])
    return ", ".join(
        f"{name} {number(memory.mib(t['total_extra_bytes']))}"
        + ("" if t["cases"] == count else f" ({t['cases']}/{count} cases)")
        for name, t in doc["summary"]["memory"].items()
    )


def _memory_lines(doc: dict[str, Any]) -> list[str]:
    """The sums of each implementation's peak extra memory, or why none was measured."""
    if not _memory_measured(doc):
        reason = (doc.get("memory") or {}).get("unavailable")
        return [f"Peak extra memory: {reason}.", ""] if reason else []
    return [f"Peak extra memory, MiB summed over the cases ({MEMORY_NOTE}): "
            f"{_memory_sums(doc)}.", ""]


def _below_text(summary: dict[str, Any]) -> str:
    """The cases below ``noise.MARGIN`` x the best peer: "below 0.9x in 1: 13 (0.883x torch)"."""
    below = summary.get("cases_below_margin")
    if below is None:  # a report from before the count
        return f"below {noise.MARGIN:g}x: not counted"
    listed = ", ".join(f"{b['case']} ({number(b['ratio'])}x {b['peer']})" for b in below)
    return f"below {noise.MARGIN:g}x in {len(below)}" + (f": {listed}" if listed else "")


def _summary_lines(doc: dict[str, Any]) -> list[str]:
    summary = doc["summary"]
    unit = doc["metric"]["unit"]
    names = doc["implementations"]
    lines = [
        f"Geomean {unit}: "
        + ", ".join(f"{n} {number(summary['geomean'][n])}" for n in names) + ".",
        "",
        "gpu_tc / peer (geomean of per-case time ratios, > 1: gpu_tc faster): "
        + ", ".join(f"{p} {number(r)}" for p, r in summary["geomean_ratio"].items())
        + f"; best peer per case {number(summary['geomean_ratio_best'])} "
        f"({summary['cases_at_or_above_best']}/{summary['cases_compared']} cases at or above "
        f"the best peer; {_below_text(summary)}); from each implementation's fastest run "
        "instead of its median: "
        f"{number(summary.get('geomean_ratio_best_of_runs'))}.",
        "",
    ]
    if "fraction_of_ceiling" in summary:
        lines += [f"gpu_tc geomean = {summary['fraction_of_ceiling']:.0%} of the ceiling.", ""]
    lines += _memory_lines(doc)
    lines += noise.report_lines(doc)
    lines.append(
        "gpu_tc and the best peer: median (slowest-fastest of the timed runs). "
        f"(x): the result differs from gpu_tc's by more than {doc['tolerance']:g} "
        "(max-norm relative error); n/a: the peer has no such operation."
    )
    for item in summary["mismatches"]:
        lines.append(f"- mismatch: case {item['case']} {item['peer']}: "
                     f"relative error {item['rel_error']:.3g}")
    for item in summary["errors"]:
        lines.append(f"- error: case {item['case']} {item['implementation']}: {item['error']}")
    for item in summary.get("memory_failures", []):
        lines.append(f"- memory: case {item['case']} {item['implementation']}: "
                     f"{item['reason']}")
    return lines


def stem(backend: str, suite: str, dtype: str, scale: float = 1.0) -> str:
    """The files' stem, e.g. "cpu-tccg-float64"; "cpu-tccg-float64-x0.5" with ``scale`` 0.5.

    Example:
        >>> stem("cpu", "tccg", "float64", 0.5)
        'cpu-tccg-float64-x0.5'
    """
    return f"{backend}-{suite}-{dtype}" + (f"-x{scale:g}" if scale != 1.0 else "")


def write(doc: dict[str, Any], directory: Path, plot: bool = True) -> list[Path]:
    """Write ``<stem>.json``, ``<stem>.md``, ``<stem>.png`` and refresh ``summary.md``.

    The summary is rebuilt from every report JSON in ``directory``, so runs of
    different suites into one directory add up.
    """
    directory.mkdir(parents=True, exist_ok=True)
    base = stem(doc["backend"], doc["suite"], doc["dtype"], doc.get("scale", 1.0))
    # Not with_suffix: the stem of a scaled run has a dot of its own ("-x0.5").
    paths = [directory / f"{base}.json", directory / f"{base}.md"]
    paths[0].write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(doc), encoding="utf-8")
    if plot:
        from .plot import plot_report

        paths.append(plot_report(doc, directory / f"{base}.png"))
    summary = directory / SUMMARY_NAME
    summary.write_text(summary_markdown(load_all(directory)), encoding="utf-8")
    return paths + [summary]


def load_all(directory: Path) -> list[dict[str, Any]]:
    """Every report JSON in ``directory`` (files without a report schema are skipped)."""
    docs = []
    for path in sorted(directory.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("schema") == 1 and "summary" in doc:
            docs.append(doc)
    return docs


def _row_order(doc: dict[str, Any]) -> tuple[int, str, int, float]:
    return SUITES.index(doc["suite"]), doc["backend"], DTYPES.index(doc["dtype"]), -_scale(doc)


def _scale(doc: dict[str, Any]) -> float:
    return float(doc.get("scale", 1.0))


def summary_markdown(docs: list[dict[str, Any]]) -> str:
    """One table: per report, each implementation's geomean and gpu_tc vs the best peer.

    Rows follow the suites' order, then backend, dtype and scale (full extents first; a
    scaled run's suite reads e.g. "tccg x0.5").
    """
    docs = sorted(docs, key=_row_order)
    names: list[str] = []
    for doc in docs:
        names += [n for n in doc["implementations"] if n not in names]
    header = ["suite", "dtype", "backend", "unit", *names, "gpu_tc/best",
              "gpu_tc/best (fastest runs)", "cases >= best", f"below {noise.MARGIN:g}x",
              "mismatches"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for doc in docs:
        s = doc["summary"]
        suite = doc["suite"] + (f" x{_scale(doc):g}" if _scale(doc) != 1.0 else "")
        row = [suite, doc["dtype"], doc["backend"], doc["metric"]["unit"]]
        row += [number(s["geomean"].get(n)) if n in s["geomean"] else "n/a" for n in names]
        row += [number(s["geomean_ratio_best"]), number(s.get("geomean_ratio_best_of_runs")),
                f"{s['cases_at_or_above_best']}/{s['cases_compared']}",
                str(len(s["cases_below_margin"])) if "cases_below_margin" in s else "-",
                str(len(s["mismatches"]))]
        lines.append("| " + " | ".join(row) + " |")
    commands = sorted({doc["command"] for doc in docs if doc.get("command")})
    notes = ["", "Geomeans over the cases of each suite; gpu_tc/best: geomean of "
             "best-peer time / gpu_tc time (> 1: gpu_tc faster), from each implementation's "
             "median run, and (fastest runs) from its fastest run."]
    notes += _summary_memory_lines(docs)
    notes += noise.summary_lines(docs)
    notes += ["", "Made by:", *[f"- `{c}`" for c in commands]] if commands else []
    return "\n".join(lines + notes) + "\n"


def _summary_memory_lines(docs: list[dict[str, Any]]) -> list[str]:
    """Per report that measured memory: each implementation's peak extra MiB, summed."""
    lines = []
    for doc in filter(_memory_measured, docs):
        suite = doc["suite"] + (f" x{_scale(doc):g}" if _scale(doc) != 1.0 else "")
        lines.append(f"- {suite} {doc['dtype']} {doc['backend']}: {_memory_sums(doc)}")
    if not lines:
        return []
    return ["", f"Peak extra memory, MiB summed over the cases ({MEMORY_NOTE}):", *lines]
