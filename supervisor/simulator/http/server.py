"""A small HTTP/1.1 and WebSocket server on h11 and wsproto, for the simulated Nomad servers.

An ASGI server cannot do what Nomad does to its connections and what the fault injection needs: end
an exec session by dropping the TCP connection without a close frame, hijack a connection for a raw
NDJSON stream (Nomad >= 1.11.2), or cut every stream of one server at once. Owning the sockets makes
each of those one line. Handlers get a ``Request`` and return a ``Response``, a ``StreamReply`` or a
``WebSocketReply``. An exception in a handler is logged and answered 500 without a traceback. Status
lines carry Go's reason phrases (``HTTP/1.1 404 Not Found``), and a 204 has neither a type nor a
length, as Go's ``net/http`` writes them.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlsplit

import h11
import orjson
import trio
from attrs import define, field, frozen
from loguru import logger
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.utilities import generate_accept_token

from ...base.http_wire import GO_SETTINGS, HttpServerSettings, HttpWire
from ...base.network import Listening, Network

__all__ = [
    "REBIND_PATIENCE",
    "HttpServer",
    "Request",
    "Response",
    "ServerWebSocket",
    "StreamReply",
    "StreamSource",
    "WebSocketReply",
    "json_response",
    "open_listener",
    "text_response",
]

_RECEIVE_SIZE: Final = 65536
# Go's net/http status texts, for the status line.
_REASONS: Final = {
    101: b"Switching Protocols",
    200: b"OK",
    204: b"No Content",
    400: b"Bad Request",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    409: b"Conflict",
    429: b"Too Many Requests",
    500: b"Internal Server Error",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}


def _reason(status: int) -> bytes:
    """Go's ``http.StatusText`` for the codes Nomad answers with."""
    return _REASONS.get(status, b"")


@frozen
class Request:
    """One HTTP request as the simulated servers' handlers see it."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: dict[str, str]
    body: bytes

    def arg(self, name: str, default: str = "") -> str:
        """The first value of a query parameter, or ``default``."""
        return next((v for k, v in self.query if k == name), default)

    def args(self, name: str) -> list[str]:
        """Every value of a repeated query parameter."""
        return [v for k, v in self.query if k == name]

    def has_arg(self, name: str) -> bool:
        """Whether the query has the parameter."""
        return any(k == name for k, _ in self.query)


@frozen
class Response:
    """``body`` may be a sequence of byte strings, sent one after the other (large lists are built
    from cached pieces and need not be copied into one)."""

    status: int
    body: bytes | tuple[bytes, ...] = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


def text_response(status: int, text: str) -> Response:
    """A ``text/plain`` answer, as Nomad writes its errors."""
    return Response(status, text.encode())


def json_response(data: Any, *, status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A JSON answer."""
    return Response(status, orjson.dumps(data), "application/json", headers)


class StreamSource(Protocol):
    """Where a streamed body's chunks come from."""

    async def next_chunk(self) -> bytes | None:
        """The next bytes to write; None ends the body."""
        ...

    def close(self) -> None:
        """The connection is gone, whichever way it went."""
        ...


@frozen
class StreamReply:
    """A 200 whose body is written as it comes: chunked, or raw on a hijacked connection."""

    source: StreamSource
    hijack: bool = False
    content_type: str = "application/json"
    kind: str = "stream"


@frozen
class WebSocketReply:
    """A WebSocket upgrade, served by ``session`` once accepted."""

    handler: Callable[[ServerWebSocket], Awaitable[None]]
    kind: str = "websocket"


