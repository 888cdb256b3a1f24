"""How reports name things: numbers to three figures or so, and a report's title."""

from __future__ import annotations

import math
from typing import Any


def number(value: float | None) -> str:
    """Three significant figures or so; "-" for a missing value.

    Example:
        >>> number(1234.5), number(12.345), number(0.5), number(0.01234), number(None)
        ('1234', '12.3', '0.500', '0.0123', '-')
    """
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:#.3g}"


def title(doc: dict[str, Any]) -> str:
    """e.g. "tccg, float64, cpu: GFLOP/s (higher is better)"."""
    better = "higher" if doc["metric"]["higher_is_better"] else "lower"
    unit = doc["metric"]["unit"]
    return f"{doc['suite']}, {doc['dtype']}, {doc['backend']}: {unit} ({better} is better)"
