"""The term's running executions, held until they have ended once the term ends, and ended in
time at a stop: after a step-down they run for as long as they need; at the stop, what the stop
waits for is said every few seconds, and those still running are ended ``END_MARGIN`` before the
budget passes (at once after a second signal).
"""

from __future__ import annotations

import math
from typing import Final, final

import trio
from loguru import logger

from ..desk.service import RunnerService
from .graceful_stop import END_MARGIN, GracefulStop
from .term import Term
from .wait_any import wait_any

__all__ = ["ExecutionDeadline"]

# While stopping, what the stop waits for is logged this often (seconds).
_WAIT_LOG_EVERY: Final = 5.0


@final
class ExecutionDeadline:
    """Holds ``term``'s executions (of ``service``) until they have ended, within ``stop``'s budget."""

    def __init__(self, term: Term, service: RunnerService, stop: GracefulStop) -> None:
        self._term = term
        self._service = service
        self._stop = stop

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Returns once the term has ended, no execution runs, and no stop of a command is under way."""
        task_status.started()
        await self._term.ending.wait()
        stop = self._stop
        executions = self._service.executions
        ended = False
        next_line = trio.current_time()
        while executions.running_count:
            now = trio.current_time()
            left = stop.deadline - now
            running = executions.running_count
            if not ended and left <= END_MARGIN:
                ended = True
                executions.shut_down()
                logger.warning("stopping: ended {} running execution(s): out of time", running)
            elif not ended and now >= next_line and stop.requested:
                logger.info("stopping: waiting for {} execution(s), {:.0f}s left", running, left)
                next_line = now + _WAIT_LOG_EVERY
            if not stop.requested:
                wake = math.inf  # stepped down: they run for as long as they need (or until a stop)
            elif ended:
                wake = stop.deadline
            else:
                wake = min(next_line, stop.deadline - END_MARGIN)
            with trio.move_on_at(wake):
                await wait_any(stop.next_change.wait, executions.all_ended)
        # The stops of their commands still under way (shielded) end with the budget.
        await self._service.wait_stops_idle()
