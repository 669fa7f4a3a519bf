"""What the API's HTTP server tests share: a server on a fresh ``MemoryNetwork`` (or lockstep
streams, where a client must be able to stop reading), an HTTP/1.1 client speaking h11 so that the
bytes on the wire are the test's, WebSocket clients from trio-websocket, and the app that says
hello and the one that echoes.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import h11
import trio
import trio.testing
import trio_websocket
from attrs import define, field
from loguru import logger
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.network import Listening, MemoryNetwork

CAP = 600.0
HOST = "127.0.0.1"
UPGRADE_HEADERS = [
    ("upgrade", "websocket"),
    ("connection", "Upgrade"),
    ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("sec-websocket-version", "13"),
]


class LockstepListener(trio.abc.Listener[trio.abc.Stream]):
    """Hands out one end of lockstep stream pairs: a write blocks until the peer reads it."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[trio.abc.Stream](8)

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError from None

    async def aclose(self) -> None:
        self._send.close()
        self._receive.close()
        await trio.lowlevel.checkpoint()

    async def connect(self) -> trio.abc.Stream:
        ours, theirs = trio.testing.lockstep_stream_pair()
        self._send.send_nowait(theirs)
        await trio.lowlevel.checkpoint()
        return ours


class RecordingListener(trio.abc.Listener[trio.abc.Stream]):
    """A listener that keeps a weak reference to every stream it hands out."""

    def __init__(self, inner: trio.abc.Listener[trio.abc.Stream]) -> None:
        self.inner = inner
        self.streams: list[weakref.ref[trio.abc.Stream]] = []

    async def accept(self) -> trio.abc.Stream:
        stream = await self.inner.accept()
        self.streams.append(weakref.ref(stream))
        return stream

    async def aclose(self) -> None:
        await self.inner.aclose()


class HttpClient:
    """HTTP/1.1 over one stream, spoken with h11."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    async def send(self, *events: h11.Event) -> None:
        await self.stream.send_all(b"".join(self.h11.send(event) or b"" for event in events))

    async def next_event(self) -> Any:
        while (event := self.h11.next_event()) is h11.NEED_DATA:
            self.h11.receive_data(bytes(await self.stream.receive_some()))
        return event

    async def response(self) -> tuple[h11.Response, bytes]:
        head = await self.next_event()
        assert isinstance(head, h11.Response), head
        body = b""
        while isinstance(event := await self.next_event(), h11.Data):
            body += event.data
        assert isinstance(event, h11.EndOfMessage), event
        return head, body

    async def request(
        self, method: str, target: str, headers: list[tuple[str, str]] | None = None, body: bytes = b""
    ) -> tuple[h11.Response, bytes]:
        if self.h11.our_state is h11.DONE:
            self.h11.start_next_cycle()
        headers = [("host", "api"), ("content-length", str(len(body))), *(headers or [])]
        await self.send(h11.Request(method=method, target=target, headers=headers), h11.Data(data=body))
        await self.send(h11.EndOfMessage())
        return await self.response()

    async def closed_by_server(self) -> bool:
        return await self.stream.receive_some() == b""


@define
class Served:
    server: AsgiServer
    listening: Listening
    connect: Callable[[], Awaitable[trio.abc.Stream]]
    url: str
    nursery: trio.Nursery
    done: trio.Event = field(factory=trio.Event)

    async def client(self) -> HttpClient:
        return HttpClient(await self.connect())

    async def websocket(self, path: str, **options: Any) -> trio_websocket.WebSocketConnection:
        stream = await self.connect()
        return await trio_websocket.wrap_client_stream(
            self.nursery,
            stream,  # type: ignore[arg-type]  # typed narrower than it is: any trio stream
            "api",
            path,
            **options,
        )


@asynccontextmanager
async def serving(
    app: ASGIApp, settings: HttpServerSettings | None = None, *, lockstep: bool = False
) -> AsyncIterator[Served]:
    """A server on a fresh MemoryNetwork (or lockstep streams); cancelled at the end if it still runs."""
    network = MemoryNetwork()
    listener = LockstepListener()
    listening = Listening(listener, "lockstep", 1) if lockstep else await network.listen(HOST, 0)
    server = AsgiServer(app, settings or HttpServerSettings())

    async def connect() -> trio.abc.Stream:
        return await (listener.connect() if lockstep else network.connect(HOST, listening.port))

    with trio.fail_after(CAP):
        async with trio.open_nursery() as nursery:
            served = Served(server, listening, connect, "", nursery)

            async def serve(task_status: trio.TaskStatus[str]) -> None:
                await server.serve(listening, task_status=task_status)
                served.done.set()

            served.url = await nursery.start(serve)
            yield served
            nursery.cancel_scope.cancel()


def warnings_or_worse(log_records: list[Any]) -> list[str]:
    return [record["message"] for record in log_records if record["level"].no >= logger.level("WARNING").no]


async def hello_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return  # no lifespan
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


def echo_app(disconnects: list[int]) -> Starlette:
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept(
            subprotocol="echo.v1" if "echo.v1" in websocket.scope["subprotocols"] else None
        )
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                disconnects.append(message["code"])
                return
            if message.get("text") == "bye":
                await websocket.close(4001, "done")
                return
            if message.get("text") is not None:
                await websocket.send_text(message["text"])
            else:
                await websocket.send_bytes(message["bytes"])

    return Starlette(routes=[WebSocketRoute("/echo", echo)])
