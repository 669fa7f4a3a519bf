"""Stopping a command in a runner after its exec session ended before it did.

Nomad does not stop such a command (nomad-api.md §5): its stdin stays open and its output unread,
so it runs on or blocks for ever. Every command the daemon starts notes its shell's PID
(``execution_command``, ``noted_command``); stopping it is one more exec, running ``stop_command``
for that note. When Nomad cannot reach the command (its servers restarting, or the runner's agent),
the stop is retried in the background until it can: replacing the runner instead would lose its
files over a restart that its allocation survives. A stop waits only while it is needed: once the
runner is destroyed, Nomad stops its allocation, and the command with it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

import trio
from loguru import logger

from ..base.backoff import Backoff, BackoffPolicy
from ..base.entropy import Entropy
from ..base.errors import ExecAgentUnreachable, ExecAllocationUnknown, SupervisorError, TransientError
from ..core.commands import stop_command
from ..nomad.api import ExecOpener

__all__ = ["CommandStops", "StopOutcome"]

_MARGIN: Final = 5.0
_RETRY: Final = BackoffPolicy(base=2.0, cap=30.0)
# How often a waiting stop looks whether it is still needed.
_NEEDED_EVERY: Final = 1.0


class StopOutcome(enum.Enum):
    """How an attempt to stop a command in a runner ended."""

    STOPPED = "stopped"
    # No Nomad server answered, or the stop's own session broke: worth trying again later.
    UNREACHABLE = "unreachable"
    # A server answered but could not reach the runner's agent (restarting): try again later.
    AGENT_UNREACHABLE = "agent unreachable"
    # Nomad no longer knows the allocation: the command went with it.
    ALLOCATION_GONE = "allocation gone"
    # Nomad refused the exec (the task is not running, say), or the stop did not finish in time.
    FAILED = "failed"

    @property
    def retry(self) -> bool:
        """Whether trying again later may succeed."""
        return self in (StopOutcome.UNREACHABLE, StopOutcome.AGENT_UNREACHABLE)


class CommandStops:
    """The stops of commands in runners: those under way, and those that wait for Nomad to reach
    their command again, each a task in ``nursery`` (the execution nursery: they outlive the
    request that left the command behind)."""

    def __init__(
        self,
        client: ExecOpener,
        *,
        task: str,
        grace: float,
        nursery: trio.Nursery,
        entropy: Entropy | None = None,
    ) -> None:
        self._client = client
        self._task = task
        self._grace = grace
        self._nursery = nursery
        # The retries' jitter.
        self._entropy = Entropy() if entropy is None else entropy
        # The shielded scopes of the stops under way, for the daemon's stop to abandon when its
        # budget ends.
        self._under_way: set[trio.CancelScope] = set()
        # Stops that wait for Nomad to reach their command again.
        self.waiting = 0
        # Set while no stop is under way.
        self._idle = trio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no stop is under way."""
        while self._under_way:
            self._idle = trio.Event()
            await self._idle.wait()

    async def stop(self, alloc_id: str, note_id: str) -> StopOutcome:
        """Stop the command noted as ``note_id`` and everything it started: TERM, then KILL after
        the grace. Shielded: it runs even when the caller is being cancelled."""
        started = False
        with trio.move_on_after(self._grace + _MARGIN, shield=True) as shielded:
            self._under_way.add(shielded)
            try:
                command = stop_command(note_id, self._grace)
                async with self._client.open_exec(alloc_id, task=self._task, command=command) as session:
                    started = True
                    await session.wait_exit()
                return StopOutcome.STOPPED
            except TransientError as exc:
                logger.info(
                    "stopping command {} in allocation {}: Nomad unreachable ({})", note_id, alloc_id, exc
                )
                return StopOutcome.UNREACHABLE
            except ExecAgentUnreachable as exc:
                logger.info("stopping command {} in allocation {}: {}", note_id, alloc_id, exc.reason)
                return StopOutcome.AGENT_UNREACHABLE
            except ExecAllocationUnknown:
                return StopOutcome.ALLOCATION_GONE
            except SupervisorError as exc:
                logger.warning("could not stop command {} in allocation {}: {}", note_id, alloc_id, exc)
                return StopOutcome.FAILED
            finally:
                self._under_way.discard(shielded)
                if not self._under_way:
                    self._idle.set()
        if not started:
            logger.info(
                "stopping command {} in allocation {}: Nomad did not answer in time", note_id, alloc_id
            )
            return StopOutcome.UNREACHABLE
        logger.warning("stopping command {} in allocation {} did not finish in time", note_id, alloc_id)
        return StopOutcome.FAILED

    async def stop_in_runner(
        self,
        alloc_id: str,
        note_id: str,
        *,
        needed: Callable[[], bool],
        on_failure: Callable[[], None] = lambda: None,
    ) -> StopOutcome:
        """Stop the noted command now or, when Nomad cannot reach it (no server, or its agent away),
        from a task of its own as soon as it can, for as long as ``needed`` says its allocation is
        still a runner's. ``on_failure`` runs if Nomad refuses the stop or the stop does not finish.
        Returns the first attempt's outcome."""
        stop = partial(self.stop, alloc_id, note_id)
        outcome = await stop()
        if outcome.retry:
            self._nursery.start_soon(self._stop_when_reached, stop, on_failure, needed)
        elif outcome is StopOutcome.FAILED:
            on_failure()
        return outcome

    async def _stop_when_reached(
        self,
        stop: Callable[[], Awaitable[StopOutcome]],
        on_failure: Callable[[], None],
        needed: Callable[[], bool],
    ) -> None:
        backoff = Backoff(_RETRY, random_fraction=self._entropy.fraction)
        self.waiting += 1
        try:
            while True:
                # A look each second: a runner's end sets no event, and the look is one dict lookup.
                with trio.move_on_after(backoff.failed(trio.current_time())):
                    while needed():  # noqa: ASYNC110
                        await trio.sleep(_NEEDED_EVERY)
                if not needed():
                    return
                outcome = await stop()
                if outcome is StopOutcome.FAILED:
                    on_failure()
                if not outcome.retry:
                    return
        finally:
            self.waiting -= 1

    def abandon(self) -> int:
        """Cancel every stop under way, shield and all (the daemon's stop has run out of time: the
        next start's sweep of adopted claims stops what they left); returns how many there were."""
        scopes = list(self._under_way)
        for scope in scopes:
            scope.shield = False
            scope.cancel("the supervisor's stop ran out of time")
        return len(scopes)
