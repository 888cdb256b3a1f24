"""The PNG of a report: grouped bars per case, gpu_tc beside each peer, and the ceiling.

A report that measured memory gets, under each row of cases, a panel of each
implementation's peak extra memory (MiB) per case, with the mean over the cases last.

matplotlib is imported here only, when a plot is asked for, and drawn on a bare
Figure (Agg), so no global backend or pyplot state is touched.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .memory import MIB, peak
from .text import blas_line, number, title, variables_line

CASES_PER_ROW = 24
COLOURS = ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf")


def plot_report(doc: dict[str, Any], path: Path) -> Path:
    """Draw ``doc`` to ``path`` (PNG) and return the path.

    Rows of at most 24 cases each, plus a final "geomean" group; mismatching results
    are hatched; the ceiling is a dashed line (GEMM) or a dashed tick per case (copy).
    With memory measured, each row has a memory panel under it.
    """
    from matplotlib.figure import Figure

    cases = doc["cases"]
    groups = [cases[i : i + CASES_PER_ROW] for i in range(0, len(cases), CASES_PER_ROW)] or [[]]
    header = 0.25 * (3 + len(doc.get("warnings", [])))  # inches for the caption's lines
    with_memory = any(peak(c, n) is not None for c in cases for n in doc["implementations"])
    heights = [4.2, 2.2] if with_memory else [4.2]
    figure = Figure(figsize=(16, 0.5 + header + sum(heights) * len(groups)), dpi=100,
                    layout="constrained")
    panels = figure.subplots(len(heights) * len(groups), 1, squeeze=False,
                             height_ratios=heights * len(groups))[:, 0]
    axes, memory_axes = list(panels[:: len(heights)]), list(panels[1 :: len(heights)])
    for shared in (axes, memory_axes):  # each kind of panel on one scale
        for ax in shared[1:]:
            ax.sharey(shared[0])
    values = [e.get("value") for c in cases for e in c["results"].values() if e.get("value")]
    values += [c["ceiling"] for c in cases if c.get("ceiling")]
    values += [doc["ceiling"]["value"]] if doc.get("ceiling") else []
    log = bool(values) and max(values) / min(values) > 30
    for index, (ax, group) in enumerate(zip(axes, groups)):
        _draw_row(ax, doc, group, log, geomeans=index == len(groups) - 1)
        if with_memory:
            _draw_memory_row(memory_axes[index], doc, group, means=index == len(groups) - 1)
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    figure.suptitle(_caption(doc), fontsize=12)
    figure.savefig(path, format="png")
    return path


def _caption(doc: dict[str, Any]) -> str:
    """Title; devices, CPU and ratio; BLAS, kernel, threads and variables; each warning."""
    env = doc["environment"]
    cpu = f"{env.get('cpu')}, {env.get('cpu_count')} cores"
    where = "; ".join([*(env.get("devices") or []), cpu])
    ratio = doc["summary"]["geomean_ratio_best"]
    lines = [title(doc), f"{where}; gpu_tc / best peer (geomean) = {number(ratio)}",
             f"BLAS {blas_line(env)}; variables: {variables_line(env)}"]
    lines += [f"WARNING: {warning}" for warning in doc.get("warnings", [])]
    return "\n".join(lines)


def _draw_row(ax: Any, doc: dict[str, Any], cases: list[dict[str, Any]], log: bool,
              geomeans: bool) -> None:
    names = doc["implementations"]
    labels = [_tick(doc, c) for c in cases] + (["geomean"] if geomeans else [])
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        heights, hatches = [], []
        for case in cases:
            entry = case["results"].get(name) or {}
            heights.append(entry.get("value") or math.nan)
            hatches.append("xx" if entry.get("mismatch") else "")
        if geomeans:
            heights.append(doc["summary"]["geomean"].get(name) or math.nan)
            hatches.append("")
        positions = [i - 0.4 + width * (k + 0.5) for i in range(len(labels))]
        bars = ax.bar(positions, heights, width, label=name, color=COLOURS[k % len(COLOURS)],
                      edgecolor="black" if k == 0 else "none", linewidth=0.6)
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
    _draw_ceiling(ax, doc, cases)
    if geomeans:
        ax.axvline(len(cases) - 0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel(doc["metric"]["unit"])
    ax.set_xlabel("case id" if doc["suite"] == "tccg" else "case")
    ax.grid(axis="y", alpha=0.3)
    if log:
        ax.set_yscale("log")


def _draw_memory_row(ax: Any, doc: dict[str, Any], cases: list[dict[str, Any]],
                     means: bool) -> None:
    """Each implementation's peak extra MiB per case; "mean": over the cases it was measured on."""
    names = doc["implementations"]
    labels = [_tick(doc, c) for c in cases] + (["mean"] if means else [])
    width = 0.8 / len(names)
    totals = doc["summary"].get("memory") or {}
    for k, name in enumerate(names):
        heights = [math.nan if (b := peak(case, name)) is None else b / MIB for case in cases]
        if means:
            total = totals.get(name) or {}
            count = total.get("cases") or 0
            heights.append(total["total_extra_bytes"] / MIB / count if count else math.nan)
        positions = [i - 0.4 + width * (k + 0.5) for i in range(len(labels))]
        ax.bar(positions, heights, width, color=COLOURS[k % len(COLOURS)],
               edgecolor="black" if k == 0 else "none", linewidth=0.6)
    if means:
        ax.axvline(len(cases) - 0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel("peak extra MiB")
    ax.set_title("peak extra memory: a fresh process per implementation, cold and warm call "
                 "(lower is better)", fontsize=9, loc="left")
    ax.grid(axis="y", alpha=0.3)


def _tick(doc: dict[str, Any], case: dict[str, Any]) -> str:
    """The TCCG id alone (48 cases); the id and expression for the short suites."""
    return str(case["id"]) if doc["suite"] == "tccg" else f"{case['id']}\n{case['expr']}"


def _draw_ceiling(ax: Any, doc: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    if doc.get("ceiling"):
        ceiling = doc["ceiling"]
        ax.axhline(ceiling["value"], color="black", linestyle="--", linewidth=1,
                   label=f"ceiling: {ceiling['name']}")
        return
    ticks = [(i, c["ceiling"]) for i, c in enumerate(cases) if c.get("ceiling")]
    if ticks:
        ax.hlines([v for _, v in ticks], [i - 0.45 for i, _ in ticks],
                  [i + 0.45 for i, _ in ticks], colors="black", linestyles="--", linewidth=1,
                  label="ceiling: contiguous copy of the same bytes")
