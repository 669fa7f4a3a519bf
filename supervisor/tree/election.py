"""Which of several daemons acts: the holder of a Nomad Variables lock (``[ha]``).

The lock is Nomad's (``nomad/locks.py``): no home-made election, no other store. ``acquire`` returns
once this daemon holds it, trying again every ``ttl / 3`` and at once when the variable changes (a
release, or a lapsed lock cleared after its LockDelay). ``hold`` renews every ``ttl / 3`` and returns
*before* the TTL has run out since the last renewal that Nomad accepted was sent, if no renewal got
through by then: the caller steps down at that moment, while Nomad still keeps the lock from
everyone else (it lapses no sooner than one TTL after it processed that renewal, and is then kept
for LockDelay more). Durations are measured on this process's monotonic clock; nothing assumes that
the daemon's and Nomad's clocks agree on the time of day, only that neither runs faster than the
other by more than the margin of ``STEP_DOWN_MARGIN`` over a TTL.
"""

from __future__ import annotations

from typing import Final, NoReturn, Protocol

import trio
from loguru import logger

from ..base.errors import LockRefused, NomadPermissionDenied, NomadRequestError, TransientError
from ..core.config import HaSettings
from ..nomad.locks import VariableLocks

__all__ = ["STEP_DOWN_MARGIN", "AlwaysActive", "Elector", "LockElector", "lock_refused"]

# The active steps down this share of the TTL before the TTL has run out since its last accepted
# renewal was sent: room for a clock that runs slow and for the step-down itself.
STEP_DOWN_MARGIN: Final = 0.2
# After a failed renewal (no answer, a 5xx), the next try comes this soon, if the TTL leaves room.
_RENEW_RETRY: Final = 0.5


class Elector(Protocol):
    """Which daemon is active: ``acquire`` waits until this one is, ``hold`` returns (with why)
    when it no longer is, ``release`` gives it up at a clean stop."""

    async def acquire(self) -> float:
        """Wait until this daemon is active; the time the winning request was sent."""
        ...

    async def hold(self, acquired_at: float) -> str:
        """Stay active until that can no longer be ensured; why it returned."""
        ...

    async def release(self) -> None:
        """Give it up, so that a standby takes over at once."""

    def stepped_down(self) -> None:
        """No longer active (lost, or not renewed in time)."""


class AlwaysActive:
    """The elector of a daemon without ``[ha]``: active from the start until the stop."""

    async def acquire(self) -> float:
        """At once."""
        await trio.lowlevel.checkpoint()
        return trio.current_time()

    async def hold(self, acquired_at: float) -> NoReturn:
        """For ever."""
        await trio.sleep_forever()

    async def release(self) -> None:
        """Nothing to give up."""
        await trio.lowlevel.checkpoint()

    def stepped_down(self) -> None:
        """Never happens."""


def lock_refused(path: str, exc: NomadRequestError) -> str:
    """Why Nomad refuses the lock at ``path`` for good, and what to do, in one line."""
    text = exc.body.strip() or str(exc)
    if isinstance(exc, NomadPermissionDenied):
        remedy = f"the token needs variables read and write on {path} in the daemon's namespace"
    else:
        remedy = "mend ha.lock_path or ha.ttl"
    return f"Nomad refuses the HA lock {path} (HTTP {exc.status_code}: {text}): {remedy}"


class LockElector:
    """Takes the ``[ha]`` lock and holds it; one instance per daemon."""

    def __init__(self, locks: VariableLocks, settings: HaSettings) -> None:
        self._locks = locks
        self._settings = settings
        self.lock_id: str | None = None
        # Seconds on trio's clock when this daemon last became active, and how often it did.
        self.active_since: float | None = None
        self.terms = 0

    @property
    def interval(self) -> float:
        """How often the lock is tried by a standby, and renewed by the active."""
        return self._settings.ttl / 3

    async def acquire(self) -> float:
        """Wait until this daemon holds the lock; the time its winning request was sent."""
        path, settings = self._settings.lock_path, self._settings
        seen = 0
        while True:
            sent = trio.current_time()
            try:
                lock_id = await self._locks.acquire(path, settings.ttl, settings.lock_delay)
            except TransientError as exc:
                logger.warning("the HA lock {} could not be tried: {}", path, exc)
                lock_id = None
            except NomadRequestError as exc:
                raise LockRefused(lock_refused(path, exc)) from exc
            if lock_id is not None:
                self.lock_id = lock_id
                self.active_since = trio.current_time()
                self.terms += 1
                logger.info("took the HA lock {}: this daemon is active", path)
                return sent
            with trio.move_on_after(self.interval):
                try:
                    seen = await self._locks.wait_for_change(path, seen, wait=self.interval)
                except NomadPermissionDenied as exc:
                    raise LockRefused(lock_refused(path, exc)) from exc
                except (TransientError, NomadRequestError) as exc:
                    logger.debug("waiting for the HA lock {} to change: {}", path, exc)
                    await trio.sleep_forever()  # Nomad is away: try again after the interval
                if seen == 0:  # the variable does not exist: nobody holds the lock
                    continue
                # Woken by a change: the lock may be free now; a timeout tries again as well.

    async def hold(self, acquired_at: float) -> str:
        """Renew until the lock is lost or cannot be renewed in time; why it returned."""
        assert self.lock_id is not None, "hold() needs acquire() first"
        ttl = self._settings.ttl
        accepted = acquired_at  # when the last renewal Nomad accepted was sent
        while True:
            step_down_at = accepted + ttl * (1 - STEP_DOWN_MARGIN)
            await trio.sleep_until(min(accepted + self.interval, step_down_at))
            renewed = await self._renew_before(step_down_at)
            if renewed is None:
                return f"no renewal of the HA lock got through within {ttl * (1 - STEP_DOWN_MARGIN):g}s"
            if renewed is False:
                return "the HA lock was lost"
            accepted = renewed

    async def _renew_before(self, step_down_at: float) -> float | bool | None:
        """The send time of a renewal Nomad accepted, False if the lock is lost, None if no
        renewal got through before ``step_down_at``."""
        assert self.lock_id is not None
        with trio.move_on_at(step_down_at):
            while True:
                sent = trio.current_time()
                try:
                    if not await self._locks.renew(self._settings.lock_path, self.lock_id):
                        return False
                    return sent
                except (TransientError, NomadRequestError) as exc:
                    logger.warning("renewing the HA lock failed: {}", exc)
                await trio.sleep(_RENEW_RETRY)
        return None

    async def release(self) -> None:
        """Give the lock up, so that a standby takes over at once (a clean stop)."""
        lock_id, self.lock_id = self.lock_id, None
        self.active_since = None
        if lock_id is None:
            return
        try:
            await self._locks.release(self._settings.lock_path, lock_id)
            logger.info("released the HA lock {}", self._settings.lock_path)
        except (TransientError, NomadRequestError) as exc:
            logger.warning("the HA lock could not be released (it lapses after its TTL): {}", exc)

    def stepped_down(self) -> None:
        """The lock is no longer this daemon's to use (lost, or not renewed in time)."""
        self.lock_id = None
        self.active_since = None
