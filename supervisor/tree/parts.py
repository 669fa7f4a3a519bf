"""The typed parts the tree's children start from: the daemon's, which live as long as it runs,
and a term's, which live for one term as the active daemon.
"""

from __future__ import annotations

from typing import final

import trio
from attrs import frozen

from ..api.http_server import AsgiServer
from ..base.network import Network
from ..core.config import Settings
from ..desk.service import RunnerService
from ..ops.systemd import SystemdNotifier
from .api_serving import ApiEndpoint
from .election import Elector
from .graceful_stop import GracefulStop
from .term import Term, Terms

__all__ = ["DaemonParts", "TermParts"]


@final
@frozen(eq=False)
class DaemonParts:
    """What a child of the daemon's tiers starts from."""

    settings: Settings
    network: Network
    server: AsgiServer
    endpoint: ApiEndpoint
    systemd: SystemdNotifier
    stop: GracefulStop
    terms: Terms
    # Everything but the embedded cluster: cancelled when the stop's budget has passed.
    everything: trio.CancelScope


@final
@frozen(eq=False)
class TermParts:
    """What a child of a term's tiers starts from."""

    settings: Settings
    stop: GracefulStop
    term: Term
    elector: Elector

    @property
    def service(self) -> RunnerService:
        """The term's runner service."""
        return self.term.service
