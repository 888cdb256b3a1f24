"""The CPU's model name (light to import: reports and the route cache's host key)."""

from __future__ import annotations

import platform
from functools import lru_cache


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where there is one, else platform's guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
