"""What the daemon must end, and by when, checked against the cluster's ground truth every second.

8. A runner its client walked away from is destroyed once its inactivity timeout has passed: its
   job is stopped or purged in Nomad within ``BOUND`` of the timeout.
9. No execution's command outlives the end of its execution, as its client saw it (the terminal
   message, or its socket cut by either side), by more than ``BOUND``: the daemon stops a command
   whose exec session ended before it (a time limit, a client gone, a session dropped), and the
   next run of a killed daemon stops what the killed one left running. A command counts as running
   while the command model holds it noted in an allocation that runs in its container.

A fault that may keep the daemon from it (on the runner's node, a server's, the daemon's own: the
fault log's windows, aftermath included) moves the deadline to the window's end plus the same
slack, as often as windows overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from urllib.parse import parse_qs, urlsplit

import trio
from attrs import define, field

from ..simulator.agents.command_model import ModelContainers
from .faults import FaultLog
from .truth import Truth

__all__ = ["BOUND", "Overdue", "execution_id_of"]

# How long past its due time an end may take when no fault is in the way.
BOUND: Final = 5.0
_EVERY: Final = 1.0
_EXPIRED: Final = "8 an abandoned runner goes at its inactivity timeout"
_OUTLIVED: Final = "9 no command outlives its execution"


def execution_id_of(websocket_url: str) -> str:
    """The execution's ID, from the websocketUrl the daemon gave for it."""
    return parse_qs(urlsplit(websocket_url).query).get("executionID", [""])[0]


@define
class _Due:
    """Something the daemon must end: what, on which runner, from when, with how much slack."""

    what: str
    runner: str
    since: float
    slack: float


@define(eq=False)
class Overdue:
    """Promises 8 and 9: each due end, until the ground truth shows it done or its deadline passed."""

    truth: Truth
    faults: FaultLog
    # Checks.violate: (promise, details).
    violate: Callable[[str, str], None]
    expiries: list[_Due] = field(factory=list)
    commands: list[_Due] = field(factory=list)

    def abandoned(self, runner: str, timeout: int, at: float) -> None:
        """The client walked away from ``runner`` at ``at``: it goes ``timeout`` s later (never with 0)."""
        if timeout > 0:
            self.expiries.append(_Due(runner, runner, at, timeout + BOUND))

    def execution_ended(self, websocket_url: str, runner: str, at: float) -> None:
        """The client saw the execution end at ``at``: its command must be gone soon after."""
        execution_id = execution_id_of(websocket_url)
        if execution_id:
            self.commands.append(_Due(execution_id, runner, at, BOUND))

    async def watch(self) -> None:
        """Check every due end each virtual second, until cancelled."""
        while True:
            await trio.sleep(_EVERY)
            now = trio.current_time()
            self.expiries = [due for due in self.expiries if not self._settled(due, now, expiry=True)]
            self.commands = [due for due in self.commands if not self._settled(due, now, expiry=False)]

    def _settled(self, due: _Due, now: float, *, expiry: bool) -> bool:
        """Whether ``due`` (a runner's expiry, or an execution's command) is done, or was reported
        overdue."""
        if self._runner_gone(due) if expiry else self._command_gone(due):
            return True
        deadline = self.deadline(due)
        if now <= deadline:
            return False
        if expiry:
            detail = f"{due.runner} abandoned at {due.since:.3f}, its job still runs (due by {deadline:.3f})"
            self.violate(_EXPIRED, detail)
        else:
            where = self._running_command(due.what)
            detail = (
                f"execution {due.what} on {due.runner} ended at {due.since:.3f}; its command still runs "
                f"in allocation {where} (due by {deadline:.3f})"
            )
            self.violate(_OUTLIVED, detail)
        return True

    def deadline(self, due: _Due) -> float:
        """``since`` + slack, moved past every fault window that may hold the daemon up meanwhile."""
        node = self.truth.node_of(due.runner)
        deadline = due.since + due.slack
        moved = True
        while moved:
            moved = False
            for window in self.faults.windows:
                if window.start > deadline or window.end < due.since:
                    continue
                hinders = window.everything or window.nodes is None or not node or node in window.nodes
                if hinders and window.end + due.slack > deadline:
                    deadline, moved = window.end + due.slack, True
        return deadline

    def _runner_gone(self, due: _Due) -> bool:
        job = self.truth.cluster.state.jobs.get(("default", due.runner))
        return job is None or job.stop

    def _command_gone(self, due: _Due) -> bool:
        return self._running_command(due.what) is None

    def _running_command(self, execution_id: str) -> str | None:
        """The allocation in which the execution's command (or its stderr's reader) still runs."""
        containers = self.truth.cluster.execs.containers
        assert isinstance(containers, ModelContainers)
        state = self.truth.cluster.state
        notes = (execution_id, f"{execution_id}-stderr")
        for alloc_id, workspace in containers.workspaces.items():
            if not any(note in workspace.noted for note in notes):
                continue
            alloc = state.allocs.get(alloc_id)
            if alloc is not None and alloc.client_status == "running" and not alloc.container_lost:
                return alloc_id
        return None