class ServerWebSocket:
    """The server side of an upgraded connection."""

    def __init__(self, stream: trio.abc.Stream, connection: WsConnection) -> None:
        self._stream = stream
        self._connection = connection
        self._pending: list[str] = []
        self._partial: list[str | bytes] = []
        self._send_lock = trio.Lock()
        self.closed = False

    async def send_text(self, text: str) -> None:
        """Send one text message."""
        async with self._send_lock:
            if self._connection.state is not ConnectionState.OPEN:
                raise trio.BrokenResourceError("the peer closed the WebSocket")
            await self._stream.send_all(self._connection.send(TextMessage(data=text)))

    async def receive_text(self) -> str | None:
        """The next text message; None once the peer closed or went away."""
        while not self._pending:
            if self.closed:
                return None
            try:
                data = await self._stream.receive_some(_RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.closed = True
                return None
            self._connection.receive_data(bytes(data))
            for event in self._connection.events():
                if isinstance(event, (TextMessage, BytesMessage)):
                    # wsproto hands a large message over in pieces, as its frames arrive.
                    self._partial.append(event.data if isinstance(event, TextMessage) else bytes(event.data))
                    if event.message_finished:
                        self._pending.append(_join(self._partial))
                        self._partial.clear()
                elif isinstance(event, Ping):
                    async with self._send_lock:
                        await self._stream.send_all(self._connection.send(event.response()))
                elif isinstance(event, CloseConnection):
                    self.closed = True
        return self._pending.pop(0)

    async def close(self, code: int, reason: str) -> None:
        """A close frame with ``code`` and ``reason``, then the TCP close."""
        async with self._send_lock:
            await self._stream.send_all(self._connection.send(CloseConnection(code=code, reason=reason)))
        await self.abort()

    async def abort(self) -> None:
        """Close the TCP connection without a close frame (how Nomad ends an exec)."""
        self.closed = True
        await self._stream.aclose()


def _join(pieces: list[str | bytes]) -> str:
    """One message's pieces (all text, or all bytes) as text."""
    text = [piece for piece in pieces if isinstance(piece, str)]
    if len(text) == len(pieces):
        return "".join(text)
    raw = b"".join(piece if isinstance(piece, bytes) else piece.encode() for piece in pieces)
    return raw.decode("utf-8", errors="replace")


@define(eq=False)
class _Connection:
    scope: trio.CancelScope
    kind: str = "http"


# A restarted server or agent listens on its own port again. While it was down, another process
# may have been handed that port for an outgoing connection (ports chosen with 0 come from the
# ephemeral range): it is tried again until the connection has gone.
REBIND_PATIENCE: Final = 30.0


async def open_listener(
    network: Network, host: str, port: int, *, patience: float = REBIND_PATIENCE
) -> Listening:
    """A listener on ``host:port`` (0: any free port); a port of ours held for now by another
    socket is tried again for up to ``patience`` seconds (0 for a port never ours: taken is taken)."""
    deadline = trio.current_time() + patience
    while True:
        try:
            return await network.listen(host, port)
        except OSError as exc:
            if port == 0 or exc.errno != errno.EADDRINUSE or trio.current_time() >= deadline:
                raise
            logger.debug("{}:{} is held by another socket for now; trying again", host, port)
            await trio.sleep(0.1)


@define
class HttpServer:
    """Serves ``handler`` on one address; ``drop`` cuts open connections of a kind at once. Requests
    are read through the API server's core (``base/http_wire.py``), at Go's defaults unless
    ``settings`` says otherwise."""

    handler: Callable[[Request], Awaitable[Response | StreamReply | WebSocketReply]]
    name: str = "http"
    settings: HttpServerSettings = GO_SETTINGS
    _connections: set[Any] = field(factory=set)
    # Never set: Nomad's servers do not stop gracefully here (a restart cuts them).
    _stopping: trio.Event = field(factory=trio.Event)

    def connection_count(self, kind: str) -> int:
        """Open connections of a kind ("stream", "exec")."""
        return sum(1 for c in self._connections if c.kind == kind)

    def drop(self, kind: str | None = None) -> int:
        """Cut every open connection (of ``kind``): the peer sees the socket close, nothing more."""
        dropped = 0
        for connection in list(self._connections):
            if kind is None or connection.kind == kind:
                connection.scope.cancel(f"{self.name}: connection dropped")
                dropped += 1
        return dropped

    async def serve(
        self,
        network: Network,
        host: str,
        port: int,
        *,
        patience: float = REBIND_PATIENCE,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` (0: any free port) and serve until cancelled; starts with the port.
        ``patience``: as ``open_listener``'s."""
        listening = await open_listener(network, host, port, patience=patience)
        async with trio.open_nursery() as nursery:
            task_status.started(listening.port)
            await trio.serve_listeners(self.serve_connection, [listening.listener], handler_nursery=nursery)

    async def serve_connection(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted connection until it closes or is dropped."""
        record = _Connection(trio.CancelScope())
        self._connections.add(record)
        try:
            with record.scope:
                await self._http_loop(stream, record)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass  # the peer went away
        except* Exception:
            # One connection must never take the server down.
            logger.exception("{}: a connection failed", self.name)
        finally:
            self._connections.discard(record)
            with trio.move_on_after(1, shield=True):
                await stream.aclose()

    async def _http_loop(self, stream: trio.abc.Stream, record: _Connection) -> None:
        wire = HttpWire(stream, self.settings, self._stopping, reason=_reason)
        connection = wire.h11
        while (event := await wire.next_request()) is not None:
            body = b""
            while isinstance(part := await wire.next_body_event(), h11.Data):
                body += part.data
            if part is None:
                return  # the peer went, or its body was refused (answered)
            request = _request(event, body)
            try:
                reply = await self.handler(request)
            except Exception:
                logger.exception("{}: handler failed for {} {}", self.name, request.method, request.path)
                reply = text_response(500, "internal error in the simulated cluster")
            if isinstance(reply, Response):
                await self._send_response(wire, reply)
            elif isinstance(reply, StreamReply):
                record.kind = reply.kind
                await self._send_stream(wire, reply)
                return
            else:
                record.kind = reply.kind
                await self._upgrade(wire, request, reply)
                return
            if connection.our_state is h11.MUST_CLOSE or wire.write_broken:
                return
            connection.start_next_cycle()

    @staticmethod
    async def _send_response(wire: HttpWire, reply: Response) -> None:
        connection, send = wire.h11, wire.send_unlocked
        pieces = (reply.body,) if isinstance(reply.body, bytes) else reply.body
        # Go writes neither a type nor a length for a 204: it has no body.
        framing = (
            []
            if reply.status == 204
            else [("Content-Type", reply.content_type), ("Content-Length", str(sum(map(len, pieces))))]
        )
        # A request whose framing was ambiguous (Content-Length and Transfer-Encoding) is the last.
        closing = [("Connection", "close")] if wire.last_request else []
        headers = [*framing, *reply.headers, *closing]
        head = h11.Response(status_code=reply.status, headers=headers, reason=_reason(reply.status))
        data = connection.send(head) or b""
        if isinstance(reply.body, bytes):  # one write for the usual small answer
            data += connection.send(h11.Data(data=reply.body)) or b""
            await send(data + (connection.send(h11.EndOfMessage()) or b""))
            return
        await send(data)
        for piece in pieces:
            await send(connection.send(h11.Data(data=piece)) or b"")
        await send(connection.send(h11.EndOfMessage()) or b"")

    @staticmethod
    async def _send_stream(wire: HttpWire, reply: StreamReply) -> None:
        connection, send = wire.h11, wire.send_unlocked
        try:
            if reply.hijack:
                head = f"HTTP/1.1 200 OK\r\nContent-Type: {reply.content_type}\r\n\r\n"
                await send(head.encode())
                while (chunk := await reply.source.next_chunk()) is not None:
                    await send(chunk)
                return
            headers = [
                ("Content-Type", reply.content_type),
                ("Cache-Control", "no-cache"),
                ("Connection", "close"),
            ]
            response = h11.Response(status_code=200, headers=headers, reason=_reason(200))
            await send(connection.send(response) or b"")
            while (chunk := await reply.source.next_chunk()) is not None:
                await send(connection.send(h11.Data(data=chunk)) or b"")
            await send(connection.send(h11.EndOfMessage()) or b"")
        finally:
            reply.source.close()

    @staticmethod
    async def _upgrade(wire: HttpWire, request: Request, reply: WebSocketReply) -> None:
        connection = wire.h11
        key = request.headers.get("sec-websocket-key", "")
        if request.headers.get("upgrade", "").lower() != "websocket" or not key:
            await HttpServer._send_response(wire, text_response(400, "websocket upgrade required"))
            return
        headers = [
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", generate_accept_token(key.encode()).decode()),
        ]
        await wire.send_unlocked(
            connection.send(h11.InformationalResponse(status_code=101, headers=headers, reason=_reason(101)))
            or b""
        )
        trailing, _ = connection.trailing_data
        websocket = ServerWebSocket(wire.stream, WsConnection(ConnectionType.SERVER, trailing_data=trailing))
        await reply.handler(websocket)


def _request(event: h11.Request, body: bytes) -> Request:
    target = urlsplit(event.target.decode("latin-1"))
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in event.headers}
    return Request(
        method=event.method.decode("ascii"),
        path=target.path,
        query=tuple(parse_qsl(target.query, keep_blank_values=True)),
        headers=headers,
        body=body,
    )
