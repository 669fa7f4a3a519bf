"""Effects: the one place where the pool's actions are carried out.

The pool decides; ``Effects.apply`` carries out what it returned, as controller-runtime's workqueue
carries out what a reconciler decides: Nomad's writes go to the factory (rate-limited, spread over
agents, with one backoff), the executions of a runner that is gone are ended, relists are asked of
the informer, and what is only news (a node avoided, runners found gone) is logged once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol

from loguru import logger

from ..base.levels import Requests
from ..core.nodes import AWAY_SECONDS
from ..core.pool import RunnerPool
from ..core.runners import (
    REASON_DESTROYED,
    REASON_ENVIRONMENT,
    Action,
    DestroyRunner,
    MarkUsed,
    NodeAvoided,
    RelistWanted,
    RunnerGone,
)
from .expiry import InactivityExpiry
from .factory import RunnerFactory
from .leftovers import LeftoverSweep

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
        pool: RunnerPool,
        factory: RunnerFactory,
        executions: ExecutionEnds,
        relists: Requests,
        leftovers: LeftoverSweep,
    ) -> None:
        self.factory = factory
        self._executions = executions
        self._relists = relists
        self._leftovers = leftovers
        self.expiry = InactivityExpiry(pool, self.apply)

    def claims_adopted(self, runner_ids: Iterable[str]) -> None:
        """Claims of a previous run, adopted at the start: the commands it left in them are
        stopped, and their inactivity deadlines count."""
        self._leftovers.adopt(runner_ids)
        self.expiry.changed()

    def deadlines_changed(self) -> None:
        """An inactivity deadline may have come sooner (a claim, a listing, an execution that ended)."""
        self.expiry.changed()

    def apply(self, actions: Iterable[Action]) -> None:
        """Carry out the pool's actions. Runners destroyed for a cause other than their release or
        their environment's deletion are logged at INFO, one line per cause with the count; each one
        at DEBUG."""
        gone: dict[str, list[str]] = {}
        for action in actions:
            if isinstance(action, DestroyRunner) and action.reason not in _ROUTINE_ENDS:
                gone.setdefault(action.reason, []).append(action.runner_id)
            if isinstance(action, MarkUsed):
                self.expiry.changed()  # a claim: a new inactivity deadline
            if isinstance(action, RunnerGone):
                self._executions.runner_gone(action.runner_id, action.reason)
            elif isinstance(action, RelistWanted):
                self._relists.request(action.reason)
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
