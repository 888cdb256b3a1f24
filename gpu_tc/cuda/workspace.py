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
    recommended: int, minimum: int, limit: int | None, context: str,
    source: str = "workspace_limit",
) -> WorkspaceChoice:
    """The recommended workspace, capped by ``limit`` (from the option ``source``).

    Raises:
        WorkspaceError: even the minimum workspace exceeds ``workspace_limit``.
        MemoryLimitError: or exceeds what ``memory_limit`` leaves for it.
    """
    if limit is None or recommended <= limit:
        return WorkspaceChoice(recommended, f"workspace {recommended} bytes (recommended)")
    if minimum > limit:
        message = (
            f"{context} needs at least {minimum} bytes of workspace but Options.{source} "
            f"leaves {limit}"
        )
        if source == "memory_limit":
            raise MemoryLimitError(message, minimum)
        raise WorkspaceError(message)
    return WorkspaceChoice(
        limit, f"workspace capped at {source}={limit} bytes ({recommended} recommended)"
    )


def fallback_note(failed: int, minimum: int) -> str:
    """The reason fragment recorded when a workspace allocation ran out of memory."""
    return (
        f"workspace of {failed} bytes hit out-of-memory: planned again with the "
        f"minimum of {minimum} bytes"
    )
