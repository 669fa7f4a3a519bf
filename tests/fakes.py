"""Small real servers on 127.0.0.1 port 0 that misbehave exactly as a test needs.

``start_raw_http_server`` hands each connection to a handler that writes bytes by hand (chunked or
not, dropped mid-line, trailing text). ``start_exec_server`` speaks WebSocket through wsproto, so a
handler can end a session the ways Nomad does: a close frame with a reason, or a TCP drop without one.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import orjson
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

RawHandler = Callable[["RawRequest", trio.SocketStream], Awaitable[None]]


class RawRequest:
    def __init__(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self.method, self.target, _ = lines[0].split(" ", 2)
        self.headers = {
            k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)
        }


async def read_head(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise trio.BrokenResourceError("client closed before sending a request")
        data += chunk
    return data.split(b"\r\n\r\n", 1)[0]


async def start_raw_http_server(nursery: trio.Nursery, handler: RawHandler) -> str:
    """Serve ``handler`` on 127.0.0.1 port 0; returns ``http://127.0.0.1:PORT``."""

    async def serve_one(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                request = RawRequest(await read_head(stream))
                await handler(request, stream)
            except trio.BrokenResourceError:
                pass

    listeners = await nursery.start(partial(trio.serve_tcp, serve_one, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def chunk(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


CHUNKED_200 = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
HIJACKED_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"


def batch_line(index: int, *, topic: str = "Job", key: str = "job-1", type_: str = "JobRegistered") -> bytes:
    payload: dict[str, Any] = {topic: {"ID": key}}
    event = {
        "Topic": topic,
        "Type": type_,
        "Key": key,
        "Namespace": "default",
        "FilterKeys": None,
        "Index": index,
        "Payload": payload,
    }
    return orjson.dumps({"Index": index, "Events": [event]}) + b"\n"


class WsPeer:
    """The server side of one exec WebSocket, driven by a test."""

    def __init__(self, stream: trio.SocketStream, connection: WSConnection, target: str) -> None:
        self.stream = stream
        self.connection = connection
        self.target = target
        self.received: list[dict[str, Any]] = []

    async def send_json(self, frame: dict[str, Any]) -> None:
        await self.stream.send_all(self.connection.send(TextMessage(data=orjson.dumps(frame).decode())))

    async def send_output(self, stream: str, data: bytes) -> None:
        await self.send_json({stream: {"data": base64.b64encode(data).decode()}})

    async def send_exit(self, code: int) -> None:
        """Nomad's way: close both streams, ``exited`` (``{}`` for 0), then a drop without a close frame."""
        await self.send_json({"stdout": {"close": True}})
        await self.send_json({"stderr": {"close": True}})
        await self.send_json({"exited": True, "result": {"exit_code": code} if code else {}})
        await self.drop()

    async def close(self, code: int, reason: str) -> None:
        await self.stream.send_all(self.connection.send(CloseConnection(code=code, reason=reason)))
        await self.drop()

    async def drop(self) -> None:
        await self.stream.aclose()

    async def receive_json(self) -> dict[str, Any]:
        while True:
            data = await self.stream.receive_some(65536)
            if not data:
                raise trio.BrokenResourceError("client went away")
            self.connection.receive_data(data)
            for event in self.connection.events():
                if isinstance(event, TextMessage):
                    frame: dict[str, Any] = orjson.loads(event.data)
                    self.received.append(frame)
                    return frame


ExecHandler = Callable[[WsPeer], Awaitable[None]]


async def start_exec_server(
    nursery: trio.Nursery,
    handler: ExecHandler,
    *,
    reject_status: int = 0,
    connections: list[trio.SocketStream] | None = None,
) -> str:
    """A WebSocket server for exec sessions; ``reject_status`` answers the upgrade with that HTTP
    status; ``connections`` gets every connection accepted."""

    async def serve_one(stream: trio.SocketStream) -> None:
        if connections is not None:
            connections.append(stream)
        connection = WSConnection(ConnectionType.SERVER)
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            connection.receive_data(data)
            request = next((e for e in connection.events() if isinstance(e, Request)), None)
            if request is not None:
                break
        if reject_status:
            reply = RejectConnection(status_code=reject_status, has_body=True)
            await stream.send_all(connection.send(reply))
            await stream.send_all(connection.send(RejectData(data=b"command is not present")))
            await stream.aclose()
            return
        await stream.send_all(connection.send(AcceptConnection()))
        peer = WsPeer(stream, connection, request.target)
        try:
            await handler(peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    listeners = await nursery.start(partial(trio.serve_tcp, serve_one, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}"
