"""The workspace policy of cuTENSOR plans (plain data, unit-tested on the CPU): the size
handed to cutensorCreatePlan, and what a fallback to the minimum records."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_tc.errors import WorkspaceError


@dataclass(frozen=True)
class WorkspaceChoice:
    """The workspace limit handed to cutensorCreatePlan, and why."""

    limit: int
    note: str


def choose_workspace(
    recommended: int, minimum: int, limit: int | None, context: str
) -> WorkspaceChoice:
    """The recommended workspace, capped by ``Options.workspace_limit``.

    Raises:
        WorkspaceError: even the minimum workspace exceeds the limit.
    """
    if limit is None or recommended <= limit:
        return WorkspaceChoice(recommended, f"workspace {recommended} bytes (recommended)")
    if minimum > limit:
        raise WorkspaceError(
            f"{context} needs at least {minimum} bytes of workspace but "
            f"Options.workspace_limit is {limit}"
        )
    return WorkspaceChoice(
        limit, f"workspace capped at workspace_limit={limit} bytes ({recommended} recommended)"
    )


def fallback_note(failed: int, minimum: int) -> str:
    """The reason fragment recorded when a workspace allocation ran out of memory."""
    return (
        f"workspace of {failed} bytes hit out-of-memory: planned again with the "
        f"minimum of {minimum} bytes"
    )
