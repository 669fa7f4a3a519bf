"""One connection of the API's HTTP server (``http_server.py``): HTTP/1.1 exchanges with h11, and a
WebSocket with wsproto once an exchange is upgraded; the ASGI messages of each, and the send lock
that every write and the close take (but a cut: that close must end a write blocked on a peer that
stopped reading, as trio's ``aclose`` may).
"""

from __future__ import annotations

import contextlib
import email.utils
import math
from collections.abc import Callable, Iterable
from typing import Any, Final, final
from urllib.parse import unquote

import h11
import trio
from attrs import frozen
from loguru import logger
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.events import Event as WsEvent
from wsproto.utilities import LocalProtocolError as WsProtocolError
from wsproto.utilities import generate_accept_token

from . import http_head

__all__ = ["PEER_ERRORS", "WEBSOCKET_ENDED", "Connection", "HttpServerSettings"]

_RECEIVE_SIZE: Final = 64 * 1024
_ERROR_BODY: Final = b"Internal Server Error"
# How long a close waits for a client still sending a refused body to finish (seconds).
_LINGER: Final = 2.0
# How a connection fails when its peer goes or breaks the protocol: it ends, quietly.
PEER_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, WsProtocolError)
# A WebSocket scope's extension: a trio.Event set once the session has ended (the peer's close, a
# message over max_message, the peer gone), for an app that is not in receive() at that moment.
WEBSOCKET_ENDED: Final = "supervisor.websocket.ended"


@final
@frozen
class HttpServerSettings:
    """How the API server treats its connections."""

    # An idle keep-alive connection (no request begun) is closed after this many seconds.
    keep_alive_timeout: float = 75.0
    # A WebSocket message larger than this (bytes) closes its connection with 1009. The messages
    # the app has not taken yet are held up to as much again (one always): meanwhile the peer's close
    # is seen; past it the connection is read no more until the app takes one.
    max_message: int = 1024 * 1024
    # A request line and headers larger than this (bytes) are answered 431; the connection closes.
    max_head: int = 64 * 1024
    # One INFO line per request and per WebSocket.
    access_log: bool = False
    # A connection's close waits this long for a write in flight; a WebSocket as long for the
    # peer's answer to its close frame.
    close_timeout: float = 5.0


