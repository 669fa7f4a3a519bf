"""The inactivity expiry: used runners idle past their inactivity timeout are destroyed.

Never while an execution or a file operation works in the runner (the pool counts them). The loop
sleeps until the next deadline; whoever may bring a deadline sooner calls ``changed()``, or
``deadline_set(at)`` with the deadline it set, which wakes the loop only if that comes before the
loop's own wake-up: a claim, or the end of work in a runner, sets a deadline a timeout away, and a
wake-up for each would look at every used runner each time (thousands of claims held at once made
each claim's cost grow with their number).
"""

from __future__ import annotations

import math
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
        # When the loop wakes next in any case, and looks at every used runner.
        self._wake_at = -math.inf

    def changed(self) -> None:
        """Any deadline may have come sooner (claims adopted from a previous run): look again now."""
        self._changed.set()

    def deadline_set(self, at: float) -> None:
        """A runner's deadline is now ``at``: the loop looks again now if that comes before its
        wake-up, and finds it then otherwise."""
        if at < self._wake_at:
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
            self._wake_at = wake = deadline if deadline is not None else trio.current_time() + _IDLE_WAKE
            with trio.move_on_at(wake):
                await self._changed.wait()
