"""The bytes of one HTTP/1.1 server connection, for both of the project's servers (the API's and the
simulated cluster's): what the peer sends, read as h11's events under the server's clocks and
limits, and every write under one send lock and the write timeout, so that the protocol's state and
the bytes on the wire move together.

What a peer is held to (``HttpServerSettings``, ``docs/http-server.md``):

- a request's head (line and headers) must be whole within ``header_timeout`` of the connection's
  accept, or, for a next request, of its first byte; a connection with no byte of a next request
  is closed after ``keep_alive_timeout``; a head larger than ``max_head`` is answered 431;
- a body must not stall for ``body_timeout`` nor come slower than ``body_min_rate`` bytes a second
  over any ``body_timeout`` waited for (408);
- a body whose framing is broken (a chunk size that is no hex number, a bare LF) is answered 400;
- a request whose framing is ambiguous (Content-Length and Transfer-Encoding both, or chunked on
  HTTP/1.0: RFC 9112 §6.1) and a connection's ``max_requests_per_connection``-th request are
  answered with 'Connection: close';
- a write that moves nothing for ``write_timeout`` cuts the connection.

A refusal (a 400, 408 or 431) is answered only while no response has begun; the connection closes
after it. ``fault`` says what was refused, so that a server logs it as the peer's, never its own.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Final, final

import h11
import trio
from attrs import frozen
from wsproto.utilities import LocalProtocolError as WsProtocolError

from .http_waits import Waits

__all__ = [
    "FIRST_REQUEST_GRACE",
    "GO_SETTINGS",
    "PEER_ERRORS",
    "HttpServerSettings",
    "HttpWire",
    "reason_phrase",
]

# A connection accepted just before the server stops, its first request not read yet, is given this
# long for it (seconds): its client sent it to be answered.
FIRST_REQUEST_GRACE: Final = 1.0
_RECEIVE_SIZE: Final = 64 * 1024
# A write is sent in slices of this size, each within write_timeout: a peer that takes less than
# this in that long has stopped reading.
_WRITE_SLICE: Final = 64 * 1024
# How long a close waits for a client still sending a refused body to finish (seconds).
_LINGER: Final = 2.0
# How a connection fails when its peer goes or breaks the protocol: it ends, quietly.
PEER_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, WsProtocolError)


@final
@frozen
class HttpServerSettings:
    """How a server treats its connections. The defaults are Poseidon's (Go's ``net/http`` with its
    ReadHeaderTimeout and ReadTimeout of 15 s, IdleTimeout 60 s); ``math.inf`` is no limit."""

    # An idle keep-alive connection (no byte of a next request) is closed after this many seconds.
    keep_alive_timeout: float = 60.0
    # A request line and headers not all read by then close the connection (seconds).
    header_timeout: float = 15.0
    # A body that sends nothing this long, or slower than body_min_rate (bytes a second) over each
    # span this long waited for, is answered 408 and its connection closed; a large body that waits
    # this long for room in the body budget is answered 503.
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
    # Bytes of large request bodies (over 1 MiB each) read at once across connections; a body that
    # would pass it waits for its turn (``base/body_budget.py``).
    body_budget: int = 128 * 1024 * 1024
    # A request line and headers larger than this (bytes) are answered 431; the connection closes.
    max_head: int = 64 * 1024
    # One INFO line per request and per WebSocket.
    access_log: bool = False
    # A connection's close waits this long for a write in flight; a WebSocket as long for the
    # peer's answer to its close frame.
    close_timeout: float = 5.0


# Go's net/http as Nomad runs it: no read or write timeout, idle connections kept as long as the
# read timeout (none), no cap but the descriptors; Go's 1 MiB of headers.
GO_SETTINGS: Final = HttpServerSettings(
    keep_alive_timeout=math.inf,
    header_timeout=math.inf,
    body_timeout=math.inf,
    body_min_rate=0,
    max_requests_per_connection=2**62,
    max_connections=2**62,
    fd_reserve=0,
    write_timeout=math.inf,
    max_head=1024 * 1024,
)


def reason_phrase(status: int) -> bytes:
    """The status line's reason phrase, as Python's HTTP status list has it ("" if unknown)."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


