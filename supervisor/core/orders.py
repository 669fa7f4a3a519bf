"""Orders: what the rest of the daemon asks of the pool, each a typed value.

A client claims, touches and releases runners (through the runner desk), the inactivity expiry
destroys one, the environment store sets and removes environments. Each order goes through the
pool's one entry, ``RunnerPool.handle(change, at)``, as the facts of ``evidence.py`` do; what the
pool decides comes back as actions, and a claim's runner is the one its ``MarkUsed`` names. An order
the pool cannot carry out raises its error: ``UnknownEnvironment``, ``NoIdleRunner``,
``RunnerGoneError``.
"""

from __future__ import annotations

from typing import Protocol

from attrs import frozen

from .environments import ExecutionEnvironment
from .evidence import Fact, Moment
from .pool_view import PoolView
from .runners import Action

__all__ = [
    "Change",
    "Claim",
    "Destroy",
    "Order",
    "PoolDoor",
    "Release",
    "RemoveEnvironment",
    "SetEnvironment",
    "Touch",
]


@frozen
class Claim:
    """Hand out an idle runner of the environment at once and order its replacement."""

    environment_id: int
    inactivity_timeout: int


@frozen
class Touch:
    """Its client used the runner now; ``working`` counts the requests and executions that start
    (+1) or end (-1) in it: it never expires while one works in it."""

    runner_id: str
    working: int = 0


@frozen
class Release:
    """The client gives the runner back: it is destroyed, never handed out again."""

    runner_id: str


@frozen
class Destroy:
    """End the runner for ``reason`` (its inactivity timeout passed): gone for good."""

    runner_id: str
    reason: str


@frozen
class SetEnvironment:
    """Create or replace the environment. Without ``fill`` its pool is not refilled here: a listing
    of its runner jobs is about to be reconciled, which refills. With ``roll_out`` (a PUT) its
    runners are replaced even if the definition did not change: its image may have."""

    environment: ExecutionEnvironment
    fill: bool = True
    roll_out: bool = False


@frozen
class RemoveEnvironment:
    """Forget the environment and destroy its runners (their executions end)."""

    environment_id: int


Order = Claim | Touch | Release | Destroy | SetEnvironment | RemoveEnvironment
Change = Fact | Order


class PoolDoor(Protocol):
    """The runner pool as the rest of the daemon holds it: one entry for changes, a view for reads."""

    @property
    def view(self) -> PoolView:
        """The pool's reads."""
        ...

    def handle(self, change: Change, at: Moment) -> list[Action]:
        """Apply one change at ``at``; the actions it calls for."""
        ...
