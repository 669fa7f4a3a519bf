"""One connection of the API's HTTP server (``http_server.py``): HTTP/1.1 exchanges
(``http_exchange.py``) until it closes or one is upgraded to a WebSocket (``websocket_session.py``),
the ASGI scope and the app's call for each, the access log, and the connection's close. Every write
and the close go through the connection's wire (``http_wire.py``) and take its send lock (but a cut:
that close must end a write blocked on a peer that stopped reading, as trio's ``aclose`` may).
"""

from __future__ import annotations

import contextlib
from typing import Any, Final
from urllib.parse import unquote

import h11
import trio
from loguru import logger
from starlette.types import ASGIApp, Receive, Scope, Send

from ..base.body_budget import BodyBudget
from ..base.http_waits import Waits
from ..base.http_wire import FIRST_REQUEST_GRACE
from ..base.tls import is_tls
from . import http_head
from .http_exchange import ERROR_BODY, HttpExchange
from .http_wire import HttpServerSettings, HttpWire
from .websocket_session import WebSocketSession

__all__ = ["FIRST_REQUEST_GRACE", "WEBSOCKET_ENDED", "Connection"]

# A WebSocket scope's extension: a trio.Event set once the session has ended (the peer's close, a
# message over max_message, the peer gone), for an app that is not in receive() at that moment.
WEBSOCKET_ENDED: Final = "supervisor.websocket.ended"


