"""What the simulated cluster's HTTP handlers (Nomad's API, the control API) need of the cluster.

The cluster builds the handlers and hands itself to them as a ``ClusterHandle``: the handlers are
typed against this protocol, so that they sit below the cluster that serves them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import trio
from attrs import define

from ..base.network import Network
from .acl.variables import VariableService
from .agents.agents import Agents
from .agents.exec import ExecSessions
from .config import SimConfig
from .http.server import HttpServer, StreamSource
from .scheduling.jobs import JobService
from .scheduling.scheduler import Scheduler
from .state.broker import EventBroker, Subscription
from .state.store import ClusterState

__all__ = ["ClusterHandle", "SimServer"]


@define(eq=False)
class SimServer:
    """One simulated Nomad server: its address, event broker and HTTP server."""

    name: str
    host: str
    port: int
    rpc_address: str
    broker: EventBroker
    http: HttpServer | None = None
    up: bool = False
    scope: trio.CancelScope | None = None
    restarts: int = 0

    @property
    def address(self) -> str:
        """The server's HTTP address."""
        return f"http://{self.host}:{self.port}"


class _Routes(Protocol):
    def add_routes(self, add: Callable[[str, str, Any], None]) -> None: ...


class ClusterHandle(Protocol):
    """The cluster as its HTTP handlers see it."""

    config: SimConfig
    network: Network
    state: ClusterState
    agents: Agents
    scheduler: Scheduler
    jobs: JobService
    execs: ExecSessions
    variables: VariableService
    leader: str | None

    @property
    def control(self) -> _Routes:
        """The fault-injection routes."""

    def server(self, name: str) -> SimServer | None:
        """The server called ``name``, if any."""

    def stream_source(self, server: SimServer, subscription: Subscription) -> StreamSource:
        """A subscriber's NDJSON body."""

    def restart_server(self, name: str, *, downtime: float) -> None:
        """Restart the server: its streams and forwarded execs drop; it serves again after ``downtime``."""

    async def set_agent_reachable(self, name: str, reachable: bool) -> bool:
        """Firewall the node's agent port off, or open it again; False for an unknown node."""

    def cut_streams(self) -> int:
        """Reset every event stream now; returns how many."""

    def describe(self) -> dict[str, Any]:
        """The state as ``GET /sim/v1/state`` shows it."""

    async def wait_for_write(self) -> None:
        """Return after the next write to the cluster's state."""
