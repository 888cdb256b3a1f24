"""The C heap's thresholds, pinned for a benchmark run so that a peer's fresh result
costs the same in every run.

glibc's malloc serves a block above its mmap threshold with fresh pages (page faults on
first touch) and returns the top of its heap past its trim threshold; both thresholds
move with what the process freed before. So the same call costs differently with the
process's history: in two of three TCCG x0.5 float64 runs on a 2-core EPYC host, every
peer that returns a new 4.7 MB result (numpy.einsum, opt_einsum, torch.einsum) ran most
of cases 40 to 47 at 0.8-1.6 ms a call, in the third at 0.26-0.52 (cbbe2ae);
with the mmap threshold at its initial 128 KiB, numpy.einsum on case 40 took 0.72 ms and
258 page faults a call, with it at 32 MiB 0.25 ms and none (gpu_tc 0.23 and 0.19: its
results come from its pool). The runner pins both at the highest values glibc's own
adjustment reaches (DEFAULT_MMAP_THRESHOLD_MAX on 64 bits, trim twice that), so that
no run's history decides; it is not free for every peer (numpy.einsum over cases 31-48
in fresh processes: 0.354 ms pinned, 0.339 as glibc left it; gpu_tc 0.213 and 0.225).
The memory probes run in fresh processes and keep glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

# mallopt's parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
# Variables through which a user sets the thresholds; where one is set, it stands.
VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def pin() -> str:
    """Pin glibc's mmap and trim thresholds for this process, where glibc is the C
    library and no variable sets them; what was done, for the report."""
    found = [name for name in VARIABLES if name in os.environ]
    if found:
        return f"left as {', '.join(found)} set{'s' if len(found) == 1 else ''} them"
    library, version = platform.libc_ver()
    if library != "glibc":
        return "left as it is (the C library is not glibc)"
    mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    pinned = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
              and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not pinned:
        return f"left as it is (glibc {version} refused mallopt)"
    return (f"glibc {version}: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold "
            f"{TRIM_THRESHOLD >> 20} MiB (pinned by the runner)")
