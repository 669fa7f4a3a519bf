"""What a scenario sees of the daemon it runs in its own trio run, after every step of every task:
each change of the admission gate, with trio's time, and any runner its pool holds again after a
client gave it back. A trio instrument, so nothing is sampled: a change that lasts one step is seen.
"""

from __future__ import annotations

import bisect

import trio

from supervisor.base.levels import StreamState
from supervisor.desk.service import RunnerService

__all__ = ["DaemonWatch"]


class DaemonWatch(trio.abc.Instrument):
    """The gate's history and the released runners the pool took back, from ``install`` on."""

    def __init__(self, service: RunnerService) -> None:
        self._gate = service.gate
        self._runners = service.pool.runners
        # (trio's time, the gate's state from then on), one entry per change.
        self.changes: list[tuple[float, StreamState]] = []
        # The runners whose release a client was answered; those the pool held again since, with
        # when it was first seen holding each.
        self.released: set[str] = set()
        self.back: dict[str, float] = {}

    def install(self) -> None:
        self.changes.append((trio.current_time(), self._gate.state))
        trio.lowlevel.add_instrument(self)

    def remove(self) -> None:
        trio.lowlevel.remove_instrument(self)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        state = self._gate.state
        if state is not self.changes[-1][1]:
            self.changes.append((trio.current_time(), state))
        if not self._runners.keys().isdisjoint(self.released):
            for runner_id in self.released.intersection(self._runners):
                self.back.setdefault(runner_id, trio.current_time())

    def up_during(self, start: float, end: float) -> bool:
        """Whether the gate was UP at some moment from ``start`` to ``end`` (trio's times)."""
        times = [at for at, _ in self.changes]
        first = max(bisect.bisect_right(times, start) - 1, 0)
        return any(state is StreamState.UP for at, state in self.changes[first:] if at <= end)

    def state_at(self, moment: float) -> StreamState:
        """The gate's state at ``moment``."""
        times = [at for at, _ in self.changes]
        return self.changes[max(bisect.bisect_right(times, moment) - 1, 0)][1]
