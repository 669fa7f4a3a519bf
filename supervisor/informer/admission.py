"""The admission gate: the one owner of the event stream's health, and what claims and new executions
wait at.

Its level (UP, DOWN, RECOVERING) has one writer, the informer, which reports each change;
everyone else reads it or waits on it (trio-util's AsyncValue: one setter, many waiters). A claim, a
new execution, and the WebSocket connect of an execution prepared before a loss wait for UP up to
``admission.wait_timeout``, then are refused with NomadUnreachable (HTTP 500 ``NOMAD_UNREACHABLE``).
Running executions never look at it.
"""

from __future__ import annotations

import trio

from ..base.errors import NomadUnreachable
from ..base.levels import AsyncValue, StreamState

__all__ = ["AdmissionGate"]


class AdmissionGate:
    """The stream's health (one writer: the informer) and the wait of claims and new executions."""

    def __init__(self, wait_timeout: float) -> None:
        self.wait_timeout = wait_timeout
        self._level = AsyncValue(StreamState.DOWN)
        # Times the stream was lost.
        self.losses = 0
        # When the stream was last UP (its loss began then), or None while it is UP: reconnect
        # attempts in between, which go DOWN and RECOVERING in turn, do not move it.
        self._down_since: float | None = trio.current_time()

    @property
    def state(self) -> StreamState:
        """The stream's health now."""
        return self._level.value

    @property
    def since(self) -> float:
        """trio's time of the last change of state."""
        return self._level.since

    def down_for(self, now: float) -> float:
        """Seconds since the stream was last UP (0 while it is), however many attempts since."""
        return 0.0 if self._down_since is None else now - self._down_since

    def report(self, state: StreamState) -> None:
        """The informer's word on the stream (its only writer)."""
        if state is StreamState.DOWN and self._level.value is not StreamState.DOWN:
            self.losses += 1
        if state is StreamState.UP:
            self._down_since = None
        elif self._down_since is None:
            self._down_since = trio.current_time()
        self._level.value = state

    async def admit(self) -> None:
        """Return once the stream is UP; NomadUnreachable if it is not within the wait."""
        if self._level.value is StreamState.UP:
            return
        with trio.move_on_after(self.wait_timeout):
            await self._level.wait_value(lambda state: state is StreamState.UP)
            return
        raise NomadUnreachable(f"the Nomad event stream is {self._level.value.value}")
