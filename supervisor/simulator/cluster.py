"""The simulated cluster as a running service: servers on their own ports, agents, the scheduler,
timers on trio's clock, and the faults that act on servers.

    async with trio.open_nursery() as nursery:
        cluster = await nursery.start(SimulatedCluster(SimConfig()).run)
        cluster.addresses  # ["http://127.0.0.1:PORT", ...], one per server

Everything runs in the caller's trio run, so tests drive it on virtual time.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio
from attrs import define
from loguru import logger

from ..base.network import Network, TcpNetwork
from .acl.variables import VariableService
from .agents.agents import Agents
from .agents.client_api import AgentEndpoint
from .agents.containers import Containers, ProcessContainers
from .agents.exec import ExecSessions
from .agents.history import add_history
from .api.nomad_api import NomadAPI
from .config import SimConfig
from .control.fault_injection import ControlAPI
from .handle import SimServer
from .http.server import REBIND_PATIENCE, HttpServer, StreamSource
from .http.stream_stalls import StreamStalls
from .scheduling.jobs import JobService
from .scheduling.scheduler import Scheduler
from .state.broker import EventBroker, Subscription
from .state.node_usage import Ask
from .state.objects import SimNode
from .state.store import ClusterState

__all__ = ["SimServer", "SimulatedCluster"]

_HEARTBEAT: Final = b"{}\n"


class _TrioTimers:
    """``Timers`` on trio: each callback is a task that sleeps first; errors are logged, not raised."""

    def __init__(self) -> None:
        self.nursery: trio.Nursery | None = None

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        assert self.nursery is not None, "the cluster is not running"
        scope = trio.CancelScope()

        async def fire() -> None:
            with scope:
                await trio.sleep(max(delay, 0.0))
                try:
                    callback()
                except Exception:
                    logger.exception("simulated cluster: a timed action failed")

        self.nursery.start_soon(fire)
        return scope.cancel


class _StreamSource:
    """One subscriber's NDJSON: ``{}`` at once and every heartbeat interval, batches as they come."""

    def __init__(self, broker: EventBroker, subscription: Subscription, interval: float) -> None:
        self._broker = broker
        self._subscription = subscription
        self._interval = interval
        self._next_heartbeat = trio.current_time() + interval
        self._greeted = False

    async def next_chunk(self) -> bytes | None:
        if not self._greeted:
            self._greeted = True
            return _HEARTBEAT
        while True:
            lines = await self._subscription.next_lines(max(0.0, self._next_heartbeat - trio.current_time()))
            if lines:
                return b"".join(lines)
            if trio.current_time() >= self._next_heartbeat:
                self._next_heartbeat += self._interval
                return _HEARTBEAT

    def close(self) -> None:
        self._broker.unsubscribe(self._subscription)


@define(eq=False)
class _Stats:
    started_at: float = 0.0
    stream_cuts: int = 0


