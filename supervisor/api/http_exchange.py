"""One HTTP/1.1 exchange of the API's HTTP server: a request and its response, as an ASGI app's
``receive`` and ``send`` see them, read and written through the connection's wire (``http_wire.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import h11
import trio
from starlette.types import Message

from ..base.body_budget import SMALL, BodyBudget
from . import http_head
from .http_wire import HttpWire

__all__ = ["ERROR_BODY", "HttpExchange"]

# The body of a 500 the server answers in place of the app.
ERROR_BODY: Final = b"Internal Server Error"


class HttpExchange:
    """One request and its response, as the app's ``receive`` and ``send`` see them."""

    def __init__(
        self, wire: HttpWire, request: h11.Request, *, close: bool, bodies: BodyBudget | None = None
    ) -> None:
        self._wire: HttpWire | None = wire
        self._close = close
        # The share of the server's budget of large bodies this one holds (bytes).
        self._bodies = bodies
        self._share = 0
        self._read = 0
        lengths = http_head.header_tokens(request, b"content-length")
        self._length = int(lengths[0]) if lengths and lengths[0].isdigit() else None
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
        self._wire = None
        if self._bodies is not None:
            self._bodies.give_back(self._share)
            self._share = 0

    async def receive(self) -> Message:
        """The request's body, a part at a time; once read, wait for the client to leave (or the
        response to end) and say ``http.disconnect``."""
        async with self.receive_lock:
            wire = self._wire
            if wire is None or self.complete or self.gone:
                return {"type": "http.disconnect"}
            if not self.body_read:
                return await self._read_body(wire)
            with trio.CancelScope() as self._watch:
                await self._watch_client(wire)
            self._watch = None
            return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        """The app's response: its head, written with the first part of its body."""
        kind = message["type"]
        if self._wire is None or self._wire.fault is not None:
            # The exchange is over, or its request was refused (answered already): the app may finish.
            await trio.lowlevel.checkpoint()
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
        assert self._wire is not None
        self._head = self._wire.response(status, headers, close=self._close)
        self.status = status

    async def _body(self, body: bytes, more: bool) -> None:
        wire, head = self._wire, self._head
        assert wire is not None
        assert head is not None
        if self._head_only or self.status in (204, 304):
            body = b""
        unread = self._body_declared and not self.body_read and not self.written
        if (wire.stopping.is_set() or unread) and (b"connection", b"close") not in list(head.headers):
            head = wire.response(head.status_code, head.headers, close=True)
        self.closes = self.closes or any(h == (b"connection", b"close") for h in head.headers)
        events: list[h11.Event] = [] if self.written else [head]
        self.written = True
        if body:
            events.append(h11.Data(data=body))
        if not more:
            events.append(h11.EndOfMessage())
        await wire.send_h11(*events)
        self.sent += len(body)
        self.complete, self.gone = not more, wire.write_broken
        if (self.complete or self.gone) and self._watch is not None:
            self._watch.cancel("the response is complete")

    async def _read_body(self, wire: HttpWire) -> Message:
        if not await self._take_share():  # before a 100 Continue: a client that waits sends nothing yet
            wire.fault = (
                f"its large body found no room in the server's budget for {wire.settings.body_timeout:g} s"
            )
            await wire.refuse(503, ((b"retry-after", b"1"),))
            self.gone = True
            return {"type": "http.disconnect"}
        if wire.h11.they_are_waiting_for_100_continue:
            await wire.send_h11(
                h11.InformationalResponse(status_code=100, headers=[], reason=http_head.reason(100))
            )
        event = await wire.next_body_event()
        if isinstance(event, h11.Data):
            self._read += len(event.data)
            return {"type": "http.request", "body": bytes(event.data), "more_body": True}
        if isinstance(event, h11.EndOfMessage):
            self.body_read = True
            return {"type": "http.request", "body": b"", "more_body": False}
        self.gone = True
        return {"type": "http.disconnect"}

    async def _take_share(self) -> bool:
        """Before a large body's bytes are read: its share of the budget, waited for in line if need
        be (a Content-Length's whole; a chunked body's, the whole budget once past SMALL); False if
        none came within ``body_timeout``."""
        if self._bodies is None or self._share:
            return True
        if self._length is not None and self._length > SMALL:
            size = self._length
        elif self._length is None and self._read > SMALL:
            size = self._bodies.total
        else:
            return True
        assert self._wire is not None
        share = await self._bodies.take(size, self._wire.settings.body_timeout)
        self._share = share or 0
        return share is not None

    async def _watch_client(self, wire: HttpWire) -> None:
        data = await wire.read()
        wire.h11.receive_data(data)
        self.gone = not data
        if data:  # the client's next request (pipelined): it waits in h11's buffer
            await trio.sleep_forever()
