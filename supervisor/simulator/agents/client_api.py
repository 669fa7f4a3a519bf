"""The client-agent part of Nomad's HTTP API: exec, on every node's own port, and through the servers.

A Nomad client agent serves ``/v1/client/allocation/:id/exec`` itself, on its node's ``HTTPAddr``;
Nomad's own API client tries it there first and falls back to a server, which forwards the session to
the agent. A session the agent holds does not care which server leads or restarts; one a server
forwards ends when that server (or, for every forwarded session, the leader) restarts.

Each simulated node's agent listens on a loopback port of its own while the agent runs: stopped, it
refuses connections (its open sessions are cut by the exec layer); started again, it listens on the
same port. ``set_reachable(False)`` stands for a firewall between the daemon and the clients that
drops packets: a new connection never completes, so a client waits until its own connect timeout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import orjson
import trio
from loguru import logger

from ..acl.capabilities import refusal
from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..http.query import go_parse_bool
from ..http.server import HttpServer, Request, Response, WebSocketReply, open_listener, text_response
from ..state.objects import SimNode

__all__ = ["AgentEndpoint", "ExecRoute", "check_token"]

_EXEC_PATH: Final = re.compile(r"^/v1/client/allocation/(?P<alloc_id>[^/]+)/exec$")


def check_token(cluster: ClusterHandle, request: Request) -> Response | None:
    """Nomad's ACL answer (403) for a request its token may not make, or None when it may pass: the
    capabilities each request needs, and the tokens that hold them, are in acl.py."""
    return refusal(cluster, request)


class ExecRoute:
    """``/v1/client/allocation/:id/exec`` as a server forwards it (``forwarded_by`` names the
    server) or as a node's agent serves it (``node_id`` names the node, and ``forwarded_by`` is "").
    An agent asked for another node's allocation forwards the request to the servers, as Nomad's
    client does (its RPC goes to the leader, which routes it to the allocation's node)."""

    def __init__(self, cluster: ClusterHandle, *, forwarded_by: str = "", node_id: str = "") -> None:
        self.cluster = cluster
        self.forwarded_by = forwarded_by
        self.node_id = node_id

    async def exec(self, request: Request, params: dict[str, str]) -> Response | WebSocketReply:
        """The exec WebSocket, refused with Nomad's close frames."""
        config = self.cluster.config
        command_text, task = request.arg("command"), request.arg("task")
        command_error = ""
        try:
            command = orjson.loads(command_text) if command_text else None
        except orjson.JSONDecodeError:
            command = None
        if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
            command_error = "command is not present"
        tty = False
        try:
            tty = go_parse_bool(request.arg("tty", "false"))
        except ValueError as exc:
            command_error = f"tty value is not a boolean: {exc}"
        if command_error and config.checks_exec_before_upgrade:
            raise NomadError(500, command_error)

        async def session(websocket: Any) -> None:
            if command_error:
                await websocket.close(1008, command_error)
                return
            error = self.refusal(params["alloc_id"], task)
            if error is not None:
                await websocket.close(*error)
                return
            alloc = self.cluster.state.allocs[params["alloc_id"]]
            assert isinstance(command, list)
            await self.cluster.execs.run(websocket, alloc, task, command, forwarded_by, tty=tty)

        alloc = self.cluster.state.allocs.get(params["alloc_id"])
        forwarded_by = self.forwarded_by
        if self.node_id and alloc is not None and alloc.node_id != self.node_id:
            if self.cluster.leader is None:
                raise NomadError(500, "No cluster leader")
            forwarded_by = self.cluster.leader

        return WebSocketReply(session, kind="exec")

    def refusal(self, alloc_id: str, task: str) -> tuple[int, str] | None:
        """Nomad's close frame for an exec that cannot start: 1008 for coded 4xx errors, 1011 otherwise."""
        state = self.cluster.state
        alloc = state.allocs.get(alloc_id)
        if alloc is None:
            return 1008, f'Unknown allocation "{alloc_id}"'
        if task not in alloc.tasks:
            return 1008, f'unknown task name "{task}"'
        if alloc.client_terminal:
            return 1008, f"exec not possible, client status of allocation {alloc.id} is {alloc.client_status}"
        node = state.nodes.get(alloc.node_id)
        if node is None or not node.agent_up:
            return 1011, f"failed to connect to client {alloc.node_id}: no path to node"
        task_state = alloc.task_states.get(task, {}).get("State", "pending")
        if task_state == "pending":
            return 1008, f'task "{task}" not started yet.'
        if task_state != "running" or alloc.container_lost:
            return 1008, f'task "{task}" is not running.'
        return None


class AgentEndpoint:
    """One node's agent HTTP port: listens while the agent runs, on the same port every time."""

    def __init__(self, cluster: ClusterHandle, name: str, host: str) -> None:
        self.cluster = cluster
        self.name = name
        self.host = host
        self.port = 0
        self.node_id = ""
        self.reachable = True
        self.http = HttpServer(self._handle, name=f"agent {name}")
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        # While firewalled: how to take the firewall away.
        self._firewall: Callable[[], None] | None = None
        self._route: ExecRoute | None = None

    @property
    def address(self) -> str:
        """The agent's ``HTTPAddr``: host and port."""
        return f"{self.host}:{self.port}"

    def attach(self, node: SimNode) -> None:
        """The node this agent runs on (registered once the port is known)."""
        self.node_id = node.id
        self._route = ExecRoute(self.cluster, node_id=node.id)

    async def listen(self, nursery: trio.Nursery) -> None:
        """Open the port (any free one the first time, the same one after) and serve in ``nursery``;
        behind a firewall, only hold the port."""
        if self._scope is not None or self._firewall is not None:
            return
        if not self.reachable:
            self._firewall = self.cluster.network.firewall(self.host, self.port)
            return
        listening = await open_listener(self.cluster.network, self.host, self.port)
        self.port, listener = listening.port, listening.listener
        self._scope = scope = trio.CancelScope()
        self._stopped = stopped = trio.Event()

        async def accept() -> None:
            try:
                with scope:
                    async with listener:
                        while True:
                            nursery.start_soon(self.http.serve_connection, await listener.accept())
            finally:
                stopped.set()

        nursery.start_soon(accept)

    def close(self) -> None:
        """The agent stopped: the port refuses connections, and its connections are cut."""
        if self._scope is not None:
            self._scope.cancel(f"agent {self.name} stopped")
            self._scope = None
        self._release_port()
        self.http.drop()

    async def set_reachable(self, reachable: bool, nursery: trio.Nursery) -> None:
        """Put a firewall between the daemon and this agent that drops new connections (a client's
        connect waits until its own timeout), or take it away; established connections go on."""
        if reachable == self.reachable:
            return
        self.reachable = reachable
        if not reachable and self._scope is not None:
            self._scope.cancel(f"agent {self.name} firewalled off")
            self._scope = None
            await self._stopped.wait()
            self._firewall = self.cluster.network.firewall(self.host, self.port)
        elif reachable and self._firewall is not None:
            self._release_port()
            await self.listen(nursery)

    def _release_port(self) -> None:
        if self._firewall is not None:
            self._firewall()
            self._firewall = None

    async def _handle(self, request: Request) -> Response | WebSocketReply:
        found = _EXEC_PATH.match(request.path)
        if found is None or self._route is None:
            return text_response(404, "404 page not found")
        if request.method != "GET":
            return text_response(405, "Invalid method")
        if (denied := check_token(self.cluster, request)) is not None:
            return denied
        try:
            return await self._route.exec(request, found.groupdict())
        except NomadError as error:
            logger.debug("agent {}: exec refused: {}", self.name, error.text)
            return text_response(error.status, error.text)
