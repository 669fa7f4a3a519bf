"""What the daemon tells systemd: READY=1 once the first listing is reconciled and the API serves;
STATUS= when it changes; WATCHDOG=1 while this loop runs and the informer makes progress.
"""

from __future__ import annotations

from typing import Final, final

import trio

from ..ops.observability import status_line
from ..ops.systemd import SystemdNotifier
from .graceful_stop import GracefulStop
from .term import Terms

__all__ = ["SystemdReporting"]

# systemd's STATUS= is refreshed this often at most (seconds), and the watchdog pinged as often as
# it asks, while the informer has moved on within _INFORMER_STUCK seconds: a quiet stream has a
# heartbeat every 30 s and a lost one a reconnect attempt within the backoff's 10 s cap, each
# bounded by its own timeout.
_STATUS_EVERY: Final = 5.0
_INFORMER_STUCK: Final = 120.0


@final
class SystemdReporting:
    """Tells ``notifier`` how the daemon is, until the stop."""

    def __init__(
        self, notifier: SystemdNotifier, stop: GracefulStop, api_serving: trio.Event, terms: Terms
    ) -> None:
        self._notifier = notifier
        self._stop = stop
        self._api_serving = api_serving
        self._terms = terms

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Report until the stop (at once, without systemd)."""
        task_status.started()
        if not self._notifier.enabled:
            return
        every = min(self._notifier.watchdog_interval or _STATUS_EVERY, _STATUS_EVERY)
        readiness = trio.Event()

        async def wake_when_ready() -> None:
            await self._api_serving.wait()
            await self._terms.first_started.wait()
            assert self._terms.service is not None
            await self._terms.service.wait_synced()
            readiness.set()

        async with trio.open_nursery() as waiting:
            waiting.start_soon(wake_when_ready)
            await self._notify_until_stopped(every, readiness)
            waiting.cancel_scope.cancel("the daemon stops")

    async def _notify_until_stopped(self, every: float, readiness: trio.Event) -> None:
        notifier = self._notifier
        ready, told = False, ""
        while not self._stop.requested:
            lines = []
            service = self._terms.service
            if not ready and readiness.is_set():
                ready = True
                lines.append("READY=1")
            starting = "starting: waiting for Nomad's first listing"
            status = status_line(service) if ready and service is not None else starting
            if status != told:
                told = status
                lines.append(f"STATUS={status}")
            if notifier.watchdog_interval and (service is None or service.making_progress(_INFORMER_STUCK)):
                lines.append("WATCHDOG=1")
            if lines:
                notifier.notify(*lines)
            with trio.move_on_after(every):
                if ready:
                    await self._stop.wait()
                else:
                    await readiness.wait()  # not ready yet: woken when it is
