"""The API server as a child of the tree: it listens on ``[server]``'s address, and again on the
same port after a restart; its connections run in its tier's nursery, so that they outlive a crash
of the server's own task, and an execution's WebSocket with them.
"""

from __future__ import annotations

from functools import partial
from typing import Final, final

import trio
from attrs import define, field
from loguru import logger

from ..api.http_server import AsgiServer, HttpServerSettings
from ..base.network import Network
from ..core.config import Settings

__all__ = ["ApiEndpoint", "ApiServing", "api_server_settings"]

_LISTEN_BACKLOG: Final = 2048


def api_server_settings(settings: Settings) -> HttpServerSettings:
    """The API server's settings, from the daemon's."""
    server = settings.server
    return HttpServerSettings(
        keep_alive_timeout=server.idle_timeout,
        header_timeout=server.header_timeout,
        body_timeout=server.body_timeout,
        body_min_rate=server.body_min_rate,
        max_requests_per_connection=server.max_requests_per_connection,
        max_connections=server.max_connections,
        fd_reserve=server.fd_reserve,
        write_timeout=server.write_timeout,
        websocket_ping_interval=server.websocket_ping_interval,
        websocket_ping_timeout=server.websocket_ping_timeout,
        max_message=server.max_message,
        access_log=settings.log.access,
    )


@define(eq=False)
class ApiEndpoint:
    """Where the API listens: the port it was bound to (a restarted server binds it again), the
    URLs it serves, and whether it has served yet."""

    port: int
    addresses: list[str] = field(factory=list)
    serving: trio.Event = field(factory=trio.Event)


@final
class ApiServing:
    """Serves the API on ``endpoint``'s port, its connections in ``connections``."""

    def __init__(
        self,
        server: AsgiServer,
        network: Network,
        address: str,
        endpoint: ApiEndpoint,
        connections: trio.Nursery,
    ) -> None:
        self._server = server
        self._network = network
        self._address = address
        self._endpoint = endpoint
        self._connections = connections

    async def run(self, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until the server is stopped and its last connection has ended; started with the
        URLs it serves."""
        endpoint = self._endpoint
        listening = await self._network.listen(self._address, endpoint.port, backlog=_LISTEN_BACKLOG)
        endpoint.port = listening.port
        serve = partial(self._server.serve, listening, connection_nursery=self._connections)
        async with trio.open_nursery() as serving:
            url = await serving.start(serve)
            endpoint.addresses = [url]
            logger.info("serving the API on {}", url)
            endpoint.serving.set()
            task_status.started(endpoint.addresses)
