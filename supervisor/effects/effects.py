"""Effects: the one place where the pool's actions are carried out.

The pool decides; ``Effects.tell`` hands it a change through its one entry and carries out what it
returned (``Effects.apply``), as controller-runtime's workqueue carries out what a reconciler
decides: Nomad's writes go to the factory (rate-limited, spread over agents, with one backoff), the
executions of a runner that is gone are ended, relists are asked of the informer, a runner's first
start is timed by the factory, and what is only news (a node avoided, runners found gone) is logged
once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, Protocol

import trio
from loguru import logger

from ..base.levels import Requests
from ..core.evidence import Moment
from ..core.nodes import AWAY_SECONDS
from ..core.orders import Change, PoolDoor
from ..core.runners import (
    REASON_DESTROYED,
    REASON_ENVIRONMENT,
    Action,
    DestroyRunner,
    MarkUsed,
    NodeAvoided,
    ProbeRunner,
    RelistWanted,
    RunnerGone,
    RunnerStarted,
)
from .expiry import InactivityExpiry
from .factory import RunnerFactory
from .leftovers import LeftoverSweep
from .probes import RunnerProbes

__all__ = ["Effects", "ExecutionEnds"]

# Ends that are not news: a client gave its runner back, or its environment was deleted (one line).
_ROUTINE_ENDS: Final = frozenset({REASON_DESTROYED, REASON_ENVIRONMENT})
# Runners named in one such line; more are counted.
_NAMED: Final = 5


class ExecutionEnds(Protocol):
    """Where the executions of a runner that is gone are ended (the runner desk's executions)."""

    def runner_gone(self, runner_id: str, reason: str) -> None:
        """End every execution on the runner with ``reason``."""


class Effects:
    """Carries out the pool's actions; its children are the factory's loop and the inactivity expiry."""

    def __init__(
        self,
        pool: PoolDoor,
        factory: RunnerFactory,
        executions: ExecutionEnds,
        relists: Requests,
        leftovers: LeftoverSweep,
        probes: Callable[[Callable[[Change], object]], RunnerProbes],
    ) -> None:
        self.factory = factory
        self._door = pool
        # The pool's reads, for the parts that hand it changes through ``tell``.
        self.pool = pool.view
        self._executions = executions
        self.relists = relists
        # The commands that cut sessions left in runners, stopped before new work starts there.
        self.leftovers = leftovers
        self.expiry = InactivityExpiry(pool.view, self.tell)
        # Commands run in suspect runners, whose success proves them.
        self.probes = probes(self.tell)

    def tell(self, change: Change, at: Moment | None = None) -> list[Action]:
        """Hand the pool one change at ``at`` (now, by trio's clock, when not given: only the
        informer's facts need how far the stream has flowed), carry out what it decides, and return
        that. An order the pool cannot carry out raises its error and changes nothing."""
        actions = self._door.handle(change, at if at is not None else Moment(trio.current_time()))
        self.apply(actions)
        return actions

    def claims_adopted(self, runner_ids: Iterable[str]) -> None:
        """Claims of a previous run, adopted at the start: the commands it left in them are
        stopped, and their inactivity deadlines count."""
        self.leftovers.adopt(runner_ids)
        self.expiry.changed()

    def deadlines_changed(self, runner_id: str | None = None) -> None:
        """The runner's inactivity deadline may have come sooner (a claim, work in it that ended);
        without a runner, any may have (a listing)."""
        if runner_id is None:
            self.expiry.changed()
        elif (deadline := self.pool.inactivity_deadline(runner_id)) is not None:
            self.expiry.deadline_set(deadline)

    def apply(self, actions: Iterable[Action]) -> None:
        """Carry out the pool's actions. Runners destroyed for a cause other than their release or
        their environment's deletion are logged at INFO, one line per cause with the count; each one
        at DEBUG."""
        gone: dict[str, list[str]] = {}
        for action in actions:
            if isinstance(action, DestroyRunner) and action.reason not in _ROUTINE_ENDS:
                gone.setdefault(action.reason, []).append(action.runner_id)
            if isinstance(action, MarkUsed):
                self.deadlines_changed(action.runner_id)  # a claim: a new inactivity deadline
            if isinstance(action, RunnerGone):
                self._executions.runner_gone(action.runner_id, action.reason)
            elif isinstance(action, RunnerStarted):
                self.factory.started(action.runner_id)
            elif isinstance(action, RelistWanted):
                self.relists.request(action.reason)
            elif isinstance(action, ProbeRunner):
                self.probes.probe(action.runner_id, action.alloc_id)
            elif isinstance(action, NodeAvoided):
                why = (
                    "its agent has said nothing of the runners placed there"
                    if action.silent
                    else "an exec could not reach its agent"
                )
                logger.warning(
                    "node {}: {}; new runners avoid it for up to {:.0f}s", action.node, why, AWAY_SECONDS
                )
            else:
                self.factory.submit(action)
        for reason, runner_ids in gone.items():
            named = ", ".join(runner_ids[:_NAMED]) + (", ..." if len(runner_ids) > _NAMED else "")
            plural = "" if len(runner_ids) == 1 else "s"
            logger.info("{} runner{} gone: {} ({})", len(runner_ids), plural, reason, named)
