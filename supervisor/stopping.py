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
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

import trio
from loguru import logger

from .backoff import Backoff, BackoffPolicy
from .commands import stop_command
from .errors import ExecAgentUnreachable, ExecAllocationUnknown, SupervisorError, TransientError
from .nomad.api import ExecOpener

__all__ = ["StopOutcome", "abandon_stops", "stop_in_runner", "stop_noted", "stops_waiting"]

_MARGIN: Final = 5.0
# The shielded scopes of the stops under way, for the daemon's stop to abandon when its budget ends.
_UNDER_WAY: weakref.WeakSet[trio.CancelScope] = weakref.WeakSet()
_RETRY: Final = BackoffPolicy(base=2.0, cap=30.0)
# How often a waiting stop looks whether it is still needed.
_NEEDED_EVERY: Final = 1.0
# Stops that wait for Nomad to reach their command again (each a task of its own).
_waiting = 0


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


async def stop_noted(
    client: ExecOpener, *, task: str, alloc_id: str, note_id: str, grace: float
) -> StopOutcome:
    """Stop the command noted as ``note_id`` and everything it started: TERM, then KILL after
    ``grace``. Shielded: it runs even when the caller is being cancelled."""
    started = False
    with trio.move_on_after(grace + _MARGIN, shield=True) as shielded:
        _UNDER_WAY.add(shielded)
        try:
            async with client.open_exec(alloc_id, task=task, command=stop_command(note_id, grace)) as session:
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
    if not started:
        logger.info("stopping command {} in allocation {}: Nomad did not answer in time", note_id, alloc_id)
        return StopOutcome.UNREACHABLE
    logger.warning("stopping command {} in allocation {} did not finish in time", note_id, alloc_id)
    return StopOutcome.FAILED


async def stop_in_runner(
    client: ExecOpener,
    *,
    task: str,
    alloc_id: str,
    note_id: str,
    grace: float,
    nursery: trio.Nursery,
    needed: Callable[[], bool],
    on_failure: Callable[[], None] = lambda: None,
) -> StopOutcome:
    """Stop the noted command now or, when Nomad cannot reach it (no server, or its agent away),
    from a task in ``nursery`` as soon as it can, for as long as ``needed`` says its allocation is
    still a runner's. ``on_failure`` runs if Nomad refuses the stop or the stop does not finish.
    Returns the first attempt's outcome."""
    stop = partial(stop_noted, client, task=task, alloc_id=alloc_id, note_id=note_id, grace=grace)
    outcome = await stop()
    if outcome.retry:
        nursery.start_soon(_stop_when_reached, stop, on_failure, needed)
    elif outcome is StopOutcome.FAILED:
        on_failure()
    return outcome


async def _stop_when_reached(
    stop: Callable[[], Awaitable[StopOutcome]], on_failure: Callable[[], None], needed: Callable[[], bool]
) -> None:
    global _waiting
    backoff = Backoff(_RETRY)
    _waiting += 1
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
        _waiting -= 1


def stops_waiting() -> int:
    """Commands whose stop waits for Nomad to reach them again (their agent away, or no server)."""
    return _waiting


def abandon_stops() -> int:
    """Cancel every stop under way, shield and all (the daemon's stop has run out of time: the next
    start's sweep of adopted claims stops what they left); returns how many there were."""
    scopes = [scope for scope in _UNDER_WAY if not scope.cancelled_caught]
    for scope in scopes:
        scope.shield = False
        scope.cancel("the supervisor's stop ran out of time")
    return len(scopes)
