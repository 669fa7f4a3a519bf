"""One WebSocket session of the API's HTTP server, on wsproto once an exchange is upgraded: the
app's ``receive`` and ``send`` for it, and the reader that hands the peer's messages over, answers its
pings and its close, and holds no more than ``max_message`` bytes the app has yet to take. A peer
silent for ``websocket_ping_interval`` is pinged; one that then sends nothing (a pong or any frame)
within ``websocket_ping_timeout`` of the ping going out is taken for gone, as a half-open peer is:
the session ends with 1011 for the app and on the wire, and the connection closes. Every frame goes
out through the connection's wire (``http_wire.py``), under its send lock.
"""

from __future__ import annotations

import contextlib
import math

import h11
import trio
from starlette.types import Message
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.events import Event as WsEvent
from wsproto.utilities import generate_accept_token

from . import http_head
from .http_exchange import ERROR_BODY, HttpExchange
from .http_wire import HttpWire

__all__ = ["WebSocketSession"]


class WebSocketSession:
    """One WebSocket session, as the app's ``receive`` and ``send`` see it, and its frame reader."""

    def __init__(self, wire: HttpWire, request: h11.Request, key: bytes) -> None:
        self._wire: HttpWire | None = wire
        self._request = request
        self._key = key
        self._ws: WsConnection | None = None
        self._accepted = self._connect_given = False
        # Accepted, refused or over: the app's receive() goes on from there, and the reader.
        self._decided = trio.Event()
        # An HTTP response on the upgrade request, in place of the accept.
        self._refusal: HttpExchange | None = None
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
        # When the peer last sent anything: a ping waits for a silence of the ping interval. While
        # the reader waits for the app to take messages, the peer's silence is not known.
        self._heard_at = trio.current_time()
        self._holding = False

    @property
    def status(self) -> int | None:
        """101 once accepted, the refusal's status, or None while undecided (the access log's)."""
        return self._refusal.status if self._refusal is not None else 101 if self._accepted else None

    @property
    def sent(self) -> int:
        """Bytes of messages (or of the refusal's body) sent to the peer."""
        return self._refusal.sent if self._refusal is not None else self._sent

    def detach(self) -> None:
        """The session is over: an app task still holding ``receive`` or ``send`` gets nothing more."""
        self._wire = self._ws = None
        self._decided.set()
        self._close_inbox()

    async def receive(self) -> Message:
        """``websocket.connect`` first, then the peer's messages, then how the session ended."""
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
        """The app's accept, messages and close, or an HTTP response refusing the upgrade."""
        kind = message["type"]
        wire = self._wire
        if wire is None:
            await trio.lowlevel.checkpoint()  # the session is over: the app may finish
        elif kind == "websocket.accept" and self.status is None:
            await self._accept(wire, message)
        elif kind == "websocket.send" and self._accepted:
            data, text = message.get("bytes"), message.get("text")
            event = BytesMessage(data=bytes(data)) if data is not None else TextMessage(data=str(text))
            if await self._send_frame(event):
                self._sent += len(event.data) if data is not None else len(str(text).encode())
        elif kind == "websocket.close" and self._accepted:
            await self._close(int(message.get("code") or 1000), message.get("reason"))
        elif kind == "websocket.close" and self.status is None:
            await self._refuse(wire).answer(403, b"")
        elif kind.startswith("websocket.http.response.") and not self._accepted:
            await self._refuse(wire).send({**message, "type": kind.removeprefix("websocket.")})
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on a WebSocket (status {self.status})")

    async def finish(self, raised: bool) -> None:
        """After the app: answer an upgrade it left unanswered (500), close a WebSocket it left
        open (1000, or 1011 if it raised), and give the peer time to answer our close frame."""
        assert self._wire is not None
        self._decided.set()
        self._close_inbox()  # the reader hands nothing more over
        if not self._accepted:
            if self._refusal is None or not self._refusal.written:
                await self._refuse(self._wire).answer(500, ERROR_BODY)
        elif self._ws is not None:
            if self._ws.state is ConnectionState.OPEN:
                await self._close(1011 if raised else 1000)
            if self._ws.state is ConnectionState.LOCAL_CLOSING:
                with trio.move_on_after(self._wire.settings.close_timeout):
                    await self._reader_done.wait()

    async def read_frames(self) -> None:
        """Once accepted: hand the peer's messages to the app, answer its pings and its close."""
        try:
            await self._decided.wait()
            if self._wire is not None and self._ws is not None:
                async with trio.open_nursery() as reading:
                    reading.start_soon(self._keep_alive, self._wire, reading.cancel_scope)
                    await self._pump(self._wire, self._ws)
                    reading.cancel_scope.cancel("the peer's side is over")
        finally:
            self._end(1006, "")
            self._reader_done.set()

    async def _keep_alive(self, wire: HttpWire, reading: trio.CancelScope) -> None:
        """Ping the peer after each silence of the ping interval; end the session, and the reading,
        when it says nothing within the ping timeout of a ping going out. A ping held up behind
        output the peer reads slowly is timed from its write, which the wire's write timeout bounds."""
        interval, timeout = wire.settings.websocket_ping_interval, wire.settings.websocket_ping_timeout
        if interval <= 0:
            return
        while True:
            await trio.sleep_until(self._heard_at + interval)
            if trio.current_time() < self._heard_at + interval:
                continue  # the peer spoke meanwhile
            asked = trio.current_time()
            if not await self._send_frame(Ping(payload=b"supervisor")):
                return  # the session is closing, or the wire is broken
            await trio.sleep(timeout)
            if self._heard_at < asked and not self._holding:
                break
        reason = f"no answer to a ping within {timeout:g} s"
        self._end(1011, reason)
        await self._close(1011, reason)
        reading.cancel(reason)

    def _close_inbox(self) -> None:
        self._app_done = True
        self._inbox.close()
        self._room.set()

    async def _close(self, code: int, reason: str | None = None) -> None:
        """Our close frame, within ``close_timeout``: a peer that reads nothing holds it."""
        assert self._wire is not None
        with trio.move_on_after(self._wire.settings.close_timeout):
            await self._send_frame(CloseConnection(code=code, reason=reason))

    def _refuse(self, wire: HttpWire) -> HttpExchange:
        if self._refusal is None:
            self._refusal = HttpExchange(wire, self._request, close=True)
            self._decided.set()
        return self._refusal

    async def _accept(self, wire: HttpWire, message: Message) -> None:
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
            data = wire.h11.send(switching) or b""
            self._ws = WsConnection(ConnectionType.SERVER, trailing_data=wire.h11.trailing_data[0])
            return data

        self._accepted = True
        self._heard_at = trio.current_time()
        await wire.write(upgrade)
        self._decided.set()

    async def _send_frame(self, event: WsEvent) -> bool:
        """Send one frame if the session's state still allows it: checked under the send lock, so
        that our close and the answer to the peer's close, racing, go out once and never collide."""
        wire, ws = self._wire, self._ws
        if wire is None or ws is None:
            return False

        def frame() -> bytes | None:
            answers_close = ws.state is ConnectionState.REMOTE_CLOSING and isinstance(event, CloseConnection)
            return ws.send(event) if ws.state is ConnectionState.OPEN or answers_close else None

        return await wire.write(frame)

    async def _pump(self, wire: HttpWire, ws: WsConnection) -> None:
        message = bytearray()
        while ws.state is not ConnectionState.CLOSED and (data := await wire.read()):
            self._heard_at = trio.current_time()
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, CloseConnection):
                    self._end(event.code, event.reason or "")
                    await self._send_frame(event.response())
                elif isinstance(event, Ping):
                    await self._send_frame(event.response())
                elif isinstance(event, TextMessage | BytesMessage) and self._ended is None:
                    message += event.data.encode() if isinstance(event, TextMessage) else event.data
                    if len(message) > wire.settings.max_message:
                        self._end(1009, "message too big")
                        await self._send_frame(CloseConnection(code=1009, reason="message too big"))
                    elif event.message_finished:
                        text = isinstance(event, TextMessage)
                        await self._hand_over(bytes(message), text=text, limit=wire.settings.max_message)
                        message = bytearray()

    async def _hand_over(self, message: bytes, *, text: bool, limit: int) -> None:
        """Queue the message for the app, first waiting (reading no more) while the messages it has
        yet to take would come to more than ``limit`` bytes with it."""
        while self._queued and self._queued + len(message) > limit and not self._app_done:
            self._room = trio.Event()
            self._holding = True
            try:
                await self._room.wait()
            finally:
                self._holding = False
                self._heard_at = trio.current_time()
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
