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

__all__ = ["KEEP_ALIVE_TIMEOUT", "ApiEndpoint", "ApiServing", "api_server_settings"]

_LISTEN_BACKLOG: Final = 2048
# Longer than clients keep an idle connection (httpx 5 s): at equal timeouts a client could send on
# a connection the server was closing, and a POST cannot be sent again (a node_down scenario's
# execute: "Server disconnected without sending a response").
KEEP_ALIVE_TIMEOUT: Final = 75.0


def api_server_settings(settings: Settings) -> HttpServerSettings:
    """The API server's settings, from the daemon's."""
    return HttpServerSettings(
        keep_alive_timeout=KEEP_ALIVE_TIMEOUT,
        max_message=settings.server.max_message,
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