@final
class HttpWire:
    """One stream's reads (through h11 until a WebSocket takes over) and its writes, one at a time."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        settings: HttpServerSettings,
        stopping: trio.Event,
        *,
        reason: Callable[[int], bytes] = reason_phrase,
        waits: Waits | None = None,
    ) -> None:
        self.stream = stream
        self.settings = settings
        self.stopping = stopping
        self.reason = reason
        self._waits = Waits() if waits is None else waits
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=settings.max_head)
        self.send_lock = trio.Lock()
        self.read_closed = False
        self.write_broken = False
        # What the peer was refused for (a head too slow, a bad chunk...): the peer's fault.
        self.fault: str | None = None
        # The request read last is to be the connection's last: its response says so.
        self.last_request = False
        # Set while waiting for the first byte of a next request, and for the rest of a head begun:
        # a graceful stop ends the one and hastens the other, a server at its cap takes either.
        self.idle_scope: trio.CancelScope | None = None
        self.head_scope: trio.CancelScope | None = None
        self.requests = 0
        self._accepted = trio.current_time()
        self._body_waited = 0.0
        self._body_bytes = 0

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
        """h11's next event, reading from the peer only when h11 needs more (no clock: a WebSocket's
        handshake, read whole with its head)."""
        while (event := self.h11.next_event()) is h11.NEED_DATA:
            self.h11.receive_data(await self.read())
        return event

    async def next_request(self) -> h11.Request | None:
        """The next request's head, or None when the connection is to close: the peer closed, went
        idle past ``keep_alive_timeout``, the server stops while it is idle, or its head was refused
        (too slow: 408, unparsable: 400, too large: 431; answered before None)."""
        settings = self.settings
        first = self.requests == 0
        deadline = self._accepted + settings.header_timeout if first else math.inf
        self._body_waited, self._body_bytes = 0.0, 0
        try:
            event: object = self.h11.next_event()
            if event is h11.NEED_DATA and not self.h11.trailing_data[0]:
                idle = deadline if first else trio.current_time() + settings.keep_alive_timeout
                began = self._accepted if first else trio.current_time()
                with (
                    trio.CancelScope(deadline=idle) as self.idle_scope,
                    self._waits.idle(self.idle_scope, began),
                ):
                    if self.stopping.is_set() and not first:
                        self.idle_scope.cancel("the server stops")
                    elif self.stopping.is_set():
                        self.idle_scope.deadline = min(idle, trio.current_time() + FIRST_REQUEST_GRACE)
                    self.h11.receive_data(await self.read())
                self.idle_scope = None
                if self.h11.trailing_data[0] == b"":
                    return None  # idle past its time, the server stops, or the peer closed
                event = self.h11.next_event()
            if event is h11.NEED_DATA:
                if not first:
                    deadline = trio.current_time() + settings.header_timeout
                if self.stopping.is_set():
                    deadline = min(deadline, trio.current_time() + FIRST_REQUEST_GRACE)
                with (
                    trio.CancelScope(deadline=deadline) as self.head_scope,
                    self._waits.head(self.head_scope, trio.current_time()),
                ):
                    event = await self.next_event()
                self.head_scope = None
                if event is h11.NEED_DATA:
                    self.fault = "its request's head came too slowly"
                    await self.refuse(408)
                    return None
        except h11.RemoteProtocolError as exc:
            if not self.read_closed:
                self.fault = f"its request's head is malformed: {exc}"
                await self.refuse(exc.error_status_hint)
            return None
        finally:
            self.idle_scope = self.head_scope = None
        if not isinstance(event, h11.Request):
            return None
        if _head_size(event) > settings.max_head:  # h11 limits only a head still incomplete
            self.fault = "its request's head is too large"
            await self.refuse(431)
            return None
        self.requests += 1
        self.last_request = self.requests >= settings.max_requests_per_connection or _ambiguous(event)
        return event

    async def next_body_event(self) -> h11.Data | h11.EndOfMessage | None:
        """The request body's next part, or None when there is none to come: the peer has gone, or
        the body was refused (its framing broken: 400; stalled or too slow: 408; answered if no
        response has begun, and ``fault`` says why)."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                if not self.read_closed:
                    self.fault = f"its request's body is malformed: {exc}"
                    await self.refuse(400)
                return None
            if isinstance(event, h11.Data | h11.EndOfMessage):
                return event
            if event is not h11.NEED_DATA:
                return None
            if self._chunk_line_broken():
                self.fault = "its request's body is malformed: a chunk's size line ends in a bare LF"
                await self.refuse(400)
                return None
            data = await self._read_body_bytes()
            if data is None:
                await self.refuse(408)
                return None
            self.h11.receive_data(data)

    def _chunk_line_broken(self) -> bool:
        """Whether a chunked body waits for a chunk's size line that already ended in a bare LF:
        h11 waits for CRLF for ever (RFC 9112 7.1 takes CRLF; hypercorn and Go answer 400). Past
        the last chunk, trailers are headers, where h11 takes a bare LF itself."""
        buffered = bytes(self.h11.trailing_data[0])
        if b"\n" not in buffered or b"\r\n" in buffered:
            return False
        reader = getattr(self.h11, "_reader", None)
        return getattr(reader, "_bytes_in_chunk", None) == 0 and not getattr(reader, "_reading_trailer", True)

    async def _read_body_bytes(self) -> bytes | None:
        """The body's next bytes; None if the peer stalled past ``body_timeout`` or, that long
        waited for, sends slower than ``body_min_rate``."""
        settings = self.settings
        began = trio.current_time()
        data = None
        with trio.move_on_after(settings.body_timeout):
            data = await self.read()
        self._body_waited += trio.current_time() - began
        if data is None:
            self.fault = f"its request's body sent nothing for {settings.body_timeout:g} s"
            return None
        self._body_bytes += len(data)
        waited = self._body_waited
        if data and waited >= settings.body_timeout:
            # Each body_timeout of waiting is judged on its own: a fast start buys no credit for a
            # trickle after it.
            slow = self._body_bytes < settings.body_min_rate * waited
            self._body_waited, self._body_bytes = 0.0, 0
        else:
            slow = False
        if slow:
            self.fault = f"its request's body came slower than {settings.body_min_rate} bytes a second"
            return None
        return data

    async def write(self, produce: Callable[[], bytes | None]) -> bool:
        """Send what ``produce`` makes, made under the send lock so that the protocol's state and
        the bytes on the wire move together; False when nothing went out. A write cancelled part-way
        (a peer that reads nothing holds it) may have sent part of a frame or response: nothing is
        written after it, as what followed would not parse. A slice of the write that moves nothing
        for ``write_timeout`` cuts the connection: the peer has stopped reading."""
        async with self.send_lock:
            await trio.lowlevel.checkpoint_if_cancelled()  # cancelled before anything went out
            data = None if self.write_broken else produce()
            if not data:
                return False
            try:
                return await self.send_unlocked(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.write_broken = True
                return False
            except trio.Cancelled:
                self.write_broken = True
                raise

    async def send_unlocked(self, data: bytes) -> bool:
        """Send ``data`` within the write timeout, for a connection that has one writer (the
        simulated cluster's: no lock, so no schedule point of its own); False if the peer read
        nothing of a slice for ``write_timeout`` (the connection is then closed). The peer's errors
        are raised."""
        timeout = self.settings.write_timeout
        if len(data) <= _WRITE_SLICE or math.isinf(timeout):
            sent = await self._send(data)
        else:
            view = memoryview(data)
            sent = True
            for start in range(0, len(data), _WRITE_SLICE):
                if not (sent := await self._send(view[start : start + _WRITE_SLICE])):
                    break
        if not sent:
            self.write_broken = True
            self.fault = f"it read nothing of a write for {timeout:g} s"
            # Its reads end too: whoever waits on the peer learns that it has gone.
            await trio.aclose_forcefully(self.stream)
        return sent

    async def _send(self, data: bytes | memoryview) -> bool:
        with trio.move_on_after(self.settings.write_timeout):
            await self.stream.send_all(data)
            return True
        return False

    async def send_h11(self, *events: h11.Event) -> bool:
        """Send h11 events, under the send lock; False when nothing went out."""
        return await self.write(lambda: b"".join(self.h11.send(event) or b"" for event in events))

    def response(self, status: int, headers: Iterable[tuple[bytes, bytes]], *, close: bool) -> h11.Response:
        """A response head with a Date, and 'Connection: close' if asked, if the server stops, or if
        the request is to be the connection's last."""
        pairs = [(bytes(name).lower(), bytes(value)) for name, value in headers]
        if not any(name == b"date" for name, _ in pairs):
            pairs.append((b"date", email.utils.formatdate(usegmt=True).encode()))
        closes = close or self.stopping.is_set() or self.last_request
        if closes and (b"connection", b"close") not in pairs:
            pairs.append((b"connection", b"close"))
        return h11.Response(status_code=status, headers=pairs, reason=self.reason(status))

    async def refuse(self, status: int, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """Answer a request that cannot be served (unparsable, too slow, a bad handshake) before
        closing, if no response has begun."""
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            head = self.response(status, [(b"content-length", b"0"), *headers], close=True)
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
        if self.h11.their_state is not h11.SEND_BODY or self.fault is not None:
            return
        with trio.move_on_after(_LINGER):
            if isinstance(self.stream, trio.abc.HalfCloseableStream):
                await self.stream.send_eof()
            while await self.read():
                pass


def _head_size(request: h11.Request) -> int:
    """The size of a request line and headers on the wire, give or take their whitespace."""
    fields = sum(len(name) + len(value) + 4 for name, value in request.headers)
    return len(request.method) + len(request.target) + 12 + fields


def _ambiguous(request: h11.Request) -> bool:
    """Whether the request's framing is one that a proxy before us may read otherwise (RFC 9112
    §6.1): a Transfer-Encoding with a Content-Length, or on HTTP/1.0."""
    names = {name for name, _ in request.headers}
    chunked = b"transfer-encoding" in names
    return chunked and (b"content-length" in names or request.http_version == b"1.0")
