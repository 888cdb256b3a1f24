"""cuTENSOR's plan and kernel caches kept in gpu_tc's persistent cache directory.

A cuTENSOR handle's plan cache holds, per operation, the plan it made (after
autotuning, the fastest kernel found); its kernel cache, the kernels it compiled. Both
can be written to a file and read back, valid only for the same cuTENSOR and CUDA
versions and the same GPU (architecture and multiprocessor count), so gpu_tc keeps them
in ``<cache dir>/cutensor/<those, spelled out>/``: read when a device's handle is
created, written when autotuning has finished a plan and when the process exits, each
time under a temporary name then renamed over the old file
(:func:`gpu_tc.disk_cache.write_atomic`). A file cuTENSOR refuses is ignored with a
:class:`gpu_tc.errors.CacheWarning`.

Off unless ``GPU_TC_CUTENSOR_CACHE_FILES=1``: on an H200 with cuTENSOR 2.8.0 a process
that read back a plan cache written by an earlier one crashed (a segmentation fault in
cutensorContract) on the first contraction the file held, and a file written after
autotuning was read back as 0 plans (gpu_tc issue #11).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import cupy
from nvmath.bindings import cutensor as ct

from gpu_tc import disk_cache

# The handle's plan cache grows to this many plans (cuTENSOR's default: 64), so that a
# file written here always fits the handle that reads it back.
PLAN_CACHE_LINES = 256
PLAN_FILE = "plan-cache.bin"
OPT_IN = "GPU_TC_CUTENSOR_CACHE_FILES"
KERNEL_FILE = "kernel-cache.bin"


def directory(device: int) -> Path | None:
    """Where ``device``'s caches lie (None unless opted in and the persistent cache is on)."""
    root = disk_cache.cache_dir()
    if root is None or os.environ.get(OPT_IN) != "1":
        return None
    props = cupy.cuda.runtime.getDeviceProperties(device)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    gpu = re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-")
    return root / "cutensor" / (
        f"cutensor{ct.get_version()}-cudart{ct.get_cudart_version()}-{gpu}"
        f"-sm{props['major']}{props['minor']}-{props['multiProcessorCount']}sms")


def restore(handle: int, folder: Path) -> int:
    """Size ``handle``'s plan cache and read both caches from ``folder``; the plans read.

    A file cuTENSOR refuses (corrupt, another version or GPU, more plans than fit) is
    ignored with a CacheWarning; a missing one is no plan.
    """
    if not _resize(handle, folder):
        return 0
    lines = 0
    plans, kernels = folder / PLAN_FILE, folder / KERNEL_FILE
    if plans.exists():
        try:
            lines = int(ct.handle_read_plan_cache_from_file(handle, str(plans)))
        except ct.cuTENSORError as err:
            disk_cache.warn_once(folder, "plan cache", f"cuTENSOR refused {PLAN_FILE} "
                                 f"({err}); ignored, plans are made afresh")
            _resize(handle, folder)  # resizing empties the cache: no part of the file stays
        else:
            disk_cache.count("restored", lines)
    if kernels.exists():
        try:
            ct.read_kernel_cache_from_file(handle, str(kernels))
        except ct.cuTENSORError as err:
            disk_cache.warn_once(folder, "kernel cache",
                                 f"cuTENSOR refused {KERNEL_FILE} ({err}); ignored")
    return lines


def _resize(handle: int, folder: Path) -> bool:
    try:
        ct.handle_resize_plan_cache(handle, PLAN_CACHE_LINES)
    except ct.cuTENSORError as err:
        disk_cache.warn_once(folder, "resize", f"the plan cache could not be resized ({err})")
        return False
    return True


def save(handle: int, folder: Path) -> None:
    """Write ``handle``'s caches to ``folder`` (each whole, then renamed into place); a
    failure only loses the file, with a warning."""
    _save_one(folder / PLAN_FILE, ct.handle_write_plan_cache_to_file, handle)
    _save_one(folder / KERNEL_FILE, ct.write_kernel_cache_to_file, handle)


def _save_one(target: Path, write: Callable[[int, str], None], handle: int) -> None:
    try:
        disk_cache.write_atomic(target, lambda temporary: write(handle, str(temporary)))
    except (ct.cuTENSORError, OSError) as err:
        disk_cache.warn_once(target.parent, f"writing {target.name}",
                             f"{target.name} not written ({err})")
    else:
        disk_cache.count("saved")