class SimulatedCluster:
    """Servers on their own ports, nodes, the state and its timers: the running simulated Nomad."""

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        host: str = "127.0.0.1",
        ports: Sequence[int] = (),
        workspace_root: Path | None = None,
        network: Network | None = None,
        containers: Callable[[ClusterState], Containers] | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.host = host
        self.network: Network = network or TcpNetwork()
        self._timers = _TrioTimers()
        self.state = ClusterState(self.config, self._timers, trio.current_time)
        self.scheduler = Scheduler(self.state)
        self.agents = Agents(self.state, self.scheduler)
        self.jobs = JobService(self.state, self.scheduler)
        self.variables = VariableService(self.state)
        self.control = ControlAPI(self)
        self._own_root = workspace_root is None and containers is None
        if containers is None:
            root = workspace_root or Path(tempfile.mkdtemp(prefix="nomad-sim-"))
            self.execs = ExecSessions(ProcessContainers(self.state, root))
        else:
            self.execs = ExecSessions(containers(self.state))
        self.agents.exec = self.execs
        self.servers = [
            SimServer(
                name=f"server-{i + 1}",
                host=host,
                port=ports[i] if i < len(ports) else 0,
                rpc_address=f"{host}:{4647 + i}",
                broker=EventBroker(self.config.event_buffer_size),
            )
            for i in range(self.config.servers)
        ]
        self.leader: str | None = None
        # Each node's agent HTTP port, by node ID.
        self.endpoints: dict[str, AgentEndpoint] = {}
        self.agents.call_when_an_agent_stops(lambda node: self.endpoints[node.id].close())
        self.agents.call_when_an_agent_starts(self._agent_listens)
        self._nursery: trio.Nursery | None = None
        self._write_event = trio.Event()
        self.state.call_after_each_write(self._wake_blocking_queries)
        self.stats = _Stats()
        self.stream_stalls = StreamStalls()

    # -- lifetime -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[SimulatedCluster] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; starts once every server listens and every node is ready."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._timers.nursery = nursery
                self.execs.nursery = nursery
                self.state.start_clock()
                self.stats.started_at = trio.current_time()
                for server in self.servers:
                    await nursery.start(self._serve, server)
                self.leader = self.servers[0].name
                for i in range(self.config.nodes):
                    name = f"worker-{i + 1:02d}"
                    endpoint = AgentEndpoint(self, name, self.host)
                    await endpoint.listen(nursery)
                    endpoint.attach(self.agents.register_node(name, f"10.0.1.{10 + i}", endpoint.address))
                    self.endpoints[endpoint.node_id] = endpoint
                add_history(self.state, self.config.history_allocations)
                nursery.start_soon(self._collect_garbage)
                logger.info("simulated Nomad cluster serving on {}", ", ".join(self.addresses))
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            await self.execs.kill_all()
            if self._own_root:
                self.execs.remove_all_workspaces()

    @property
    def addresses(self) -> list[str]:
        """Every server's address, the first first."""
        return [server.address for server in self.servers]

    def server(self, name: str) -> SimServer | None:
        """The server called ``name``, if any."""
        return next((s for s in self.servers if s.name == name), None)

    async def _serve(
        self, server: SimServer, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        server.http = HttpServer(NomadAPI(self, server), name=server.name)
        with trio.CancelScope() as scope:
            server.scope = scope
            async with trio.open_nursery() as nursery:
                # Its first start finds a port taken by someone else at once; a restart waits for
                # its own port to be let go.
                patience = REBIND_PATIENCE if server.restarts else 0.0
                serve = partial(server.http.serve, patience=patience)
                server.port = await nursery.start(serve, self.network, self.host, server.port)
                server.up = True
                self.state.subscribe(server.broker.publish)
                task_status.started()

    async def _collect_garbage(self) -> None:
        while True:
            await trio.sleep(self.config.gc_interval)
            self.state.collect_garbage()

    # -- blocking queries -----------------------------------------------------------------------

    def _wake_blocking_queries(self, _: Any) -> None:
        self._write_event.set()
        self._write_event = trio.Event()

    async def wait_for_write(self) -> None:
        """Return after the next write to the cluster's state."""
        await self._write_event.wait()

    def stream_source(self, server: SimServer, subscription: Subscription) -> StreamSource:
        """A subscriber's NDJSON body: ``{}`` at once and every heartbeat interval, batches as they
        come; held while the server's streams stall."""
        source = _StreamSource(server.broker, subscription, self.config.heartbeat_interval)
        return self.stream_stalls.watch(server.name, source)

    # -- agents' HTTP ports ----------------------------------------------------------------------

    def _agent_listens(self, node: Any) -> None:
        endpoint = self.endpoints.get(node.id)
        if endpoint is not None and self._nursery is not None:
            self._nursery.start_soon(endpoint.listen, self._nursery)

    async def set_agent_reachable(self, name: str, reachable: bool) -> bool:
        """Firewall a node's agent port off (new connections never complete), or open it again;
        False if no node has that name."""
        endpoint = next((e for e in self.endpoints.values() if e.name == name), None)
        if endpoint is None or self._nursery is None:
            return False
        await endpoint.set_reachable(reachable, self._nursery)
        return True

    # -- faults on servers ----------------------------------------------------------------------

    def restart_server(self, name: str, *, downtime: float) -> None:
        """Drop the server's streams and execs, forget its buffer, refuse connections for ``downtime``."""
        server = self.server(name)
        assert server is not None, name
        self._timers.call_later(0, lambda: self._take_down(server, downtime))

    def _take_down(self, server: SimServer, downtime: float) -> None:
        if not server.up:
            return
        server.up = False
        server.restarts += 1
        if server.broker.publish in self.state.subscribers:
            self.state.unsubscribe(server.broker.publish)
        server.broker.reset()
        self.execs.drop_server(server.name)
        if server.http is not None:
            server.http.drop()
        if server.scope is not None:
            server.scope.cancel(f"{server.name} restarts")
        # The listener goes with the serve task; rebinding the same port waits for the downtime.
        server.http = None
        if self.leader == server.name:
            self.leader = None
            self.variables.stop_lock_timers()
            self.execs.drop_forwarded()
            for other in self.servers:
                if other.http is not None:
                    other.http.drop("exec")
            self._timers.call_later(self.config.election_timeout, self._elect)
        self._timers.call_later(downtime, lambda: self._bring_up(server))

    def _bring_up(self, server: SimServer) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(self._serve_again, server)

    async def _serve_again(self, server: SimServer) -> None:
        assert self._nursery is not None
        await self._nursery.start(self._serve, server)
        if self.leader is None:
            self._timers.call_later(self.config.election_timeout, self._elect)

    def _elect(self) -> None:
        if self.leader is not None:
            return
        candidates = [s.name for s in self.servers if s.up]
        if candidates:
            self.leader = self.state.rng.choice(candidates)
            self.variables.restore_lock_timers()
            logger.info("simulated Nomad cluster elected {} as leader", self.leader)

    def cut_streams(self) -> int:
        """Reset every open event stream of every server now, with no final line."""
        self.stats.stream_cuts += 1
        return sum(server.http.drop("stream") for server in self.servers if server.http is not None)

    # -- inspection -----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The state as ``GET /sim/v1/state`` shows it."""
        state = self.state
        return {
            "leader": self.leader,
            "index": state.index,
            "servers": [
                {
                    "name": s.name,
                    "address": s.address,
                    "up": s.up,
                    "restarts": s.restarts,
                    "event_streams": s.http.connection_count("stream") if s.http else 0,
                    "execs": s.http.connection_count("exec") if s.http else 0,
                }
                for s in self.servers
            ],
            "nodes": [
                {
                    "id": n.id,
                    "name": n.name,
                    "status": n.status,
                    "eligibility": n.eligibility,
                    "drain": n.drain_strategy is not None,
                    "agent_up": n.agent_up,
                    "http_addr": n.http_addr,
                    "http_reachable": self.endpoints[n.id].reachable if n.id in self.endpoints else False,
                    "direct_execs": self.endpoints[n.id].http.connection_count("exec")
                    if n.id in self.endpoints
                    else 0,
                    "allocations": len(state.live_allocs_by_node.get(n.id, ())),
                    "resources": _resources(n, state.usage.used(n.id)),
                }
                for n in state.nodes.values()
            ],
            "registrations": state.registrations,
            "jobs": {"total": len(state.jobs), "by_status": _count(j.status for j in state.jobs.values())},
            "allocations": {
                "total": len(state.allocs),
                "by_client_status": _count(a.client_status for a in state.allocs.values()),
            },
            "open_execs": self.execs.count,
            "variables": {
                "total": len(state.variables),
                "locked": sum(1 for v in state.variables.values() if v.lock is not None),
            },
            "images": {
                **state.images.describe({n.id: n.name for n in state.nodes.values()}),
                "allocations": {a.id: a.images for a in state.allocs.values() if a.images and not a.terminal},
            },
        }


def _resources(node: SimNode, used: Ask) -> dict[str, Any]:
    """What the node offers, and what its allocations hold of it."""
    size = node.size
    return {
        "cpu_mhz": size.cpu_mhz,
        "memory_mb": size.memory_mb,
        "disk_mb": size.disk_mb,
        "cni_networks": list(size.cni_networks),
        "used": {"cpu_mhz": used.cpu, "memory_mb": used.memory_mb, "disk_mb": used.disk_mb},
    }


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts
