"""The event-stream watcher: list, then watch, and after every loss: relist, reconcile, watch again.

Its health is level state (``RunnerService.stream``): DOWN while it cannot follow Nomad, RECOVERING
while it relists, UP while the stream runs. Nothing is cancelled when the stream drops; new claims
and executions wait at the admission gate, running executions never notice.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

import trio
from loguru import logger

from .errors import SupervisorError
from .levels import StreamState
from .service import RunnerService

__all__ = ["EventStreamWatcher"]

_TOPICS: Final = {"Job": "*", "Allocation": "*", "Node": "*"}


class EventStreamWatcher:
    def __init__(
        self,
        service: RunnerService,
        *,
        heartbeat_timeout: float = 45.0,
        resync_interval: float = 60.0,
        base_delay: float = 0.5,
        max_delay: float = 30.0,
        random_fraction: Callable[[], float] = random.random,
    ) -> None:
        self.service = service
        self.heartbeat_timeout = heartbeat_timeout
        self.resync_interval = resync_interval
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._random_fraction = random_fraction
        self._failures = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Never returns; starts at once, with the stream DOWN until the first listing is in."""
        task_status.started()
        while True:
            error: BaseException | None = None
            try:
                await self._follow()
            except* SupervisorError as group:
                error = group.exceptions[0]
            self._failures += 1
            self.service.stream_losses += 1
            self.service.stream.value = StreamState.DOWN
            delay = self._random_fraction() * min(
                self.max_delay, self.base_delay * 2 ** min(self._failures, 16)
            )
            logger.warning("event stream lost ({}); reconnecting in {:.1f}s", error, delay)
            self.service.client.rotate_address()
            await trio.sleep(delay)

    async def _follow(self) -> None:
        """List, then follow the stream, relisting every ``resync_interval``; raises when it ends."""
        service = self.service
        service.stream.value = StreamState.RECOVERING
        index = await service.resync()
        async with service.client.open_event_stream(
            _TOPICS, index=index + 1, heartbeat_timeout=self.heartbeat_timeout
        ) as stream:
            service.stream.value = StreamState.UP
            self._failures = 0  # the backoff starts over after a good connection
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._resync_periodically)
                async for batch in stream:
                    service.apply_batch(batch)

    async def _resync_periodically(self) -> None:
        """Nomad can lose jobs without an event (all agents restarting): only a listing shows it."""
        while True:
            await trio.sleep(self.resync_interval)
            await self.service.resync()
