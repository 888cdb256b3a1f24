"""Emulated cuTENSOR: a handle's plan cache and its plan and kernel cache files.

A handle holds up to 64 plans by default (``handle_resize_plan_cache`` changes that and
empties it); a plan made under cache mode PEDANTIC (the default) is kept under its
operation's content, least recently made first out. The files are this double's own
format, checked as the header says cuTENSOR checks its own: another cuTENSOR or CUDA
version, or another GPU, is INVALID_VALUE; more plans than the handle holds,
INSUFFICIENT_WORKSPACE; a file that cannot be opened, IO_ERROR. This double compiles
no kernels, so a kernel cache file holds none.
"""

from __future__ import annotations

import json
from typing import Any

from . import cutensor_objects as objects
from . import runtime
from .cutensor_objects import Handle, Operation, Preference
from .cutensor_types import CacheMode, PlanPreferenceAttribute, Status, fail
from .signatures import binding

PLAN_MAGIC = b"gpu_double cuTENSOR plan cache\n"
KERNEL_MAGIC = b"gpu_double cuTENSOR kernel cache\n"


def remember(handle: int, operation: Operation, preference: Preference | None) -> None:
    """Keep a new plan of ``operation`` in ``handle``'s cache (unless its mode is NONE)."""
    state: Handle = objects.get(handle, "handle", "handle")
    mode = CacheMode.PEDANTIC if preference is None else preference.attributes.get(
        PlanPreferenceAttribute.CACHE_MODE, CacheMode.PEDANTIC)
    if mode == CacheMode.NONE or state.cache_lines == 0:
        return
    signature = _signature(operation)
    with objects.lock:
        state.cached.pop(signature, None)
        state.cached[signature] = None
        while len(state.cached) > state.cache_lines:
            del state.cached[next(iter(state.cached))]


def _signature(operation: Operation) -> str:
    """An operation's content without addresses (what the cache compares)."""
    terms = [(role, t.tensor.extents, t.tensor.strides, t.tensor.data_type, t.tensor.alignment,
              t.modes, t.op) for role, t in sorted(operation.terms.items())]
    return repr((operation.kind, terms, operation.binary_ops, operation.compute,
                 operation.scalar_type))


def _origin(device: int) -> dict[str, Any]:
    """What a cache file is valid for: versions and the GPU."""
    from .cutensor import VERSION

    props = runtime.device_properties(device)
    return {"cutensor": VERSION, "cudart": 13000, "gpu": props["name"].decode(),
            "sm": props["major"] * 10 + props["minor"], "sms": props["multiProcessorCount"]}


def _read(filename: str, magic: bytes, device: int) -> dict[str, Any] | None:
    """The content of a cache file (None when empty), checked against this library."""
    try:
        with open(filename, "rb") as file:
            data = file.read()
    except OSError as err:
        raise fail(Status.IO_ERROR, f"{filename}: {err}") from err
    if not data:
        return None
    if not data.startswith(magic):
        raise fail(Status.INVALID_VALUE, f"{filename} is not a cache file of this library")
    try:
        content = json.loads(data[len(magic):])
        origin = content.pop("origin")
    except (ValueError, KeyError, AttributeError) as err:
        raise fail(Status.INVALID_VALUE, f"{filename} is damaged ({err})") from err
    if origin != _origin(device):
        raise fail(Status.INVALID_VALUE, f"{filename} was written for {origin}, "
                                         f"not {_origin(device)}")
    return dict(content)


def _write(filename: str, magic: bytes, device: int, content: dict[str, Any]) -> None:
    try:
        with open(filename, "wb") as file:
            file.write(magic + json.dumps({"origin": _origin(device), **content}).encode())
    except OSError as err:
        raise fail(Status.IO_ERROR, f"{filename}: {err}") from err


@binding("handle_resize_plan_cache(intptr_t handle, uint32_t num_entries)")
def handle_resize_plan_cache(handle, num_entries):
    state: Handle = objects.get(handle, "handle", "handle")
    with objects.lock:
        state.cache_lines = num_entries
        state.cached.clear()


@binding("handle_write_plan_cache_to_file(intptr_t handle, filename)")
def handle_write_plan_cache_to_file(handle, filename):
    state: Handle = objects.get(handle, "handle", "handle")
    if state.cache_lines == 0:
        raise fail(Status.INVALID_VALUE, "no plan cache is attached to the handle")
    with objects.lock:
        plans = list(state.cached)
    _write(filename, PLAN_MAGIC, state.device, {"plans": plans})


@binding("handle_read_plan_cache_from_file(intptr_t handle, filename) -> uint32_t")
def handle_read_plan_cache_from_file(handle, filename):
    state: Handle = objects.get(handle, "handle", "handle")
    content = _read(filename, PLAN_MAGIC, state.device) or {"plans": []}
    plans = content.get("plans")
    if not isinstance(plans, list) or not all(isinstance(p, str) for p in plans):
        raise fail(Status.INVALID_VALUE, f"{filename} is damaged (no list of plans)")
    if len(plans) > state.cache_lines:
        raise fail(Status.INSUFFICIENT_WORKSPACE, f"{filename} holds {len(plans)} plans, the "
                                                  f"handle's cache {state.cache_lines}")
    with objects.lock:
        state.cached = dict.fromkeys(plans)
    return len(plans)


@binding("write_kernel_cache_to_file(intptr_t handle, filename)")
def write_kernel_cache_to_file(handle, filename):
    state: Handle = objects.get(handle, "handle", "handle")
    _write(filename, KERNEL_MAGIC, state.device, {"kernels": []})


@binding("read_kernel_cache_from_file(intptr_t handle, filename)")
def read_kernel_cache_from_file(handle, filename):
    state: Handle = objects.get(handle, "handle", "handle")
    _read(filename, KERNEL_MAGIC, state.device)