class Connection:
    """One accepted stream: HTTP/1.1 exchanges until it closes or a WebSocket takes it over."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        app: ASGIApp,
        settings: HttpServerSettings,
        lifespan_state: dict[str, Any],
        stopping: trio.Event,
        bodies: BodyBudget | None = None,
        waits: Waits | None = None,
    ) -> None:
        self.wire = HttpWire(stream, settings, stopping, waits=waits)
        self.bodies = bodies
        self.app = app
        self.settings = settings
        self.lifespan_state = lifespan_state
        self.stopping = stopping
        self.cut_scope = trio.CancelScope()
        self.client, self.server = http_head.addresses(stream)
        self.tls = is_tls(stream)
        self._cut = False

    def stop_if_idle(self) -> None:
        """The server stops: close now if no request is under way, else after the one that is. A
        connection accepted just before, whose first request is not read yet, gets
        ``FIRST_REQUEST_GRACE`` for it: its client sent it to be answered; and so does a head
        still coming (a slow client must not hold the stop for ``header_timeout``)."""
        grace = trio.current_time() + FIRST_REQUEST_GRACE
        if (head := self.wire.head_scope) is not None:
            head.deadline = min(head.deadline, grace)
        if (idle := self.wire.idle_scope) is None:
            return
        if self.wire.requests:
            idle.cancel("the server stops")
        else:
            idle.deadline = min(idle.deadline, grace)

    def cut(self) -> None:
        """Close at once, whatever is being written (the stop's budget has passed)."""
        self._cut = True
        self.cut_scope.cancel("the connection is cut")

    async def close(self) -> None:
        """Close the stream, after a write in flight (shielded, within ``close_timeout``). A client
        still sending a body that was refused (a 413) reads our answer before it sees the end: the
        close lingers, reading and dropping what it sends, as a web server's lingering close does;
        closed at once, its kernel would answer the rest with a reset that drops our answer."""
        wire = self.wire
        with trio.move_on_after(self.settings.close_timeout, shield=True) as boxed:
            async with contextlib.nullcontext() if self._cut else wire.send_lock:
                if not self._cut and not wire.read_closed and not wire.request_read():
                    await wire.linger()
                await trio.aclose_forcefully(wire.stream)
        if boxed.cancelled_caught:  # a write held the lock all along
            await trio.aclose_forcefully(wire.stream)

    async def run(self) -> None:
        """Serve exchanges until the connection closes, or a WebSocket takes it over and ends."""
        while (request := await self.wire.next_request()) is not None:
            if b"websocket" in http_head.header_tokens(request, b"upgrade"):
                await self._serve_websocket(request)
                return
            if not await self._serve_exchange(request):
                return
            self.wire.h11.start_next_cycle()

    async def call_app(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Run the app on one scope; True if it raised. Once the peer has gone or was refused (a bad
        or stalled body), the error is most likely the app's view of that: not an error of ours."""
        try:
            await self.app(scope, receive, send)
        except Exception:
            what = f"{scope.get('method', 'WebSocket')} {scope['raw_path'].decode('latin-1')}"
            if self.wire.read_closed or self.wire.write_broken or self.wire.fault is not None:
                logger.opt(exception=True).debug("the app failed on {} after its client left", what)
            else:
                logger.exception("the app failed on {}", what)
            return True
        return False

    def log_access(
        self, request: h11.Request, protocol: str, status: int | None, sent: int, began: float
    ) -> None:
        """The access log's line for one request or WebSocket (without its query: secrets)."""
        if self.settings.access_log:
            milliseconds = round((trio.current_time() - began) * 1000, 1)
            logger.info(
                '{} "{} {} {protocol}" {status} {bytes} B {duration_ms:.1f} ms',
                http_head.address(self.client),
                request.method.decode("latin-1"),
                http_head.path(request),
                protocol=protocol,
                status="-" if status is None else status,
                bytes=sent,
                duration_ms=milliseconds,
            )

    async def _serve_exchange(self, request: h11.Request) -> bool:
        """One request and its response; True when the connection may carry another."""
        began = trio.current_time()
        exchange = HttpExchange(self.wire, request, close=False, bodies=self.bodies)
        try:
            raised = await self.call_app(_scope("http", request, self), exchange.receive, exchange.send)
            if not exchange.written and self.wire.fault is None:
                if not raised and not exchange.gone:
                    logger.error("the app sent no response to {}", http_head.path(request))
                await exchange.answer(500, ERROR_BODY)
        finally:
            exchange.detach()
        version = request.http_version.decode()
        self.log_access(request, f"HTTP/{version}", exchange.status, exchange.sent, began)
        # A receive() still under way (in an app task that outlived the app's call) would read on.
        reusable = exchange.complete and not exchange.closes
        reusable = reusable and not exchange.receive_lock.locked() and not self.wire.write_broken
        return reusable and not self.stopping.is_set() and self.wire.request_read()

    async def _serve_websocket(self, request: h11.Request) -> None:
        began = trio.current_time()
        key = http_head.handshake_key(request)
        if key is None or not isinstance(self.wire.h11.next_event(), h11.EndOfMessage):
            await self.wire.refuse(400)
            return
        session = WebSocketSession(self.wire, request, key)
        try:
            async with trio.open_nursery() as session_nursery:
                session_nursery.start_soon(session.read_frames)
                scope = _scope("websocket", request, self)
                scope["extensions"][WEBSOCKET_ENDED] = session.ended
                await session.finish(await self.call_app(scope, session.receive, session.send))
                session_nursery.cancel_scope.cancel("the WebSocket session has ended")
        finally:
            session.detach()
        self.log_access(request, "WebSocket", session.status, session.sent, began)


def _scope(kind: str, request: h11.Request, connection: Connection) -> Scope:
    raw_path, _, query = request.target.partition(b"?")
    scope: Scope = {
        "type": kind,
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version.decode(),
        "scheme": ("https" if kind == "http" else "wss")
        if connection.tls
        else ("http" if kind == "http" else "ws"),
        "path": unquote(raw_path.decode("latin-1")),
        "raw_path": raw_path,
        "query_string": query,
        "root_path": "",
        "headers": list(request.headers),
        "client": connection.client,
        "server": connection.server,
        "state": dict(connection.lifespan_state),
        "extensions": {},
    }
    if kind == "http":
        scope["method"] = request.method.decode("latin-1")
    else:
        offered = http_head.header_tokens(request, b"sec-websocket-protocol", lower=False)
        scope["subprotocols"] = [protocol.decode("latin-1") for protocol in offered if protocol]
        scope["extensions"] = {"websocket.http.response": {}}
    return scope