class Connection:
    """One accepted stream: HTTP/1.1 exchanges until it closes or a WebSocket takes it over."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        app: ASGIApp,
        settings: HttpServerSettings,
        lifespan_state: dict[str, Any],
        stopping: trio.Event,
    ) -> None:
        self.stream = stream
        self.app = app
        self.settings = settings
        self.lifespan_state = lifespan_state
        self.stopping = stopping
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=settings.max_head)
        self.send_lock = trio.Lock()
        self.cut_scope = trio.CancelScope()
        self.client, self.server = http_head.addresses(stream)
        self.read_closed = False
        self.write_broken = False
        self._idle: trio.CancelScope | None = None
        self._cut = False

    def stop_if_idle(self) -> None:
        """The server stops: close now if no request is under way, else after the one that is."""
        if self._idle is not None:
            self._idle.cancel("the server stops")

    def cut(self) -> None:
        """Close at once, whatever is being written (the stop's budget has passed)."""
        self._cut = True
        self.cut_scope.cancel("the connection is cut")

    async def close(self) -> None:
        """Close the stream, after a write in flight (shielded, within ``close_timeout``). A client
        still sending a body that was refused (a 413) reads our answer before it sees the end: the
        close lingers, reading and dropping what it sends, as a web server's lingering close does;
        closed at once, its kernel would answer the rest with a reset that drops our answer."""
        with trio.move_on_after(self.settings.close_timeout, shield=True) as boxed:
            async with contextlib.nullcontext() if self._cut else self.send_lock:
                if not self._cut and not self.read_closed and not self._request_read():
                    await self._linger()
                await trio.aclose_forcefully(self.stream)
        if boxed.cancelled_caught:  # a write held the lock all along
            await trio.aclose_forcefully(self.stream)

    async def _linger(self) -> None:
        if self.h11.their_state is not h11.SEND_BODY:
            return
        with trio.move_on_after(_LINGER):
            if isinstance(self.stream, trio.abc.HalfCloseableStream):
                await self.stream.send_eof()
            while await self.read():
                pass

    async def run(self) -> None:
        """Serve exchanges until the connection closes, or a WebSocket takes it over and ends."""
        while (request := await self._wait_for_request()) is not None:
            if b"websocket" in http_head.header_tokens(request, b"upgrade"):
                await self._serve_websocket(request)
                return
            if not await self._serve_exchange(request):
                return
            self.h11.start_next_cycle()

    async def read(self) -> bytes:
        """The next bytes from the peer; b"" once it has closed or gone."""
        if self.read_closed:
            await trio.lowlevel.checkpoint()
            return b""
        try:
            data = await self.stream.receive_some(_RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        self.read_closed = not data
        return bytes(data)

    async def next_event(self) -> object:
        """h11's next event, reading from the peer only when h11 needs more."""
        while (event := self.h11.next_event()) is h11.NEED_DATA:
            self.h11.receive_data(await self.read())
        return event

    async def write(self, produce: Callable[[], bytes | None]) -> bool:
        """Send what ``produce`` makes, made under the send lock so that the protocol's state and
        the bytes on the wire move together; False when nothing went out. A write cancelled part-way
        (a peer that reads nothing holds it) may have sent part of a frame or response: nothing is
        written after it, as what followed would not parse."""
        async with self.send_lock:
            await trio.lowlevel.checkpoint_if_cancelled()  # cancelled before anything went out
            data = None if self.write_broken else produce()
            if not data:
                return False
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.write_broken = True
                return False
            except trio.Cancelled:
                self.write_broken = True
                raise
            return True

    async def send_h11(self, *events: h11.Event) -> None:
        """Send h11 events, under the send lock."""
        await self.write(lambda: b"".join(self.h11.send(event) or b"" for event in events))

    def response(self, status: int, headers: Iterable[tuple[bytes, bytes]], *, close: bool) -> h11.Response:
        """A response head with a Date, and 'Connection: close' if asked or if the server stops."""
        pairs = [(bytes(name).lower(), bytes(value)) for name, value in headers]
        if not any(name == b"date" for name, _ in pairs):
            pairs.append((b"date", email.utils.formatdate(usegmt=True).encode()))
        if (close or self.stopping.is_set()) and (b"connection", b"close") not in pairs:
            pairs.append((b"connection", b"close"))
        return h11.Response(status_code=status, headers=pairs, reason=http_head.reason(status))

    async def refuse(self, status: int) -> None:
        """Answer a request that cannot be served (unparsable, a bad handshake) before closing."""
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            head = self.response(status, [(b"content-length", b"0")], close=True)
            await self.send_h11(head, h11.EndOfMessage())

    async def call_app(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Run the app on one scope; True if it raised. Once the peer has gone, the error is most
        likely the app's view of that: not an error of ours."""
        try:
            await self.app(scope, receive, send)
        except Exception:
            what = f"{scope.get('method', 'WebSocket')} {scope['raw_path'].decode('latin-1')}"
            if self.read_closed or self.write_broken:
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

    async def _wait_for_request(self) -> h11.Request | None:
        event: object = None
        with trio.move_on_after(self.settings.keep_alive_timeout) as self._idle:
            if self.stopping.is_set():
                self._idle.cancel("the server stops")
            try:
                event = await self.next_event()
            except h11.RemoteProtocolError as exc:
                await self.refuse(exc.error_status_hint)
        self._idle = None
        if not isinstance(event, h11.Request):
            return None
        if http_head.head_size(event) > self.settings.max_head:  # h11 limits only a head still incomplete
            await self.refuse(431)
            return None
        return event

    async def _serve_exchange(self, request: h11.Request) -> bool:
        """One request and its response; True when the connection may carry another."""
        began = trio.current_time()
        exchange = _HttpExchange(self, request, close=False)
        try:
            raised = await self.call_app(_scope("http", request, self), exchange.receive, exchange.send)
            if not exchange.written:
                if not raised and not exchange.gone:
                    logger.error("the app sent no response to {}", http_head.path(request))
                await exchange.answer(500, _ERROR_BODY)
        finally:
            exchange.detach()
        version = request.http_version.decode()
        self.log_access(request, f"HTTP/{version}", exchange.status, exchange.sent, began)
        # A receive() still under way (in an app task that outlived the app's call) would read on.
        reusable = exchange.complete and not exchange.closes
        reusable = reusable and not exchange.receive_lock.locked() and not self.write_broken
        return reusable and not self.stopping.is_set() and self._request_read()

    def _request_read(self) -> bool:
        """Whether both sides are done, taking what is left of the request's body from h11's buffer
        (a GET's end, a small body the app did not read) without waiting for more."""
        try:
            while self.h11.their_state is h11.SEND_BODY:
                if self.h11.next_event() in (h11.NEED_DATA, h11.PAUSED):
                    break
        except h11.RemoteProtocolError:
            return False
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    async def _serve_websocket(self, request: h11.Request) -> None:
        began = trio.current_time()
        key = http_head.handshake_key(request)
        if key is None or not isinstance(self.h11.next_event(), h11.EndOfMessage):
            await self.refuse(400)
            return
        session = _WebSocket(self, request, key)
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


class _HttpExchange:
    """One request and its response, as the app's ``receive`` and ``send`` see them."""

    def __init__(self, connection: Connection, request: h11.Request, *, close: bool) -> None:
        self._connection: Connection | None = connection
        self._close = close
        # A body the app may leave unread: a response begun before it was read closes the
        # connection, and says so, as what is left of it may still be on its way.
        self._body_declared = http_head.declares_body(request)
        self._head_only = request.method == b"HEAD"
        self.receive_lock = trio.Lock()
        # A receive() waiting for the client to leave: the response's end ends it.
        self._watch: trio.CancelScope | None = None
        self._head: h11.Response | None = None
        self.status: int | None = None
        self.body_read = self.written = self.complete = self.gone = self.closes = False
        self.sent = 0

    def detach(self) -> None:
        """The exchange is over: the app's callables let go of the connection (an app may keep
        them in a reference cycle of its own)."""
        self._connection = None

    async def receive(self) -> Message:
        async with self.receive_lock:
            connection = self._connection
            if connection is None or self.complete or self.gone:
                return {"type": "http.disconnect"}
            if not self.body_read:
                return await self._read_body(connection)
            with trio.CancelScope() as self._watch:
                await self._watch_client(connection)
            self._watch = None
            return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if self._connection is None:
            await trio.lowlevel.checkpoint()  # the exchange is over: the app may finish
        elif kind == "http.response.start" and self.status is None:
            self._start(int(message["status"]), message.get("headers", ()))
            await trio.lowlevel.checkpoint()
        elif kind == "http.response.body" and self.status is not None and not self.complete:
            await self._body(bytes(message.get("body", b"")), bool(message.get("more_body", False)))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} (status {self.status})")

    async def answer(self, status: int, body: bytes) -> None:
        """A plain-text answer of the server's own, in place of one the app did not write."""
        length = str(len(body)).encode()
        self._start(status, [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", length)])
        await self._body(body, more=False)

    def _start(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        # Built now (bad headers fail the app's send), written with the first body part.
        assert self._connection is not None
        self._head = self._connection.response(status, headers, close=self._close)
        self.status = status

    async def _body(self, body: bytes, more: bool) -> None:
        connection, head = self._connection, self._head
        assert connection is not None
        assert head is not None
        if self._head_only or self.status in (204, 304):
            body = b""
        unread = self._body_declared and not self.body_read and not self.written
        if (connection.stopping.is_set() or unread) and (b"connection", b"close") not in list(head.headers):
            head = connection.response(head.status_code, head.headers, close=True)
        self.closes = self.closes or any(h == (b"connection", b"close") for h in head.headers)
        events: list[h11.Event] = [] if self.written else [head]
        self.written = True
        if body:
            events.append(h11.Data(data=body))
        if not more:
            events.append(h11.EndOfMessage())
        await connection.send_h11(*events)
        self.sent += len(body)
        self.complete, self.gone = not more, connection.write_broken
        if (self.complete or self.gone) and self._watch is not None:
            self._watch.cancel("the response is complete")

    async def _read_body(self, connection: Connection) -> Message:
        if connection.h11.they_are_waiting_for_100_continue:
            await connection.send_h11(
                h11.InformationalResponse(status_code=100, headers=[], reason=http_head.reason(100))
            )
        try:
            event = await connection.next_event()
        except h11.RemoteProtocolError:
            event = None
        if isinstance(event, h11.Data):
            return {"type": "http.request", "body": bytes(event.data), "more_body": True}
        if isinstance(event, h11.EndOfMessage):
            self.body_read = True
            return {"type": "http.request", "body": b"", "more_body": False}
        self.gone = True
        return {"type": "http.disconnect"}

    async def _watch_client(self, connection: Connection) -> None:
        data = await connection.read()
        connection.h11.receive_data(data)
        self.gone = not data
        if data:  # the client's next request (pipelined): it waits in h11's buffer
            await trio.sleep_forever()


class _WebSocket:
    """One WebSocket session, as the app's ``receive`` and ``send`` see it, and its frame reader."""

    def __init__(self, connection: Connection, request: h11.Request, key: bytes) -> None:
        self._connection: Connection | None = connection
        self._request = request
        self._key = key
        self._ws: WsConnection | None = None
        self._accepted = self._connect_given = False
        # Accepted, refused or over: the app's receive() goes on from there, and the reader.
        self._decided = trio.Event()
        # An HTTP response on the upgrade request, in place of the accept.
        self._refusal: _HttpExchange | None = None
        # The peer's messages, each with its size, that the app has yet to take: the reader reads on
        # while the app is busy (so that the peer's close or its going is seen) until they come to
        # more than max_message bytes.
        self._to_app, self._inbox = trio.open_memory_channel[tuple[Message, int]](math.inf)
        self._queued = 0
        # Set when the app takes a message, or wants no more.
        self._room = trio.Event()
        self._app_done = False
        self._reader_done = trio.Event()
        self._ended: tuple[int, str] | None = None
        self.ended = trio.Event()
        self._sent = 0

    @property
    def status(self) -> int | None:
        return self._refusal.status if self._refusal is not None else 101 if self._accepted else None

    @property
    def sent(self) -> int:
        return self._refusal.sent if self._refusal is not None else self._sent

    def detach(self) -> None:
        """The session is over: an app task still holding ``receive`` or ``send`` gets nothing more."""
        self._connection = self._ws = None
        self._decided.set()
        self._close_inbox()

    async def receive(self) -> Message:
        if not self._connect_given:
            self._connect_given = True
            await trio.lowlevel.checkpoint()
            return {"type": "websocket.connect"}
        await self._decided.wait()
        try:
            message, size = await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            code, reason = self._ended or (1006, "")
            return {"type": "websocket.disconnect", "code": code, "reason": reason}
        self._queued -= size
        self._room.set()
        return message

    async def send(self, message: Message) -> None:
        kind = message["type"]
        connection = self._connection
        if connection is None:
            await trio.lowlevel.checkpoint()  # the session is over: the app may finish
        elif kind == "websocket.accept" and self.status is None:
            await self._accept(connection, message)
        elif kind == "websocket.send" and self._accepted:
            data, text = message.get("bytes"), message.get("text")
            event = BytesMessage(data=bytes(data)) if data is not None else TextMessage(data=str(text))
            if await self._send_frame(event):
                self._sent += len(event.data) if data is not None else len(str(text).encode())
        elif kind == "websocket.close" and self._accepted:
            await self._close(int(message.get("code") or 1000), message.get("reason"))
        elif kind == "websocket.close" and self.status is None:
            await self._refuse(connection).answer(403, b"")
        elif kind.startswith("websocket.http.response.") and not self._accepted:
            await self._refuse(connection).send({**message, "type": kind.removeprefix("websocket.")})
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on a WebSocket (status {self.status})")

    async def finish(self, raised: bool) -> None:
        """After the app: answer an upgrade it left unanswered (500), close a WebSocket it left
        open (1000, or 1011 if it raised), and give the peer time to answer our close frame."""
        assert self._connection is not None
        self._decided.set()
        self._close_inbox()  # the reader hands nothing more over
        if not self._accepted:
            if self._refusal is None or not self._refusal.written:
                await self._refuse(self._connection).answer(500, _ERROR_BODY)
        elif self._ws is not None:
            if self._ws.state is ConnectionState.OPEN:
                await self._close(1011 if raised else 1000)
            if self._ws.state is ConnectionState.LOCAL_CLOSING:
                with trio.move_on_after(self._connection.settings.close_timeout):
                    await self._reader_done.wait()

    async def read_frames(self) -> None:
        """Once accepted: hand the peer's messages to the app, answer its pings and its close."""
        try:
            await self._decided.wait()
            if self._connection is not None and self._ws is not None:
                await self._pump(self._connection, self._ws)
        finally:
            self._end(1006, "")
            self._reader_done.set()

    def _close_inbox(self) -> None:
        self._app_done = True
        self._inbox.close()
        self._room.set()

    async def _close(self, code: int, reason: str | None = None) -> None:
        """Our close frame, within ``close_timeout``: a peer that reads nothing holds it."""
        assert self._connection is not None
        with trio.move_on_after(self._connection.settings.close_timeout):
            await self._send_frame(CloseConnection(code=code, reason=reason))

    def _refuse(self, connection: Connection) -> _HttpExchange:
        if self._refusal is None:
            self._refusal = _HttpExchange(connection, self._request, close=True)
            self._decided.set()
        return self._refusal

    async def _accept(self, connection: Connection, message: Message) -> None:
        headers = [
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-accept", generate_accept_token(self._key)),
        ]
        if message.get("subprotocol"):
            headers.append((b"sec-websocket-protocol", str(message["subprotocol"]).encode()))
        headers += [(bytes(name).lower(), bytes(value)) for name, value in message.get("headers") or ()]

        def upgrade() -> bytes:
            switching = h11.InformationalResponse(
                status_code=101, headers=headers, reason=http_head.reason(101)
            )
            data = connection.h11.send(switching) or b""
            self._ws = WsConnection(ConnectionType.SERVER, trailing_data=connection.h11.trailing_data[0])
            return data

        self._accepted = True
        await connection.write(upgrade)
        self._decided.set()

    async def _send_frame(self, event: WsEvent) -> bool:
        """Send one frame if the session's state still allows it: checked under the send lock, so
        that our close and the answer to the peer's close, racing, go out once and never collide."""
        connection, ws = self._connection, self._ws
        if connection is None or ws is None:
            return False

        def frame() -> bytes | None:
            answers_close = ws.state is ConnectionState.REMOTE_CLOSING and isinstance(event, CloseConnection)
            return ws.send(event) if ws.state is ConnectionState.OPEN or answers_close else None

        return await connection.write(frame)

    async def _pump(self, connection: Connection, ws: WsConnection) -> None:
        message = bytearray()
        while ws.state is not ConnectionState.CLOSED and (data := await connection.read()):
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, CloseConnection):
                    self._end(event.code, event.reason or "")
                    await self._send_frame(event.response())
                elif isinstance(event, Ping):
                    await self._send_frame(event.response())
                elif isinstance(event, TextMessage | BytesMessage) and self._ended is None:
                    message += event.data.encode() if isinstance(event, TextMessage) else event.data
                    if len(message) > connection.settings.max_message:
                        self._end(1009, "message too big")
                        await self._send_frame(CloseConnection(code=1009, reason="message too big"))
                    elif event.message_finished:
                        text = isinstance(event, TextMessage)
                        await self._hand_over(
                            bytes(message), text=text, limit=connection.settings.max_message
                        )
                        message = bytearray()

    async def _hand_over(self, message: bytes, *, text: bool, limit: int) -> None:
        """Queue the message for the app, first waiting (reading no more) while the messages it has
        yet to take would come to more than ``limit`` bytes with it."""
        while self._queued and self._queued + len(message) > limit and not self._app_done:
            self._room = trio.Event()
            await self._room.wait()
        received: Message = {"type": "websocket.receive", "text": None, "bytes": None}
        received["text" if text else "bytes"] = message.decode() if text else message
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):  # the app is done
            self._to_app.send_nowait((received, len(message)))
            self._queued += len(message)

    def _end(self, code: int, reason: str) -> None:
        """How the session ended, for the app's ``websocket.disconnect``: the first word stands."""
        if self._ended is None:
            self._ended = (code, reason)
            self._to_app.close()
            self.ended.set()


def _scope(kind: str, request: h11.Request, connection: Connection) -> Scope:
    raw_path, _, query = request.target.partition(b"?")
    scope: Scope = {
        "type": kind,
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version.decode(),
        "scheme": "http" if kind == "http" else "ws",
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
