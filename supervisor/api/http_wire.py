"""The bytes of one connection of the API's HTTP server: what the peer sends, read as h11's events,
and every write under one send lock, so that the protocol's state and the bytes on the wire move
together. An HTTP exchange (``http_exchange.py``), a WebSocket session (``websocket_session.py``)
and the connection's close (``http_connection.py``) all go through it.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable, Iterable
from typing import Final, final

import h11
import trio
from attrs import frozen
from wsproto.utilities import LocalProtocolError as WsProtocolError

from . import http_head

__all__ = ["PEER_ERRORS", "HttpServerSettings", "HttpWire"]

_RECEIVE_SIZE: Final = 64 * 1024
# How long a close waits for a client still sending a refused body to finish (seconds).
_LINGER: Final = 2.0
# How a connection fails when its peer goes or breaks the protocol: it ends, quietly.
PEER_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, WsProtocolError)


@final
@frozen
class HttpServerSettings:
    """How the API server treats its connections."""

    # An idle keep-alive connection (no request begun) is closed after this many seconds.
    keep_alive_timeout: float = 60.0
    # A request line and headers not all read by then close the connection (seconds).
    header_timeout: float = 15.0
    # A body that sends nothing this long, or slower than body_min_rate (bytes a second) on average
    # once this long has passed, is answered 408 and its connection closed.
    body_timeout: float = 15.0
    body_min_rate: int = 1024
    # A keep-alive connection closes after this many requests.
    max_requests_per_connection: int = 1000
    # Client connections open at once; past it, or past the descriptors left over fd_reserve, a new
    # connection is answered 503 and closed.
    max_connections: int = 10_000
    fd_reserve: int = 256
    # A write that moves nothing for this long cuts its connection (seconds).
    write_timeout: float = 30.0
    # A WebSocket silent this long is pinged (0: never); a ping unanswered by the timeout closes it.
    websocket_ping_interval: float = 20.0
    websocket_ping_timeout: float = 20.0
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


@final
class HttpWire:
    """One stream's reads (through h11 until a WebSocket takes over) and its writes, one at a time."""

    def __init__(self, stream: trio.abc.Stream, settings: HttpServerSettings, stopping: trio.Event) -> None:
        self.stream = stream
        self.settings = settings
        self.stopping = stopping
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=settings.max_head)
        self.send_lock = trio.Lock()
        self.read_closed = False
        self.write_broken = False

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

    def request_read(self) -> bool:
        """Whether both sides are done, taking what is left of the request's body from h11's buffer
        (a GET's end, a small body the app did not read) without waiting for more."""
        try:
            while self.h11.their_state is h11.SEND_BODY:
                if self.h11.next_event() in (h11.NEED_DATA, h11.PAUSED):
                    break
        except h11.RemoteProtocolError:
            return False
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    async def linger(self) -> None:
        """Read and drop what a client still sends of a body that was refused, for a while, so that
        it reads our answer before it sees the end."""
        if self.h11.their_state is not h11.SEND_BODY:
            return
        with trio.move_on_after(_LINGER):
            if isinstance(self.stream, trio.abc.HalfCloseableStream):
                await self.stream.send_eof()
            while await self.read():
                pass
