"""The event-stream watcher: the one that keeps the pool's view of Nomad.

As client-go's Reflector does it: list, reconcile at the listing's index, then watch from that
index; after every loss of the stream, the same again. Relists asked for meanwhile (the periodic
safety net, the prewarming-pool alert, evidence that runners are gone) run in a task of their own,
in turn with the stream's batches and never beside one, first come first served: a batch read while
a listing runs waits for it, a listing asked for while a batch is applied waits for that one. A
listing is so applied in order with the events, and of a batch that a listing already covers only
the Node events are applied. Each batch is applied in the task that reads it, without a turn of
the scheduler while nothing waits and the stream has more in its buffer: a busy cluster writes
hundreds of batches a second, and handing each to another task cost a turn each, which under load
is what the events waited for.

It reports the stream's health to the admission gate (``RunnerService.gate``), its only writer: DOWN
while it cannot follow Nomad, RECOVERING while it relists after a loss, UP while the stream runs.
Nothing is cancelled when the stream drops; new claims and executions wait at the gate, running
executions never notice.
"""

from __future__ import annotations

from typing import Final, NoReturn

import trio
from loguru import logger

from .backoff import Backoff, BackoffPolicy
from .errors import SupervisorError
from .levels import StreamState
from .memory import release_free_memory
from .nomad import EventStream
from .service import RunnerService

__all__ = ["EventStreamWatcher"]

_TOPICS: Final = {"Job": "*", "Allocation": "*", "Node": "*"}
# Seconds a stream must stay up before the failures before it are forgotten.
STREAM_HEALTHY_AFTER: Final = 2.0
# The longest pause between reconnects. The gate holds every new claim while the stream is down,
# and a reconnect costs one listing (at 10,000 runners about 18 MiB and 0.7 s of the daemon's CPU,
# scripts/bench_recovery.py), which even every 10 s is a small share of a core: 10 s, not more.
STREAM_BACKOFF_CAP: Final = 10.0


class EventStreamWatcher:
    """Lists, reconciles and watches Nomad for the pool."""

    def __init__(
        self,
        service: RunnerService,
        *,
        heartbeat_timeout: float = 45.0,
        resync_interval: float = 60.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.service = service
        self.heartbeat_timeout = heartbeat_timeout
        self.resync_interval = resync_interval
        # A stream must stay up this long before its failures are forgotten: a server that flaps
        # must not earn a full relist every half second, but one that restarted after serving a
        # while must not cost the next reconnect the growing pause of a flapping one.
        self.backoff = backoff or Backoff(
            BackoffPolicy(0.5, STREAM_BACKOFF_CAP), healthy_after=STREAM_HEALTHY_AFTER
        )
        # Since when the stream is down (None while it is up, or before it first was).
        self._lost_at: float | None = None
        # When the watcher last moved on (an attempt, a listing, a batch, a heartbeat), for the
        # systemd watchdog: a watcher stuck anywhere stops it.
        self.progress_at = 0.0
        # Since when the watcher lists (at a connect, or when asked); None otherwise. A batch is
        # applied in the same step as its read, unless it waits for a listing.
        self._busy_since: float | None = None
        self._stream: EventStream | None = None
        self._heartbeats_seen = 0
        # Relists carried out, by what asked for them ("connect", "periodic", ...).
        self.relists: dict[str, int] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> NoReturn:
        """Never returns; starts at once, with the stream DOWN until the first listing is in."""
        task_status.started()
        try:
            await self._watch()
        finally:
            self.service.gate.report(StreamState.DOWN)  # crashed or cancelled: nobody follows Nomad

    def making_progress(self, within: float) -> bool:
        """Whether the watcher moved on within the last ``within`` seconds: on a quiet stream,
        Nomad's heartbeats count."""
        now = trio.current_time()
        if self._busy_since is not None:  # heartbeats arrive on their own: they prove nothing then
            return now - self._busy_since <= within
        stream = self._stream
        if stream is not None and stream.statistics.heartbeats != self._heartbeats_seen:
            self._heartbeats_seen = stream.statistics.heartbeats
            self._progressed()
        return now - self.progress_at <= within

    def _progressed(self) -> None:
        self.progress_at = trio.current_time()

    async def _watch(self) -> NoReturn:
        while True:
            self._progressed()
            error: BaseException | None = None
            try:
                await self._follow()
            except* SupervisorError as group:
                error = group.exceptions[0]
            self.service.gate.report(StreamState.DOWN)
            if self._lost_at is None:
                self._lost_at = trio.current_time()
            self._stream, self._busy_since = None, None
            self._progressed()
            delay = self.backoff.failed(trio.current_time())
            cause = f"event stream lost: {type(error).__name__ if error else 'it ended'}"
            logger.bind(cause=cause).warning("event stream lost ({}); reconnecting in {:.3f}s", error, delay)
            self.service.client.rotate_address()
            await trio.sleep(delay)

    async def _follow(self) -> None:
        """List, then watch from the listing's index, relisting when asked; raises when the stream
        ends."""
        service = self.service
        service.gate.report(StreamState.RECOVERING)
        service.relists.clear()  # the connect's own listing serves every request made so far
        index = await self._relist(["connect"])
        async with service.client.open_event_stream(
            _TOPICS, index=index + 1, heartbeat_timeout=self.heartbeat_timeout
        ) as stream:
            self._stream, self._heartbeats_seen = stream, 0
            service.gate.report(StreamState.UP)
            self.backoff.healthy(trio.current_time())
            if self._lost_at is None:
                logger.info("event stream up from index {}", index + 1)
            else:
                down = trio.current_time() - self._lost_at
                logger.info("event stream up from index {} after {:.1f}s without it", index + 1, down)
                self._lost_at = None
            # Whose turn it is, a batch's or a listing's, first come first served.
            turn = trio.Lock()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._relist_when_asked, turn)
                nursery.start_soon(self._request_periodically)
                while True:
                    batch = await stream.receive()
                    await _take(turn)
                    try:
                        service.apply_batch(batch)
                    finally:
                        turn.release()
                    self._progressed()

    async def _relist(self, reasons: list[str]) -> int:
        self._busy_since = trio.current_time()
        try:
            index = await self.service.relist()
        finally:
            self._busy_since = None
        self._progressed()
        release_free_memory()  # the listing's decoded objects are freed by now
        for reason in reasons:
            self.relists[reason] = self.relists.get(reason, 0) + 1
        logger.debug("relisted at index {} ({})", index, ", ".join(reasons))
        return index

    async def _relist_when_asked(self, turn: trio.Lock) -> None:
        """Carry out the relists asked for, in turn with the stream's batches, never beside one."""
        while True:
            reasons = await self.service.relists.wait()
            async with turn:
                await self._relist(reasons)

    async def _request_periodically(self) -> None:
        """Nomad can lose jobs without an event (all agents restarting): only a listing shows it."""
        while True:
            await trio.sleep(self.resync_interval)
            self.service.request_relist("periodic")


async def _take(turn: trio.Lock) -> None:
    """Take the turn: at once, without a turn of the scheduler, when nobody holds it or waits."""
    try:
        turn.acquire_nowait()
    except trio.WouldBlock:
        await turn.acquire()
        try:
            # A listing that failed hands the turn over as the stream's nursery is cancelled: its
            # batch must not be applied over a reconcile left halfway.
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            turn.release()
            raise
