"""The API's ASGI server: HTTP/1.1 and WebSocket on trio, h11 and wsproto, through the network seam.

It replaces hypercorn 0.18, whose trio worker needed four patches: a close that raced a write ended
the whole server (BusyResourceError), shielded writes let a client that stopped reading hold the stop,
a keep-alive timer kept each connection its client had closed alive for 75 s, and reference cycles
left each connection's buffers to the garbage collector. And it serves on any ``Listening``, so that
a test can serve over in-memory streams.

A connection is one task. The app runs in it, HTTP/1.1 exchange after exchange, reading the request
body from the network only as it asks for more; a WebSocket's frames are read beside it. Every write
and the connection's close take the connection's send lock, but for a cut (``close_connections``):
that close must end a write blocked on a peer that stopped reading, as trio's ``aclose`` may.
Not here: HTTP/2, TLS, trailers, WebSocket compression.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
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

from .network import Listening

__all__ = ["AsgiServer", "HttpServerSettings"]

_Listener = trio.abc.Listener[trio.abc.Stream]

_RECEIVE_SIZE: Final = 64 * 1024
# accept() failures that mean "no file descriptor or buffer for now", as in trio's serve_listeners.
_ACCEPT_RETRY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_DELAY: Final = 0.1
_ERROR_BODY: Final = b"Internal Server Error"
# How a connection fails when its peer goes or breaks the protocol: it ends, quietly.
_PEER_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, WsProtocolError)


@final
@frozen
class HttpServerSettings:
    """How the API server treats its connections."""

    # An idle keep-alive connection (no request begun) is closed after this many seconds.
    keep_alive_timeout: float = 75.0
    # A WebSocket message larger than this (bytes) closes its connection with 1009.
    max_message: int = 1024 * 1024
    # A request line and headers larger than this (bytes) are answered 431; the connection closes.
    max_head: int = 64 * 1024
    # One INFO line per request and per WebSocket.
    access_log: bool = False
    # A connection's close waits this long for a write in flight; a WebSocket as long for the
    # peer's answer to its close frame.
    close_timeout: float = 5.0


@final
class AsgiServer:
    """Serves one ASGI app on one listener; ``stop`` drains it, ``close_connections`` cuts."""

    def __init__(self, app: ASGIApp, settings: HttpServerSettings) -> None:
        self._app = app
        self._settings = settings
        self._stopping = trio.Event()
        self._connections: set[_Connection] = set()
        # Set when the last connection has ended.
        self._drained = trio.Event()
        # The lifespan's state: each request's scope gets a shallow copy (ASGI's "state").
        self._state: dict[str, Any] = {}

    @property
    def connection_count(self) -> int:
        """Connections open now."""
        return len(self._connections)

    async def serve(
        self,
        listening: Listening,
        *,
        connection_nursery: trio.Nursery | None = None,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until stop() and every connection has ended; started with the base URL
        'http://host:port' once the app's lifespan startup is complete. Connections run in
        ``connection_nursery`` when one is given, so that they outlive a failure of this task
        (trio's ``serve_listeners`` takes its ``handler_nursery`` so); in a nursery of its own
        otherwise."""
        try:
            async with trio.open_nursery() as lifespan_nursery:
                lifespan = _Lifespan(self._app, self._state)
                lifespan_nursery.start_soon(lifespan.run)
                await lifespan.start_up()
                url = f"http://{listening.address}"
                if connection_nursery is not None:
                    task_status.started(url)
                    await self._accept_until_stopped(listening.listener, connection_nursery)
                    await self._wait_drained()
                else:
                    async with trio.open_nursery() as handler_nursery:
                        task_status.started(url)
                        await self._accept_until_stopped(listening.listener, handler_nursery)
                await lifespan.shut_down()
                lifespan_nursery.cancel_scope.cancel("the server has stopped")
        finally:
            with trio.move_on_after(self._settings.close_timeout, shield=True):
                await listening.listener.aclose()

    async def _wait_drained(self) -> None:
        while self._connections:
            self._drained = trio.Event()
            await self._drained.wait()

    def stop(self) -> None:
        """Graceful stop: stop accepting (close the listener); idle keep-alive connections close at
        once; a request in flight finishes and its response carries 'Connection: close'; WebSockets
        go on until the app closes them. serve() returns when the last connection has ended.
        Idempotent."""
        self._stopping.set()
        for connection in self._connections:
            connection.stop_if_idle()

    def close_connections(self) -> int:
        """Cut every connection now (the stop's budget has passed): each connection's stream is
        closed forcefully so that a write blocked on a client that stopped reading ends at once;
        returns how many."""
        for connection in self._connections:
            connection.cut()
        return len(self._connections)

    async def _accept_until_stopped(self, listener: _Listener, handler_nursery: trio.Nursery) -> None:
        async with trio.open_nursery() as accepting:
            accepting.start_soon(self._accept, listener, handler_nursery)
            await self._stopping.wait()
            accepting.cancel_scope.cancel("the server stops")
        with trio.move_on_after(self._settings.close_timeout, shield=True):
            await listener.aclose()

    async def _accept(self, listener: _Listener, handler_nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except trio.ClosedResourceError:
                self.stop()  # closed under us: nothing more can come
                return
            except OSError as exc:
                if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                    raise
                logger.error("accepting a connection failed, trying again: {}", exc)
                await trio.sleep(_ACCEPT_RETRY_DELAY)
                continue
            handler_nursery.start_soon(self._serve_connection, stream)
            del stream  # the connection's task holds it alone, and lets it go when it ends

    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        connection = _Connection(stream, self._app, self._settings, self._state, self._stopping)
        self._connections.add(connection)
        try:
            with connection.cut_scope:
                await connection.run()
        except* _PEER_ERRORS:
            pass
        except* Exception:
            logger.exception("a connection of the API server failed")
        finally:
            self._connections.discard(connection)
            await connection.close()
            if not self._connections:
                self._drained.set()


class _Lifespan:
    """The app's lifespan: startup before the server serves, shutdown after its last connection."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self._app = app
        self._state = state
        self._to_app, self._inbox = trio.open_memory_channel[Message](1)
        self._answers, self._answered = trio.open_memory_channel[Message](1)
        self._last_answer = ""

    async def run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self._state}
        # Both closed when the app returns: a phase under way, or to come, learns that it has ended.
        async with self._answers, self._inbox:
            try:
                await self._app(scope, self._inbox.receive, self._answer)
            except Exception:
                # An app without a lifespan raises on its scope at once: it is served without one.
                if self._last_answer == "lifespan.startup.complete":
                    logger.exception("the app's lifespan failed")

    async def start_up(self) -> None:
        """RuntimeError if the app answers that its startup failed."""
        answer = await self._phase("startup")
        if answer.get("type") == "lifespan.startup.failed":
            raise RuntimeError(f"the app's lifespan startup failed: {answer.get('message', '')}")

    async def shut_down(self) -> None:
        answer = await self._phase("shutdown")
        if answer.get("type") == "lifespan.shutdown.failed":
            logger.error("the app's lifespan shutdown failed: {}", answer.get("message", ""))

    async def _answer(self, message: Message) -> None:
        self._last_answer = message["type"]
        await self._answers.send(message)

    async def _phase(self, name: str) -> Message:
        with contextlib.suppress(trio.BrokenResourceError):
            await self._to_app.send({"type": f"lifespan.{name}"})
        try:
            return await self._answered.receive()
        except trio.EndOfChannel:
            return {}


class _Connection:
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
        self.client, self.server = _addresses(stream)
        self.read_closed = False
        self.write_broken = False
        self._idle: trio.CancelScope | None = None
        self._cut = False

    def stop_if_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel("the server stops")

    def cut(self) -> None:
        self._cut = True
        self.cut_scope.cancel("the connection is cut")

    async def close(self) -> None:
        with trio.move_on_after(self.settings.close_timeout, shield=True) as boxed:
            async with contextlib.nullcontext() if self._cut else self.send_lock:
                await trio.aclose_forcefully(self.stream)
        if boxed.cancelled_caught:  # a write held the lock all along
            await trio.aclose_forcefully(self.stream)

    async def run(self) -> None:
        while (request := await self._wait_for_request()) is not None:
            if b"websocket" in _header_tokens(request, b"upgrade"):
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
        the bytes on the wire move together; False when nothing went out."""
        async with self.send_lock:
            data = None if self.write_broken else produce()
            if not data:
                return False
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.write_broken = True
                return False
            return True

    async def send_h11(self, *events: h11.Event) -> None:
        await self.write(lambda: b"".join(self.h11.send(event) or b"" for event in events))

    def response(self, status: int, headers: Iterable[tuple[bytes, bytes]], *, close: bool) -> h11.Response:
        """A response head with a Date, and 'Connection: close' if asked or if the server stops."""
        pairs = [(bytes(name).lower(), bytes(value)) for name, value in headers]
        if not any(name == b"date" for name, _ in pairs):
            pairs.append((b"date", email.utils.formatdate(usegmt=True).encode()))
        if close or self.stopping.is_set():
            pairs.append((b"connection", b"close"))
        return h11.Response(status_code=status, headers=pairs)

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
        if self.settings.access_log:
            logger.info(
                '{} "{} {} {}" {} {} B {:.1f} ms',
                _address(self.client),
                request.method.decode("latin-1"),
                _path(request),
                protocol,
                "-" if status is None else status,
                sent,
                (trio.current_time() - began) * 1000,
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
        if _head_size(event) > self.settings.max_head:  # h11 limits only a head still incomplete
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
                    logger.error("the app sent no response to {}", _path(request))
                await exchange.answer(500, _ERROR_BODY)
        finally:
            exchange.detach()
        version = request.http_version.decode()
        self.log_access(request, f"HTTP/{version}", exchange.status, exchange.sent, began)
        # A receive() still under way (in an app task that outlived the app's call) would read on.
        reusable = exchange.complete and not exchange.receive_lock.locked() and not self.write_broken
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
        key = _handshake_key(request)
        if key is None or not isinstance(self.h11.next_event(), h11.EndOfMessage):
            await self.refuse(400)
            return
        session = _WebSocket(self, request, key)
        try:
            async with trio.open_nursery() as session_nursery:
                session_nursery.start_soon(session.read_frames)
                scope = _scope("websocket", request, self)
                await session.finish(await self.call_app(scope, session.receive, session.send))
                session_nursery.cancel_scope.cancel("the WebSocket session has ended")
        finally:
            session.detach()
        self.log_access(request, "WebSocket", session.status, session.sent, began)


class _HttpExchange:
    """One request and its response, as the app's ``receive`` and ``send`` see them."""

    def __init__(self, connection: _Connection, request: h11.Request, *, close: bool) -> None:
        self._connection: _Connection | None = connection
        self._close = close
        self._head_only = request.method == b"HEAD"
        self.receive_lock = trio.Lock()
        # A receive() waiting for the client to leave: the response's end ends it.
        self._watch: trio.CancelScope | None = None
        self._head: h11.Response | None = None
        self.status: int | None = None
        self.body_read = self.written = self.complete = self.gone = False
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
        if connection.stopping.is_set() and (b"connection", b"close") not in list(head.headers):
            head = connection.response(head.status_code, head.headers, close=True)
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

    async def _read_body(self, connection: _Connection) -> Message:
        if connection.h11.they_are_waiting_for_100_continue:
            await connection.send_h11(h11.InformationalResponse(status_code=100, headers=[]))
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

    async def _watch_client(self, connection: _Connection) -> None:
        data = await connection.read()
        connection.h11.receive_data(data)
        self.gone = not data
        if data:  # the client's next request (pipelined): it waits in h11's buffer
            await trio.sleep_forever()


class _WebSocket:
    """One WebSocket session, as the app's ``receive`` and ``send`` see it, and its frame reader."""

    def __init__(self, connection: _Connection, request: h11.Request, key: bytes) -> None:
        self._connection: _Connection | None = connection
        self._request = request
        self._key = key
        self._ws: WsConnection | None = None
        self._accepted = self._connect_given = False
        # Accepted, refused or over: the app's receive() goes on from there, and the reader.
        self._decided = trio.Event()
        # An HTTP response on the upgrade request, in place of the accept.
        self._refusal: _HttpExchange | None = None
        self._to_app, self._inbox = trio.open_memory_channel[Message](0)
        self._reader_done = trio.Event()
        self._ended: tuple[int, str] | None = None
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
        self._inbox.close()

    async def receive(self) -> Message:
        if not self._connect_given:
            self._connect_given = True
            await trio.lowlevel.checkpoint()
            return {"type": "websocket.connect"}
        await self._decided.wait()
        try:
            return await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            code, reason = self._ended or (1006, "")
            return {"type": "websocket.disconnect", "code": code, "reason": reason}

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
            code, reason = int(message.get("code") or 1000), message.get("reason")
            await self._send_frame(CloseConnection(code=code, reason=reason))
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
        self._inbox.close()  # the reader hands nothing more over
        if not self._accepted:
            if self._refusal is None or not self._refusal.written:
                await self._refuse(self._connection).answer(500, _ERROR_BODY)
        elif self._ws is not None:
            if self._ws.state is ConnectionState.OPEN:
                await self._send_frame(CloseConnection(code=1011 if raised else 1000))
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

    def _refuse(self, connection: _Connection) -> _HttpExchange:
        if self._refusal is None:
            self._refusal = _HttpExchange(connection, self._request, close=True)
            self._decided.set()
        return self._refusal

    async def _accept(self, connection: _Connection, message: Message) -> None:
        headers = [
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-accept", generate_accept_token(self._key)),
        ]
        if message.get("subprotocol"):
            headers.append((b"sec-websocket-protocol", str(message["subprotocol"]).encode()))
        headers += [(bytes(name).lower(), bytes(value)) for name, value in message.get("headers") or ()]

        def upgrade() -> bytes:
            data = connection.h11.send(h11.InformationalResponse(status_code=101, headers=headers)) or b""
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

    async def _pump(self, connection: _Connection, ws: WsConnection) -> None:
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
                        await self._hand_over(bytes(message), text=isinstance(event, TextMessage))
                        message = bytearray()

    async def _hand_over(self, message: bytes, *, text: bool) -> None:
        received: Message = {"type": "websocket.receive", "text": None, "bytes": None}
        received["text" if text else "bytes"] = message.decode() if text else message
        with contextlib.suppress(trio.BrokenResourceError):  # the app is done with the session
            await self._to_app.send(received)

    def _end(self, code: int, reason: str) -> None:
        """How the session ended, for the app's ``websocket.disconnect``: the first word stands."""
        if self._ended is None:
            self._ended = (code, reason)
            self._to_app.close()


def _scope(kind: str, request: h11.Request, connection: _Connection) -> Scope:
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
        offered = _header_tokens(request, b"sec-websocket-protocol", lower=False)
        scope["subprotocols"] = [protocol.decode("latin-1") for protocol in offered if protocol]
        scope["extensions"] = {"websocket.http.response": {}}
    return scope


def _path(request: h11.Request) -> str:
    """The path as it came, without the query (it may hold secrets)."""
    return request.target.partition(b"?")[0].decode("latin-1")


def _head_size(request: h11.Request) -> int:
    """The size of a request line and headers on the wire, give or take their whitespace."""
    fields = sum(len(name) + len(value) + 4 for name, value in request.headers)
    return len(request.method) + len(request.target) + 12 + fields


def _header_tokens(request: h11.Request, name: bytes, *, lower: bool = True) -> list[bytes]:
    """The comma-separated tokens of a header, over all its lines."""
    tokens = [
        token.strip() for header, value in request.headers if header == name for token in value.split(b",")
    ]
    return [token.lower() for token in tokens] if lower else tokens


def _handshake_key(request: h11.Request) -> bytes | None:
    """The Sec-WebSocket-Key of a valid opening handshake (RFC 6455, 4.2.1), else None."""
    headers = dict(request.headers)
    if request.method != b"GET" or b"upgrade" not in _header_tokens(request, b"connection"):
        return None
    return (
        headers.get(b"sec-websocket-key") or None if headers.get(b"sec-websocket-version") == b"13" else None
    )


def _addresses(stream: trio.abc.Stream) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """The peer's and our own (host, port) on TCP; None for a stream that has none (in memory)."""
    if not isinstance(stream, trio.SocketStream):
        return None, None
    try:
        peer, own = stream.socket.getpeername(), stream.socket.getsockname()
    except OSError:  # the peer has already gone
        return None, None
    return (peer[0], peer[1]), (own[0], own[1])


def _address(address: tuple[str, int] | None) -> str:
    if address is None:
        return "-"
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
