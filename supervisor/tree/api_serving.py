"""The API server as a child of the tree: it listens on ``[server]``'s address, and again on the
same port after a restart, or serves the socket systemd passed (socket activation), the same one
again after a restart; over TLS with ``[server.tls]``. Its connections run in its tier's nursery, so
that they outlive a crash of the server's own task, and an execution's WebSocket with them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final, final

import trio
from attrs import define, field
from loguru import logger

from ..api.http_server import AsgiServer, HttpServerSettings
from ..base.network import Listening, Network
from ..base.socket_activation import KeptListener, take_passed_listener
from ..base.tls import ServerTls
from ..core.config import Settings
from .term import Terms

__all__ = ["ApiEndpoint", "ApiServing", "api_server_settings", "first_term_synced"]

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


async def first_term_synced(terms: Terms, within: float) -> None:
    """Return once the first term serves and its first listing of Nomad is in, or ``within``
    seconds after it serves (the admission gate answers from then on)."""
    await terms.first_started.wait()
    if terms.service is not None:
        with trio.move_on_after(within):
            await terms.service.wait_synced()


@define(eq=False)
class ApiEndpoint:
    """Where the API listens: the port it was bound to (a restarted server binds it again), or the
    socket systemd passed and its name; its TLS, if any; the URLs it serves, and whether it has
    served yet."""

    port: int
    addresses: list[str] = field(factory=list)
    serving: trio.Event = field(factory=trio.Event)
    tls: ServerTls | None = None
    passed: tuple[trio.SocketListener, str] | None = None
    # Returns once the first term serves what it learnt from Nomad. Without [ha], a passed socket is
    # accepted from only then: the connections made while the daemon restarts wait in its backlog
    # for an answer from what Nomad holds, not a 503 or an environment not known yet.
    ready: Callable[[], Awaitable[None]] | None = None
    hold: bool = False

    @property
    def passed_host(self) -> str | None:
        """The address of the socket systemd passed, if it passed one."""
        return None if self.passed is None else str(self.passed[0].socket.getsockname()[0])

    @classmethod
    def of(cls, settings: Settings, *, activated: bool = False) -> ApiEndpoint:
        """The endpoint ``settings`` configure, its certificate read; ``activated`` (the run
        command), the socket systemd passed taken, if it passed one. ConfigError if either fails."""
        tls = settings.server_tls
        server_tls = None
        if tls.cert_file:
            server_tls = ServerTls(
                tls.cert_file, tls.key_file, tls.min_version, settings.server.header_timeout
            )
        passed = take_passed_listener() if activated else None
        hold = passed is not None and not settings.ha.enabled
        return cls(settings.server.port, tls=server_tls, passed=passed, hold=hold)


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
        if endpoint.passed is not None:
            listener, name = endpoint.passed
            host, port = listener.socket.getsockname()[:2]
            kept = KeptListener(listener, ready=endpoint.ready if endpoint.hold else None)
            listening = Listening(kept, host, port)
            how = f" (the socket {name} passed by systemd)"
        else:
            listening = await self._network.listen(self._address, endpoint.port, backlog=_LISTEN_BACKLOG)
            how = ""
        endpoint.port = listening.port
        if endpoint.tls is not None:
            listening = Listening(endpoint.tls.wrap(listening.listener), listening.host, listening.port)
        serve = partial(self._server.serve, listening, connection_nursery=self._connections)
        async with trio.open_nursery() as serving:
            url = await serving.start(serve)
            if endpoint.tls is not None:
                url = "https" + url.removeprefix("http")
            endpoint.addresses = [url]
            logger.info("serving the API on {}{}", url, how)
            endpoint.serving.set()
            task_status.started(endpoint.addresses)
