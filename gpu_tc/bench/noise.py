"""The noise floor of a run: how far a twin, an identical copy of a peer, lands from it.

A twin (``gpu-tc bench --twin PEER``, :func:`gpu_tc.bench.peers.twin`) calls exactly
what its peer calls and is timed in the same rounds, so any gap between the two medians
of a case is chance: the host's and the runner's. A gap of gpu_tc to the best peer of the
same size says nothing on its own. The twin is never a case's best peer, so a run with one
compares gpu_tc against the same peers as a run without.
"""

from __future__ import annotations

from typing import Any

from .text import number

# A twin more than this far from its peer, either way, is "beyond": the margin of
# #15's "no case below 0.9x the best peer".
MARGIN = 0.9


def twins(doc: dict[str, Any]) -> dict[str, str]:
    """Each twin of the report and the peer it copies (reports before twins: none)."""
    return dict(doc.get("twins") or {})


def floor(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per twin: its median / its peer's per case, their range and the cases beyond.

    A case counts where both timed without an error; "beyond" holds those where the
    twin's median is below ``MARGIN`` times its peer's or above it divided by ``MARGIN``.
    """
    found = []
    for name, peer in twins(doc).items():
        ratios = {}
        for case in doc["cases"]:
            own, copy = case["results"].get(peer), case["results"].get(name)
            if own and copy and own.get("seconds") and copy.get("seconds"):
                ratios[case["id"]] = copy["seconds"] / own["seconds"]
        beyond = [{"case": i, "ratio": r} for i, r in ratios.items()
                  if r < MARGIN or r > 1 / MARGIN]
        found.append({
            "twin": name, "peer": peer, "cases": len(ratios), "ratios": ratios,
            "low": min(ratios.values(), default=None),
            "high": max(ratios.values(), default=None),
            "beyond": beyond,
        })
    return found


def _figures(item: dict[str, Any]) -> str:
    """"0.915-1.16, beyond 0.9x either way in 1 of 48 cases (7: 1.16)"."""
    listed = ", ".join(f"{b['case']}: {number(b['ratio'])}" for b in item["beyond"])
    return (f"{number(item['low'])}-{number(item['high'])}, beyond {MARGIN:g}x either way in "
            f"{len(item['beyond'])} of {item['cases']} cases" + (f" ({listed})" if listed else ""))


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The noise floor's paragraph of a report's markdown (none without a twin)."""
    lines = []
    for item in doc["summary"].get("noise_floor", []):
        lines += [f"Noise floor: {item['twin']} calls exactly what {item['peer']} calls, timed "
                  f"in the same rounds, and is never the best peer; its median / "
                  f"{item['peer']}'s per case: {_figures(item)}.", ""]
    return lines


def summary_lines(docs: list[dict[str, Any]]) -> list[str]:
    """Per report with a twin: the noise floor's figures, for the summary of a folder."""
    lines = []
    for doc in docs:
        scale = float(doc.get("scale", 1.0))
        suite = doc["suite"] + (f" x{scale:g}" if scale != 1.0 else "")
        for item in doc["summary"].get("noise_floor", []):
            lines.append(f"- {suite} {doc['dtype']} {doc['backend']}: {item['twin']} / "
                         f"{item['peer']} {_figures(item)}")
    if not lines:
        return []
    return ["", "Noise floor (a twin: a second copy of a peer, timed in the same rounds; its "
            "median / the peer's per case):", *lines]

