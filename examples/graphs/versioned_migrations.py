"""How runs saved by earlier versions of versioned_v2.yaml are carried over (``migrations:``)."""

from __future__ import annotations

from orchestra.multiagent import SavedRun


def from_v1(run: SavedRun) -> None:
    """v1 -> v2: the node "draft" is now "write" (its result, agent history and state move with it)."""
    run.rename_node("draft", "write")


MIGRATIONS = {"v1": from_v1}
