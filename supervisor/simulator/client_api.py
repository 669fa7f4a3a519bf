"""The client-agent part of Nomad's HTTP API: exec, on every node's own port, and through the servers.

A Nomad client agent serves ``/v1/client/allocation/:id/exec`` itself, on its node's ``HTTPAddr``;
Nomad's own API client tries it there first and falls back to a server, which forwards the session to
the agent. A session the agent holds does not care which server leads or restarts; one a server
forwards ends when that server (or, for every forwarded session, the leader) restarts.

Each simulated node's agent listens on a loopback port of its own while the agent runs: stopped, it
refuses connections (its open sessions are cut by the exec layer); started again, it listens on the
same port. ``reachable = False`` stands for a firewall between the daemon and the clients: the port
accepts connections and never answers, so a client waits until its own connect timeout.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson
import trio
from loguru import logger

from .handle import ClusterHandle
from .http import HttpServer, Request, Response, WebSocketReply, text_response
from .jobs import NomadError
from .objects import SimNode

__all__ = ["AgentEndpoint", "ExecRoute", "check_token"]

_EXEC_PATH: Final = re.compile(r"^/v1/client/allocation/(?P<alloc_id>[^/]+)/exec$")


def check_token(cluster: ClusterHandle, request: Request) -> Response | None:
    """Nomad's ACL answer for a request without the cluster's token, or None when it may pass."""
    expected = cluster.config.acl_token
    if not expected or request.path == "/v1/status/leader":
        return None
    token = request.headers.get("x-nomad-token", "")
    authorization = request.headers.get("authorization", "")
    if not token and authorization.lower().startswith("bearer "):
        token = authorization[7:].strip()
    if not token:
        return text_response(403, "Permission denied")
    if token != expected:
        return text_response(403, "ACL token not found")
    return None


class ExecRoute:
    """``/v1/client/allocation/:id/exec`` as a server forwards it (``forwarded_by`` names the
    server) or as a node's agent serves it (``node_id`` names the node, and ``forwarded_by`` is "")."""

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
        tty = request.arg("tty", "false")
        if tty not in ("true", "false", "1", "0", "t", "f"):
            command_error = f"tty value is not a boolean: {tty}"
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
            await self.cluster.execs.run(websocket, alloc, task, command, self.forwarded_by)

        return WebSocketReply(session, kind="exec")

    def refusal(self, alloc_id: str, task: str) -> tuple[int, str] | None:
        """Nomad's close frame for an exec that cannot start: 1008 for coded 4xx errors, 1011 otherwise."""
        state = self.cluster.state
        alloc = state.allocs.get(alloc_id)
        if alloc is None or (self.node_id and alloc.node_id != self.node_id):
            return 1008, f'Unknown allocation "{alloc_id}"'  # an agent knows its own allocations only
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
        if task_state != "running":
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
        """Open the port (any free one the first time, the same one after) and serve in ``nursery``."""
        if self._scope is not None:
            return
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        self._scope = scope = trio.CancelScope()

        async def serve() -> None:
            with scope:
                async with trio.open_nursery() as connections:
                    await trio.serve_listeners(self._connection, listeners, handler_nursery=connections)

        nursery.start_soon(serve)

    def close(self) -> None:
        """The agent stopped: the port refuses connections, and its connections are cut."""
        if self._scope is not None:
            self._scope.cancel(f"agent {self.name} stopped")
            self._scope = None
        self.http.drop()

    async def _connection(self, stream: trio.SocketStream) -> None:
        if not self.reachable:
            async with stream:  # a firewall drops the packets: nothing is ever answered
                await trio.sleep_forever()
        await self.http.serve_connection(stream)

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
