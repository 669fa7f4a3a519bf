"""The daemon's graceful stop: asked for once, with one budget, which a second signal shortens.

Children that wait for the stop, or count down its budget, hold this one object: ``deadline`` is
when the budget passes, and ``next_change`` is set whenever it moves.
"""

from __future__ import annotations

from typing import Final, final

import trio

__all__ = ["END_MARGIN", "GracefulStop"]

# Running executions are ended this long before the stop's budget passes, so that their commands
# are stopped (for at most 1 s) and their clients told within it.
END_MARGIN: Final = 2.0


@final
class GracefulStop:
    """Whether the stop has begun, and when its budget passes."""

    def __init__(self, graceful_timeout: float) -> None:
        self._graceful_timeout = graceful_timeout
        self._requested = trio.Event()
        self._deadline = float("inf")
        self._next_change = trio.Event()

    @property
    def requested(self) -> bool:
        """The stop has begun."""
        return self._requested.is_set()

    @property
    def deadline(self) -> float:
        """When the stop's budget passes, on trio's clock (infinity before the stop)."""
        return self._deadline

    @property
    def next_change(self) -> trio.Event:
        """Set at the next change of the deadline: each waiter holds the event of its time."""
        return self._next_change

    async def wait(self) -> None:
        """Until the stop has begun."""
        await self._requested.wait()

    def request(self) -> bool:
        """Begin the stop within the graceful timeout; asked again, end the running executions
        at once (they get ``END_MARGIN`` to hear it). True the first time."""
        now = trio.current_time()
        first = not self._requested.is_set()
        if first:
            self._deadline = now + self._graceful_timeout
            self._requested.set()
        else:
            self._deadline = min(self._deadline, now + END_MARGIN)
        changed, self._next_change = self._next_change, trio.Event()
        changed.set()
        return first
