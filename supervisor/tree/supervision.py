"""Restart policy and shutdown as data, as Erlang/OTP's supervisors do it, on trio's clock.

Each long-lived child of the daemon has a ``ChildSpec``: its name, how to start it from the typed
parts of the daemon (a ``Starter``, which makes its ``ChildRun``), its restart policy, and how it
shuts down. Children are grouped in ``TierSpec``s that start in order and stop in reverse (OTP's
``rest_for_one`` ordering: a tier depends on the ones before it). ``supervise`` runs one child in
its tier's nursery and restarts it as its policy says, one for one (a child's crash touches no
sibling):

- ``PERMANENT``: always restarted, whether it crashed or returned;
- ``TRANSIENT``: restarted only after a crash; returning is a normal end;
- ``TEMPORARY``: never restarted; a crash is logged and the child stays down.

A crash is logged with its traceback and the child restarted after a backoff. Every restart of every
child counts against one ``RestartIntensity``: more than ``intensity`` restarts within ``period``
seconds, and the supervisor gives up and calls its ``escalate`` callback (the daemon's graceful stop,
so that systemd starts it afresh) instead of restarting for ever. Cancellation is never caught.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar, cast

import trio
from attrs import define, field, frozen
from loguru import logger

from ..base.backoff import Backoff, BackoffPolicy
from ..base.entropy import Entropy

__all__ = [
    "ChildRun",
    "ChildSpec",
    "PartsT",
    "Restart",
    "RestartIntensity",
    "Shutdown",
    "Starter",
    "TierSpec",
    "supervise",
]


class Restart(enum.Enum):
    """When a child is restarted: always, after a crash only, or never."""

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class Shutdown(enum.Enum):
    """How a child stops when its tier does: cancelled at once, or asked at the stop's start and
    waited for (within its share of the stop's budget) before its tier is cancelled."""

    CANCEL = "cancel"
    DRAIN = "drain"


class ChildRun(Protocol):
    """A child's run, as every long-lived service has it: it serves until it is done, and says it
    is ready through ``task_status`` once it truly is."""

    def __call__(self, *, task_status: trio.TaskStatus[object] = ...) -> Awaitable[object]:
        """Run the child; ``task_status.started()`` once it is ready."""
        ...


# What a child starts from: the daemon's parts, or a term's.
PartsT = TypeVar("PartsT")

# How a spec makes its child's run from the typed parts it starts from, and the nursery of its tier
# (for work the child hands on, which is to outlive a crash of the child's own task).
Starter = Callable[[PartsT, trio.Nursery], ChildRun]


@frozen
class ChildSpec(Generic[PartsT]):
    """One long-lived child: its name, how to start it, its restart policy, and how it stops
    (``share``: the part of the stop's budget a draining child may take)."""

    name: str
    start: Starter[PartsT]
    restart: Restart = Restart.PERMANENT
    shutdown: Shutdown = Shutdown.CANCEL
    share: float = 0.0
    # How a draining child is asked to stop, at the stop's start (None: it watches for the stop).
    ask: Callable[[PartsT], Callable[[], None]] | None = None
    # Where it runs only in a daemon with [ha].
    ha_only: bool = False
    # What it is, in a few words, for the drawn tree.
    role: str = ""


@frozen
class TierSpec(Generic[PartsT]):
    """Children that start together, after the tiers before them, and stop before them."""

    name: str
    children: tuple[ChildSpec[PartsT], ...]
    # What else runs in the tier, unsupervised, in a few words for the drawn tree (its last line).
    also_runs: str = ""


@define
class RestartIntensity:
    """At most ``intensity`` restarts in any ``period`` seconds, counted on trio's clock."""

    intensity: int = 5
    period: float = 30.0
    # Restarts so far, of every child.
    total: int = 0
    _restarts: deque[float] = field(factory=deque)

    def allow(self, now: float) -> bool:
        """Count a restart at ``now``; False once there were too many within the period."""
        self.total += 1
        self._restarts.append(now)
        while self._restarts and now - self._restarts[0] > self.period:
            self._restarts.popleft()
        return len(self._restarts) <= self.intensity


async def supervise(
    spec: ChildSpec[PartsT],
    run: ChildRun,
    intensity: RestartIntensity,
    escalate: Callable[[str], None],
    *,
    backoff: Backoff | None = None,
    entropy: Entropy | None = None,
    stopping: Callable[[], bool] = lambda: False,
    task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``spec``'s child (``run``) until its policy says it is over, restarting it as the
    policy says.

    The first start reports readiness through ``task_status`` (a crash before it reaches the
    caller of ``nursery.start``, as an ordinary start would); restarts report nothing. Once
    ``stopping()`` is true, a child that ends is not restarted: the daemon is on its way out.
    Without a ``backoff``, the pauses between restarts draw their jitter from ``entropy``.
    """
    if backoff is None:
        fraction = (Entropy() if entropy is None else entropy).fraction
        backoff = Backoff(BackoffPolicy(0.5, 10.0), healthy_after=intensity.period, random_fraction=fraction)
    readiness: _Readiness | None = _Readiness(task_status)
    while True:
        crashed = False
        started_at = trio.current_time()
        try:
            if readiness is not None:
                await run(task_status=cast(trio.TaskStatus[Any], readiness))
            else:
                await run()
        except BaseException as exc:
            crash, cancelled = _split_crash(exc)
            if crash is None or (readiness is not None and not readiness.reported):
                raise  # a cancellation; or it never became ready: its caller hears, as from any start
            logger.opt(exception=crash).error("{} crashed", spec.name)
            if cancelled is not None:
                # The crash met its tier's cancellation: that goes on to its scope.
                raise cancelled from None
            crashed = True
        if readiness is not None and not readiness.reported:
            return  # it ended without becoming ready: nursery.start says so to the caller
        readiness = None
        if stopping():
            return
        if spec.restart is Restart.TEMPORARY or (spec.restart is Restart.TRANSIENT and not crashed):
            if crashed:
                logger.warning("{} is temporary: it stays down", spec.name)
            return
        now = trio.current_time()
        if not intensity.allow(now):
            logger.error(
                "{} restarted more than {} times in {:g} s: giving up",
                spec.name,
                intensity.intensity,
                intensity.period,
            )
            escalate(f"{spec.name} kept failing")
            return
        backoff.healthy(started_at)
        delay = backoff.failed(now)
        logger.warning("restarting {} in {:.1f}s", spec.name, delay)
        await trio.sleep(delay)


def _split_crash(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    """A child's end as (its crash, what else came with it): a task of its own nursery may crash
    in the very step its tier is cancelled, and the nursery raises both as one group."""
    if isinstance(exc, Exception):
        return exc, None
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(Exception)
    return None, exc


class _Readiness:
    """The caller's task status, noting whether the child reported itself ready."""

    def __init__(self, task_status: trio.TaskStatus[Any]) -> None:
        self._task_status = task_status
        self.reported = False

    def started(self, value: object = None) -> None:
        self.reported = True
        self._task_status.started(value)
