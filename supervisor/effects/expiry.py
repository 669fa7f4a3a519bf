"""The inactivity expiry: used runners idle past their inactivity timeout are destroyed.

Never while an execution or a file operation works in the runner (the pool counts them). The loop
sleeps until the next deadline; whoever may bring a deadline sooner calls ``changed()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NoReturn

import trio
from loguru import logger

from ..core.orders import Change, Destroy
from ..core.pool_view import PoolView
from ..core.runners import REASON_INACTIVITY

__all__ = ["InactivityExpiry"]

# With no deadline ahead, the loop still looks again this often.
_IDLE_WAKE: Final = 3600.0


class InactivityExpiry:
    """Destroys used runners whose inactivity timeout passed."""

    def __init__(self, pool: PoolView, tell: Callable[[Change], object]) -> None:
        self._pool = pool
        self._tell = tell
        self._changed = trio.Event()

    def changed(self) -> None:
        """A deadline may have come sooner (a claim, an adopted claim, an execution that ended)."""
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> NoReturn:
        """Destroy expired runners, then sleep until the next deadline or a change."""
        task_status.started()
        while True:
            self._changed = trio.Event()
            for runner_id in self._pool.expired(trio.current_time()):
                logger.debug("runner {} reached its inactivity timeout", runner_id)
                self._tell(Destroy(runner_id, REASON_INACTIVITY))
            deadline = self._pool.next_expiry()
            wake = deadline if deadline is not None else trio.current_time() + _IDLE_WAKE
            with trio.move_on_at(wake):
                await self._changed.wait()
