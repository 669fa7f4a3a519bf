"""A lean load generator for the benchmarks: keep-alive HTTP/1.1 requests (h11) and WebSocket
sessions (wsproto) on plain trio streams.

On a machine whose cores the load generator shares with the servers it measures, every millisecond
the client spends is taken from them; a general-purpose client (httpx, trio-websocket) spends more
per execution than the daemon does. This one does only what the benchmarks need.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

import h11
import orjson
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import CloseConnection, RejectConnection, Request, TextMessage

__all__ = ["HttpPool", "websocket_messages"]

_RECEIVE: Final = 65536


class _ClosedBeforeResponse(trio.BrokenResourceError):
    pass


class _Connection:
    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host
        self.h11 = h11.Connection(h11.CLIENT)

    async def request(self, method: str, target: str, body: bytes) -> tuple[int, bytes, bool]:
        """Status, body, and whether the connection can carry another request."""
        headers = [
            ("Host", self.host),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
        ]
        connection = self.h11
        status = 0
        try:
            await self.stream.send_all(
                connection.send(h11.Request(method=method, target=target, headers=headers))
                + connection.send(h11.Data(data=body))
                + connection.send(h11.EndOfMessage())
            )
            data = await self.stream.receive_some(_RECEIVE)
        except trio.BrokenResourceError as exc:
            raise _ClosedBeforeResponse(f"{method} {target}: the connection broke") from exc
        if not data:
            raise _ClosedBeforeResponse(f"{method} {target}: the server closed the connection")
        connection.receive_data(data)
        chunks: list[bytes] = []
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await self.stream.receive_some(_RECEIVE))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise trio.BrokenResourceError(f"{method} {target}: the server closed the connection")
        reusable = connection.our_state is h11.DONE and connection.their_state is h11.DONE
        if reusable:
            connection.start_next_cycle()
        return status, b"".join(chunks), reusable


class HttpPool:
    """Keep-alive connections to one server, opened as concurrency asks for them."""

    def __init__(self, address: str) -> None:
        parts = urlsplit(address)
        if not parts.hostname or not parts.port:
            raise ValueError(f"{address}: host and port are needed")
        self._host, self._port, self._netloc = parts.hostname, parts.port, parts.netloc
        self._idle: list[_Connection] = []

    async def post_json(self, target: str, body: Any) -> tuple[int, Any]:
        return await self._request_json("POST", target, orjson.dumps(body))

    async def get_json(self, target: str) -> tuple[int, Any]:
        return await self._request_json("GET", target, b"")

    async def _request_json(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        while True:
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._open()
            try:
                status, data, reusable = await connection.request(method, target, body)
                break
            except _ClosedBeforeResponse:
                await connection.stream.aclose()
                if not reused:
                    raise
                # The server closed the connection while it was idle, before reading this request.
            except BaseException:
                await connection.stream.aclose()
                raise
        if reusable:
            self._idle.append(connection)
        else:
            await connection.stream.aclose()
        return status, orjson.loads(data) if data else None

    async def _open(self) -> _Connection:
        return _Connection(await trio.open_tcp_stream(self._host, self._port), self._netloc)

    async def aclose(self) -> None:
        for connection in self._idle:
            await connection.stream.aclose()
        self._idle.clear()


async def websocket_messages(url: str, last: Callable[[str], bool]) -> list[str]:
    """The text messages of one WebSocket session, up to the one that ``last`` accepts (the client
    then closes) or until the server closes or drops the connection."""
    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        raise ValueError(f"{url}: host and port are needed")
    target = f"{parts.path}?{parts.query}" if parts.query else parts.path
    websocket = WSConnection(ConnectionType.CLIENT)
    messages: list[str] = []
    pieces: list[str] = []
    stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    try:
        await stream.send_all(websocket.send(Request(host=parts.netloc, target=target)))
        while data := await stream.receive_some(_RECEIVE):
            websocket.receive_data(data)
            for event in websocket.events():
                if isinstance(event, RejectConnection):
                    raise RuntimeError(f"{url}: handshake rejected with {event.status_code}")
                if isinstance(event, CloseConnection):
                    with contextlib.suppress(trio.BrokenResourceError):
                        await stream.send_all(websocket.send(event.response()))
                    return messages
                if isinstance(event, TextMessage):
                    pieces.append(event.data)
                    if not event.message_finished:
                        continue
                    messages.append("".join(pieces))
                    pieces.clear()
                    if last(messages[-1]):
                        with contextlib.suppress(trio.BrokenResourceError):
                            await stream.send_all(websocket.send(CloseConnection(code=1000)))
                        return messages
        return messages
    finally:
        await stream.aclose()
