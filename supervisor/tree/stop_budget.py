"""The stop's budget, enforced: when it has passed, whatever connection is left and every stop of a
command under way (shielded) are cut, then everything else is cancelled.
"""

from __future__ import annotations

from typing import final

import trio
from loguru import logger

from ..api.http_server import AsgiServer
from .graceful_stop import GracefulStop
from .term import Terms

__all__ = ["StopBudget"]


@final
class StopBudget:
    """Cuts what is left of the daemon (``everything``) when ``stop``'s budget has passed."""

    def __init__(
        self, stop: GracefulStop, server: AsgiServer, terms: Terms, everything: trio.CancelScope
    ) -> None:
        self._stop = stop
        self._server = server
        self._terms = terms
        self._everything = everything

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Wait for the stop, then for its budget to pass (a second signal brings it nearer)."""
        task_status.started()
        stop = self._stop
        await stop.wait()
        while trio.current_time() < stop.deadline:
            with trio.move_on_at(stop.deadline):
                await stop.next_change.wait()
        closed = self._server.close_connections()
        service = self._terms.service
        abandoned = service.abandon_stops() if service is not None else 0
        logger.warning(
            "stopping: the budget has passed; {} connection(s) cut, {} command stop(s) left to the next "
            "start",
            closed,
            abandoned,
        )
        self._everything.cancel("the stop's budget has passed")
