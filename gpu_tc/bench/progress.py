"""Progress on stderr: a tqdm bar when tqdm is installed, else one counter line a step."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, TextIO


class Progress:
    """Counts implementation runs.

    Example:
        >>> import io
        >>> progress = Progress(2, stream=io.StringIO(), bar=False)
        >>> progress.start("tccg float64 #1 gpu_tc"); progress.done(); progress.close()
    """

    def __init__(self, total: int, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self.total = total
        self.count = 0
        self.stream = stream if stream is not None else sys.stderr
        if bar is None:
            bar = importlib.util.find_spec("tqdm") is not None
        self._bar: Any = None
        if bar and total:
            from tqdm import tqdm

            self._bar = tqdm(total=total, file=self.stream, unit="run", dynamic_ncols=True)

    def start(self, label: str) -> None:
        """A run begins."""
        if self._bar is not None:
            self._bar.set_description_str(label, refresh=True)
        else:
            print(f"[{self.count + 1}/{self.total}] {label}", file=self.stream, flush=True)

    def done(self) -> None:
        """The run that began last has ended."""
        self.count += 1
        if self._bar is not None:
            self._bar.update(1)

    def skip(self, steps: int) -> None:
        """Count ``steps`` runs that a resumed checkpoint already holds."""
        self.count += steps
        if self._bar is not None:
            self._bar.update(steps)

    def close(self) -> None:
        """Finish the bar."""
        if self._bar is not None:
            self._bar.close()
