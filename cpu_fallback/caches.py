"""The size of the host's largest CPU cache, as Linux's sysfs lists cpu0's caches: the
pairwise sums (cpu_fallback.pairwise_kernel) ask memory ahead only for sums larger."""

from __future__ import annotations

import functools
from pathlib import Path

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
# Where sysfs lists no cache (another system, a container without it): one chiplet's L3
# on the hosts measured.
DEFAULT_BYTES = 32 << 20
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@functools.cache
def last_level_bytes(root: Path = SYSFS) -> int:
    """Bytes of the largest data or unified cache listed under ``root``; DEFAULT_BYTES
    where none is."""
    sizes = []
    for index in root.glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            sizes.append(parse_size((index / "size").read_text()))
        except (OSError, ValueError):
            continue
    return max(sizes, default=DEFAULT_BYTES)


def parse_size(text: str) -> int:
    """Bytes in sysfs's spelling of a cache size ("32768K", "2M", "512")."""
    text = text.strip()
    unit = UNITS.get(text[-1:].upper())
    return int(text[:-1]) * unit if unit else int(text)
