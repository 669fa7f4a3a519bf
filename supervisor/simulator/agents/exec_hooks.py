"""The seam between the agents and the exec layer: what exec does when an agent changes an
allocation's tasks, and the stand-in that does nothing until the cluster wires exec in."""

from __future__ import annotations

from typing import Protocol

from ..state.objects import SimAlloc

__all__ = ["ExecHooks", "NoExec"]


class ExecHooks(Protocol):
    """What the exec layer does when the agents change an allocation's tasks."""

    def kill_alloc(self, alloc_id: str) -> None:
        """Stop the allocation's processes."""

    def reset_workspace(self, alloc: SimAlloc) -> None:
        """Give the allocation a fresh workspace (its task restarted in a new container)."""

    def drop_node(self, node_id: str) -> None:
        """Drop the exec sessions the node's agent holds (it stopped)."""


class NoExec:
    """Exec hooks that do nothing: the agents before the cluster hands them its exec sessions."""

    def kill_alloc(self, alloc_id: str) -> None:
        """No processes to stop."""

    def reset_workspace(self, alloc: SimAlloc) -> None:
        """No workspace to reset."""

    def drop_node(self, node_id: str) -> None:
        """No sessions to drop."""
