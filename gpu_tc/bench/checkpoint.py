"""Checkpoints of a suite in progress: a long run that is stopped resumes where it was.

After each group of cases (:mod:`gpu_tc.bench.rounds`) the finished cases are written
to ``<stem>.partial.json`` beside the report; ``gpu-tc bench --resume`` keeps the cases
of a checkpoint made with the same suite, dtype, backend, implementations and settings,
and runs only the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Checkpoint:
    """The finished cases of one suite run, on disk.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "cpu-tccg-float64.partial.json"
        >>> checkpoint = Checkpoint(path, {"suite": "tccg"})
        >>> checkpoint.save([{"id": 1}])
        >>> checkpoint.load()
        {1: {'id': 1}}
        >>> Checkpoint(path, {"suite": "overhead"}).load()
        {}
    """

    def __init__(self, path: Path, key: dict[str, Any]) -> None:
        self.path = path
        self.key = key

    def load(self) -> dict[int, dict[str, Any]]:
        """The finished cases by id; none when the file is missing or from another run."""
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(stored, dict) or stored.get("key") != self.key:
            return {}
        return {case["id"]: case for case in stored.get("cases", [])}

    def save(self, cases: list[dict[str, Any]]) -> None:
        """Write the finished cases (atomically: a stop mid-write keeps the last file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_name(self.path.name + ".tmp")
        scratch.write_text(json.dumps({"key": self.key, "cases": cases}), encoding="utf-8")
        scratch.replace(self.path)

    def remove(self) -> None:
        """Drop the file once the full report is written."""
        self.path.unlink(missing_ok=True)
