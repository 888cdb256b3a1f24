"""The persistent cache directory: what a process measured or tuned, kept for the next.

``GPU_TC_CACHE_DIR`` names the directory (an empty value turns the cache off); by
default it is gpu_tc's user cache directory (``platformdirs.user_cache_dir``, e.g.
``~/.cache/gpu_tc`` on Linux). The CPU backend keeps its measured route decisions
there (:mod:`cpu_fallback.decisions`), the GPU backend cuTENSOR's plan and kernel
caches (:mod:`gpu_tc.cuda.plan_cache_file`).

Every file is written whole under a temporary name in its own directory, then renamed
over the old one (``os.replace``, atomic on POSIX and Windows): a reader sees the old
file or the new one, never a part, and processes writing at once each leave a whole
file (the last rename stays). A file that cannot be read, or that another gpu_tc version
wrote, is ignored with a :class:`gpu_tc.errors.CacheWarning` (once per reason and
directory in a process) and replaced by the next write.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import CacheWarning
from .version import __version__

ENV = "GPU_TC_CACHE_DIR"
# Bumped when the records' layout or meaning changes: older records are then ignored
# (2: a measured contraction's first decision keeps the fastest variant, not the rule's
# pick within the margin; decisions saved under the old rule would have stood).
FORMAT = 2

_lock = threading.Lock()
_warned: set[tuple[str, str]] = set()
_counts = {"restored": 0, "saved": 0, "ignored": 0}


def cache_dir() -> Path | None:
    """The cache directory from ``GPU_TC_CACHE_DIR`` or the default; None when off."""
    value = os.environ.get(ENV)
    if value is None:
        import platformdirs

        return Path(platformdirs.user_cache_dir("gpu_tc", appauthor=False))
    return Path(value).expanduser() if value else None


def digest(text: str, length: int = 16) -> str:
    """A short stable name for ``text`` (hex of its SHA-256)."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Have ``write(temporary)`` write a file beside ``path``, then rename it over
    ``path``; whatever ``write`` raises leaves ``path`` as it was (and no temporary)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def warn_once(directory: Path, why: str, detail: str) -> None:
    """A CacheWarning for ``why`` in ``directory``, the first time in this process."""
    with _lock:
        _counts["ignored"] += 1
        if (str(directory), why) in _warned:
            return
        _warned.add((str(directory), why))
    warnings.warn(f"gpu_tc cache {directory}: {detail}", CacheWarning, stacklevel=3)


def count(event: str, entries: int = 1) -> None:
    """Count restored or saved entries (see :func:`stats`)."""
    with _lock:
        _counts[event] += entries


def stats() -> dict[str, Any]:
    """This process's use of the cache: its directory (None when off), and how many
    entries were restored from it, saved to it and ignored (corrupt or foreign)."""
    directory = cache_dir()
    with _lock:
        return {"directory": None if directory is None else str(directory), **_counts}


class RecordStore:
    """JSON records under one directory, one file per key (named by the key's digest).

    A record holds its key's text, the format and the gpu_tc version that wrote it:
    one from another version or format, or unreadable, is ignored with a warning.

    Args:
        directory: Where the records lie (created on the first save).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, key: str) -> Path:
        """The file of ``key``."""
        return self.directory / f"{digest(key, 32)}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The record of ``key``, or None (none kept, or one that cannot be used)."""
        path = self.path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            warn_once(self.directory, "unreadable",
                      f"{path.name} cannot be read ({err}); ignored, measured again")
            return None
        try:
            record = json.loads(text)
            written_by, written_format = record["gpu_tc"], record["format"]
            stored_key = record["key"]
        except (ValueError, TypeError, KeyError):
            warn_once(self.directory, "corrupt",
                      f"{path.name} is not a gpu_tc record; ignored, measured again")
            return None
        if (written_by, written_format) != (__version__, FORMAT):
            warn_once(self.directory, f"version {written_by}/{written_format}",
                      f"{path.name} was written by gpu_tc {written_by} (format "
                      f"{written_format}), this is {__version__} (format {FORMAT}); "
                      "ignored, measured again")
            return None
        if stored_key != key:  # a digest collision: not ours
            return None
        count("restored")
        return dict(record["value"])

    def save(self, key: str, value: dict[str, Any]) -> None:
        """Keep ``value`` (JSON-serialisable) under ``key``; a directory that cannot be
        written only loses the record (with a warning)."""
        record = {"format": FORMAT, "gpu_tc": __version__, "key": key, "value": value}
        try:
            text = json.dumps(record, indent=1)
            write_atomic(self.path(key), lambda temporary: temporary.write_text(text))
        except OSError as err:
            warn_once(self.directory, "unwritable",
                      f"cannot be written ({err}); decisions are not kept")
            return
        count("saved")
