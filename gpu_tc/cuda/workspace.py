"""The workspace policy of cuTENSOR plans (plain data, unit-tested on the CPU): the size
handed to cutensorCreatePlan, and what a fallback to the minimum records."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_tc.errors import MemoryLimitError, WorkspaceError


@dataclass(frozen=True)
class WorkspaceChoice:
    """The workspace limit handed to cutensorCreatePlan, and why."""

    limit: int
    note: str


def workspace_cap(
    workspace_limit: int | None, memory_limit: int | None, staged: int
) -> tuple[int | None, str]:
    """The workspace bound of a plan and the option it comes from: ``workspace_limit``,
    or what ``memory_limit`` leaves after the plan's ``staged`` copies, the smaller."""
    left = None if memory_limit is None else max(0, memory_limit - staged)
    if left is not None and (workspace_limit is None or left < workspace_limit):
        return left, "memory_limit"
    return workspace_limit, "workspace_limit"


def choose_workspace(
    recommended: int, minimum: int, limit: int | None, source: str = "workspace_limit",
) -> WorkspaceChoice:
    """The recommended workspace, capped by ``limit`` (from the option ``source``).

    A limit below cuTENSOR's minimum estimate is still handed to cutensorCreatePlan:
    the estimate is no floor (cuTENSOR 2.8.0 on an H200 estimated 32 MiB at least for
    a 6x7x8 contraction, then planned it with no workspace and ran it correctly); a
    plan it cannot make within the limit is :func:`refused_within`'s error.
    """
    if limit is None or recommended <= limit:
        return WorkspaceChoice(recommended, f"workspace {recommended} bytes (recommended)")
    below = f", under cuTENSOR's minimum estimate of {minimum}" if limit < minimum else ""
    return WorkspaceChoice(
        limit, f"workspace capped at {source}={limit} bytes ({recommended} recommended{below})"
    )


def refused_within(
    limit: int, minimum: int, context: str, source: str, status: str
) -> WorkspaceError | MemoryLimitError:
    """The error for a plan cuTENSOR could not make within ``limit`` bytes of workspace
    (a MemoryLimitError, naming the least need, when ``memory_limit`` set the limit)."""
    message = (
        f"{context}: cuTENSOR could not plan it within the {limit} bytes of workspace "
        f"Options.{source} leaves ({status}); it estimates at least {minimum} bytes"
    )
    if source == "memory_limit":
        return MemoryLimitError(message, minimum)
    return WorkspaceError(message)


def fallback_note(failed: int, smaller: int, minimum: int) -> str:
    """The reason fragment recorded when a workspace allocation ran out of memory and
    the plan was made again with ``smaller`` bytes (cuTENSOR's ``minimum`` estimate, or
    none)."""
    again = (f"cuTENSOR's minimum estimate of {minimum} bytes" if smaller == minimum
             else f"{smaller} bytes")
    return f"workspace of {failed} bytes hit out-of-memory: planned again with {again}"
