"""A term as the active daemon, and the daemon's terms: the one running, and the latest service.

Without ``[ha]`` the daemon runs one term, from its start to its stop; with it, one each time the
election makes this daemon active. A term's children (the execution deadline, the lock hold) read
and end it here; the daemon's children (systemd, the stop budget) read the latest term's service.
"""

from __future__ import annotations

import trio
from attrs import define, field

from ..desk.service import RunnerService

__all__ = ["Term", "Terms"]


@define(eq=False)
class Term:
    """One term as the active daemon."""

    service: RunnerService
    acquired_at: float
    # Set when the term is to end (the stop, or the lock lost); ``why`` says which.
    ending: trio.Event = field(factory=trio.Event)
    why: str = "the daemon stops"
    # Give the lock up at the term's end (a stop, or a hold that failed), not only let it lapse.
    release: bool = False
    # Its informer and effects run: it reads and writes Nomad (its executions may outlive this).
    acting: bool = True


@define(eq=False)
class Terms:
    """The daemon's terms: the one running, if any, and the service of the latest one, which
    stays after its term has ended."""

    current: Term | None = None
    service: RunnerService | None = None
    # Set once the first term has started its tiers.
    first_started: trio.Event = field(factory=trio.Event)
