"""The API's ASGI server (``supervisor/api/http_server.py``): HTTP/1.1, WebSocket, lifespan, stop and cut.

Rules of this module:
- pytest-trio in trio_mode. A test in which time passes takes ``autojump_clock`` and asserts exact
  ``trio.current_time()`` figures; every test runs under a hard cap on Trio's clock (``_CAP``).
- Servers listen on a ``MemoryNetwork`` (or in-memory lockstep streams, where a client must be able
  to stop reading), one test on 127.0.0.1 port 0 over real TCP; each starts with
  ``await nursery.start(server.serve, ...)``.
- Clients write raw HTTP with h11, WebSockets with trio-websocket (httpx over TCP): the bytes on the
  wire are the test's.
- Tasks are ordered with ``wait_all_tasks_blocked()`` and events, never with sleeps.
"""

from __future__ import annotations

import contextlib
import gc
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import h11
import httpx
import pytest
import trio
import trio.testing
import trio_websocket
from attrs import define, field
from loguru import logger
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.network import Listening, MemoryNetwork, TcpNetwork

_CAP = 600.0
_HOST = "127.0.0.1"
_UPGRADE = [
    ("upgrade", "websocket"),
    ("connection", "Upgrade"),
    ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("sec-websocket-version", "13"),
]


class _LockstepListener(trio.abc.Listener[trio.abc.Stream]):
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


class _RecordingListener(trio.abc.Listener[trio.abc.Stream]):
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


class _Client:
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
class _Served:
    server: AsgiServer
    listening: Listening
    connect: Callable[[], Awaitable[trio.abc.Stream]]
    url: str
    nursery: trio.Nursery
    done: trio.Event = field(factory=trio.Event)

    async def client(self) -> _Client:
        return _Client(await self.connect())

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
async def _serving(
    app: ASGIApp, settings: HttpServerSettings | None = None, *, lockstep: bool = False
) -> AsyncIterator[_Served]:
    """A server on a fresh MemoryNetwork (or lockstep streams); cancelled at the end if it still runs."""
    network = MemoryNetwork()
    listener = _LockstepListener()
    listening = Listening(listener, "lockstep", 1) if lockstep else await network.listen(_HOST, 0)
    server = AsgiServer(app, settings or HttpServerSettings())

    async def connect() -> trio.abc.Stream:
        return await (listener.connect() if lockstep else network.connect(_HOST, listening.port))

    with trio.fail_after(_CAP):
        async with trio.open_nursery() as nursery:
            served = _Served(server, listening, connect, "", nursery)

            async def serve(task_status: trio.TaskStatus[str]) -> None:
                await server.serve(listening, task_status=task_status)
                served.done.set()

            served.url = await nursery.start(serve)
            yield served
            nursery.cancel_scope.cancel()


@pytest.fixture
def records() -> Iterator[list[Any]]:
    """Every loguru record logged while the test runs."""
    captured: list[Any] = []
    sink = logger.add(lambda message: captured.append(message.record), level="DEBUG")
    yield captured
    logger.remove(sink)


def _errors(records: list[Any]) -> list[str]:
    return [record["message"] for record in records if record["level"].no >= logger.level("WARNING").no]


async def _hello(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return  # no lifespan
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


async def test_a_get_and_a_post_whose_body_reaches_the_app_piece_by_piece() -> None:
    scopes: list[Scope] = []
    pieces: list[bytes] = []

    async def hello(request: Request) -> Response:
        scopes.append(request.scope)
        return PlainTextResponse("hello")

    async def upload(request: Request) -> Response:
        async for piece in request.stream():
            pieces.append(piece)
        return PlainTextResponse(str(sum(map(len, pieces))))

    app = Starlette(routes=[Route("/a b/hello", hello), Route("/upload", upload, methods=["POST"])])
    async with _serving(app) as served:
        assert served.url == f"http://{_HOST}:{served.listening.port}"
        client = await served.client()
        response, body = await client.request("GET", "/a%20b/hello?x=1&y=%20", [("X-Trace", "abc")])
        assert (response.status_code, body) == (200, b"hello")
        scope = scopes[0]
        assert scope["type"] == "http"
        assert scope["asgi"]["version"] == "3.0"
        assert (scope["http_version"], scope["method"], scope["scheme"]) == ("1.1", "GET", "http")
        assert (scope["path"], scope["raw_path"], scope["query_string"]) == (
            "/a b/hello",
            b"/a%20b/hello",
            b"x=1&y=%20",
        )
        assert scope["root_path"] == ""
        assert (b"x-trace", b"abc") in scope["headers"]
        assert scope["client"] is None
        assert scope["server"] is None

        client.h11.start_next_cycle()
        head = h11.Request(
            method="POST", target="/upload", headers=[("host", "api"), ("transfer-encoding", "chunked")]
        )
        await client.send(head)
        for piece in (b"one", b"two", b"three"):
            await client.send(h11.Data(data=piece))
            await trio.testing.wait_all_tasks_blocked()
        assert pieces == [b"one", b"two", b"three"], "each piece reached the app before the body ended"
        await client.send(h11.EndOfMessage())
        response, body = await client.response()
        assert (response.status_code, body) == (200, b"11")


async def test_the_body_is_read_from_the_network_only_as_the_app_asks_for_it() -> None:
    received: list[int] = []
    more = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        message = await receive()
        received.append(len(message["body"]))
        await more.wait()
        while message.get("more_body"):
            message = await receive()
            received.append(len(message["body"]))
        await send({"type": "http.response.start", "status": 204})
        await send({"type": "http.response.body"})

    async with _serving(app, lockstep=True) as served:
        client = await served.client()
        uploaded = trio.Event()

        async def upload() -> None:
            head = h11.Request(
                method="PUT", target="/", headers=[("host", "api"), ("content-length", "1000000")]
            )
            await client.send(head, h11.Data(data=b"x" * 1_000_000), h11.EndOfMessage())
            uploaded.set()

        served.nursery.start_soon(upload)
        await trio.testing.wait_all_tasks_blocked()
        assert len(received) == 1
        assert received[0] <= 64 * 1024
        assert not uploaded.is_set(), "the server reads no further while the app does not ask"
        more.set()
        await uploaded.wait()
        response, _ = await client.response()
        assert response.status_code == 204
        assert sum(received) == 1_000_000


async def test_expect_100_continue_is_answered_when_the_app_reads_the_body() -> None:
    read = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await read.wait()
        body = (await receive())["body"]
        while not body.endswith(b"!"):
            body += (await receive())["body"]
        await send({"type": "http.response.start", "status": 200})
        await send({"type": "http.response.body", "body": body})

    async with _serving(app) as served:
        client = await served.client()
        headers = [("host", "api"), ("content-length", "3"), ("expect", "100-continue")]
        await client.send(h11.Request(method="POST", target="/", headers=headers))
        events: list[Any] = []

        async def read_first_event() -> None:
            events.append(await client.next_event())

        served.nursery.start_soon(read_first_event)
        await trio.testing.wait_all_tasks_blocked()
        assert events == [], "no 100 Continue before the app asks for the body"
        read.set()
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(events[0], h11.InformationalResponse)
        assert events[0].status_code == 100
        await client.send(h11.Data(data=b"hi!"), h11.EndOfMessage())
        response, body = await client.response()
        assert (response.status_code, body) == (200, b"hi!")


async def test_keep_alive_and_the_idle_timeout_that_runs_only_between_requests(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/slow":
            await trio.sleep(100)  # longer than the keep-alive timeout: the request is not cut
        await _hello(scope, receive, send)

    async with _serving(app, HttpServerSettings(keep_alive_timeout=10)) as served:
        client = await served.client()
        assert (await client.request("GET", "/"))[1] == b"hello"
        await trio.sleep(9)
        assert (await client.request("GET", "/slow"))[1] == b"hello"
        assert trio.current_time() == 109
        assert (await client.request("GET", "/"))[1] == b"hello"
        assert served.server.connection_count == 1, "three requests on one connection"
        assert await client.closed_by_server()
        assert trio.current_time() == 119
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 0


async def test_an_answer_that_leaves_a_body_unread_says_it_closes_the_connection() -> None:
    """An app that answers before reading a body (a refusal, a standby's 503): the rest of the body
    may still be on its way, so the response says 'Connection: close' and the connection closes;
    a client that reused it would meet a server gone without an answer. Requests without a body
    keep their connection."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/read":
            while (await receive()).get("more_body"):
                pass
        await _hello(scope, receive, send)

    async with _serving(app) as served:
        client = await served.client()
        head, _ = await client.request("GET", "/")
        assert (b"connection", b"close") not in list(head.headers)
        head, _ = await client.request("POST", "/read", body=b"0123456789")
        assert (b"connection", b"close") not in list(head.headers), "a body read whole keeps it"
        client.h11.start_next_cycle()
        await client.send(
            h11.Request(method="POST", target="/", headers=[("host", "api"), ("content-length", "10")]),
            h11.Data(data=b"12345"),
        )
        head, body = await client.response()
        assert body == b"hello"
        assert (b"connection", b"close") in list(head.headers), "said before the close"
        await client.stream.send_all(b"67890")
        assert await client.closed_by_server()


async def test_a_response_is_streamed_as_the_app_sends_it() -> None:
    second = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": b"first ", "more_body": True})
        await second.wait()
        await send({"type": "http.response.body", "body": b"second", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async with _serving(app) as served:
        client = await served.client()
        await client.send(
            h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage()
        )
        head = await client.next_event()
        assert (b"transfer-encoding", b"chunked") in list(head.headers)
        assert (await client.next_event()).data == b"first "
        second.set()
        assert (await client.next_event()).data == b"second"
        assert isinstance(await client.next_event(), h11.EndOfMessage)


async def test_head_responses_carry_no_body() -> None:
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("hello"))])
    async with _serving(app) as served:
        client = await served.client()
        response, body = await client.request("HEAD", "/")
        assert (b"content-length", b"5") in list(response.headers)
        assert body == b""
        assert (await client.request("GET", "/"))[1] == b"hello", "and the connection goes on"


async def test_an_app_error_is_a_plain_500_and_the_server_serves_on(records: list[Any]) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/boom":
            raise RuntimeError("boom")
        if scope["path"] == "/late":
            await send({"type": "http.response.start", "status": 200})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
            raise RuntimeError("late")
        await _hello(scope, receive, send)

    async with _serving(app) as served:
        client = await served.client()
        response, body = await client.request("GET", "/boom")
        assert (response.status_code, body) == (500, b"Internal Server Error")
        failure = next(record for record in records if record["level"].name == "ERROR")
        assert "/boom" in failure["message"]
        assert str(failure["exception"].value) == "boom", "logged with its traceback"
        assert (await client.request("GET", "/"))[1] == b"hello", "the same connection goes on"

        late = await served.client()
        await late.send(
            h11.Request(method="GET", target="/late", headers=[("host", "api")]), h11.EndOfMessage()
        )
        assert (await late.next_event()).status_code == 200
        assert (await late.next_event()).data == b"part"
        with pytest.raises(h11.RemoteProtocolError):
            await late.next_event()  # cut in the middle of its body

        assert (await (await served.client()).request("GET", "/"))[1] == b"hello"


async def test_a_head_over_max_head_is_431_and_the_connection_closes() -> None:
    async with _serving(_hello, HttpServerSettings(max_head=1024)) as served:
        client = await served.client()
        await client.stream.send_all(b"GET / HTTP/1.1\r\nHost: api\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
        response, _ = await client.response()
        assert response.status_code == 431
        assert await client.closed_by_server()

        client = await served.client()  # a head that never ends
        await client.stream.send_all(b"GET / HTTP/1.1\r\nHost: api\r\nX-Big: " + b"a" * 2000)
        response, _ = await client.response()
        assert response.status_code == 431
        assert await client.closed_by_server()


async def test_receive_says_http_disconnect_when_the_client_leaves_or_the_response_is_complete(
    records: list[Any],
) -> None:
    messages: list[str] = []
    answered = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await receive()  # the whole (empty) body
        if scope["path"] == "/wait":
            messages.append((await receive())["type"])
            return
        await _hello(scope, receive, send)
        messages.append((await receive())["type"])
        answered.set()

    async with _serving(app) as served:
        client = await served.client()
        await client.send(
            h11.Request(method="GET", target="/wait", headers=[("host", "api")]), h11.EndOfMessage()
        )
        await trio.testing.wait_all_tasks_blocked()
        assert messages == []
        await client.stream.aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert messages == ["http.disconnect"]

        assert (await (await served.client()).request("GET", "/"))[1] == b"hello"
        await answered.wait()
        assert messages == ["http.disconnect", "http.disconnect"]
    assert _errors(records) == [], "an app that answers nobody once its client has left is no error"


async def test_a_streaming_response_ends_as_soon_as_its_client_leaves() -> None:
    ended = trio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            await trio.sleep_forever()  # as a download waits for its runner
        finally:
            ended.set()

    app = Starlette(routes=[Route("/", lambda request: StreamingResponse(chunks()))])
    async with _serving(app) as served:
        client = await served.client()
        await client.send(
            h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage()
        )
        assert (await client.next_event()).status_code == 200
        assert (await client.next_event()).data == b"first"
        await client.stream.aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert ended.is_set()
        assert served.server.connection_count == 0


async def test_connections_end_as_soon_as_their_client_has_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await release.wait()
            await _hello(scope, receive, send)

    async with _serving(app) as served:
        silent = await served.connect()
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 1
        await silent.aclose()  # before any request
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 0

        client = await served.client()
        await client.send(
            h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage()
        )
        await client.stream.send_eof()  # type: ignore[attr-defined]  # a StapledStream
        release.set()
        assert (await client.response())[1] == b"hello"
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 0, "the request done, nothing keeps it"
        assert trio.current_time() == 0


def _close_of(error: trio_websocket.ConnectionClosed) -> tuple[int, str | None]:
    assert error.reason is not None
    return error.reason.code, error.reason.reason


def _echo_app(disconnects: list[int]) -> Starlette:
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


async def test_a_websocket_echoes_text_and_bytes_and_closes_with_either_sides_code(
    records: list[Any],
) -> None:
    disconnects: list[int] = []
    async with _serving(_echo_app(disconnects), HttpServerSettings(access_log=True)) as served:
        websocket = await served.websocket("/echo", subprotocols=["echo.v1"])
        assert websocket.subprotocol == "echo.v1"
        await websocket.send_message("héllo")
        assert await websocket.get_message() == "héllo"
        await websocket.send_message(b"\x00\x01")
        assert await websocket.get_message() == b"\x00\x01"
        await websocket.ping(b"are you there")  # returns on the matching pong
        await websocket.send_message("bye")
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await websocket.get_message()
        assert _close_of(closed.value) == (4001, "done")

        websocket = await served.websocket("/echo")
        assert websocket.subprotocol is None
        await websocket.aclose(4000, "client done")
        await trio.testing.wait_all_tasks_blocked()
        assert disconnects == [4000]
        assert served.server.connection_count == 0
    lines = [record["message"] for record in records if '"GET /echo WebSocket"' in record["message"]]
    assert len(lines) == 2
    assert re.fullmatch(r'- "GET /echo WebSocket" 101 8 B \d+\.\d ms', lines[0]), (
        "héllo (6 bytes) and 2 bytes echoed"
    )


async def test_a_websocket_message_over_max_message_closes_with_1009() -> None:
    disconnects: list[int] = []
    async with _serving(_echo_app(disconnects), HttpServerSettings(max_message=1000)) as served:
        websocket = await served.websocket("/echo")
        await websocket.send_message("é" * 500)  # 1000 bytes: the most taken
        assert await websocket.get_message() == "é" * 500
        await websocket.send_message(b"x" * 1001)
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await websocket.get_message()
        assert _close_of(closed.value)[0] == 1009
        await trio.testing.wait_all_tasks_blocked()
        assert disconnects == [1009]


async def test_an_upgrade_refused_by_the_app(records: list[Any]) -> None:
    async def refuse(websocket: WebSocket) -> None:
        headers = {"retry-after": "5"}
        await websocket.send_denial_response(PlainTextResponse("standby", status_code=503, headers=headers))

    async def close(websocket: WebSocket) -> None:
        await websocket.close()

    async def leave(websocket: WebSocket) -> None:
        return

    async def fail(websocket: WebSocket) -> None:
        raise RuntimeError("no")

    async def leave_open(websocket: WebSocket) -> None:
        await websocket.accept()

    async def fail_open(websocket: WebSocket) -> None:
        await websocket.accept()
        raise RuntimeError("open")

    routes = [
        WebSocketRoute(f"/{handler.__name__}", handler)
        for handler in (refuse, close, leave, fail, leave_open, fail_open)
    ]
    async with _serving(Starlette(routes=routes)) as served:
        client = await served.client()
        response, body = await client.request("GET", "/refuse", _UPGRADE)
        assert (response.status_code, body) == (503, b"standby")
        assert (b"retry-after", b"5") in list(response.headers)
        assert await client.closed_by_server()
        for path, status in (("/close", 403), ("/leave", 500), ("/fail", 500)):
            response, _ = await (await served.client()).request("GET", path, _UPGRADE)
            assert response.status_code == status, path
        for path, code in (("/leave_open", 1000), ("/fail_open", 1011)):
            websocket = await served.websocket(path)
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await websocket.get_message()
            assert _close_of(closed.value)[0] == code, path
        assert [record["exception"].value.args[0] for record in records if record["exception"]] == [
            "no",
            "open",
        ]
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 0


async def test_a_client_closing_its_websocket_as_the_app_writes_and_closes_harms_nothing(
    records: list[Any],
) -> None:
    """The frames of three writers cross: the app's last message and close frame, and the reader's
    pong and answer to the client's close frame. Trio's scheduling order varies from round to round,
    and so do the checkpoints each side passes before it goes on."""
    ended = 0

    async def app(websocket: WebSocket) -> None:
        nonlocal ended
        await websocket.accept()
        await websocket.receive_text()
        await websocket.send_text("bye")
        for _ in range(websocket.scope["query_string"][0] % 3):
            await trio.lowlevel.checkpoint()
        await websocket.close(1000)
        ended += 1

    async with _serving(Starlette(routes=[WebSocketRoute("/", app)])) as served:
        for round_ in range(300):
            websocket = await served.websocket(f"/?{'abc'[round_ % 3]}")
            await websocket.send_message("done")
            async with trio.open_nursery() as pinging:
                # Answered by the reader as the app writes, or never, once the app's close is out.
                pinging.start_soon(_ping, websocket)
                for _ in range(round_ % 4):
                    await trio.lowlevel.checkpoint()
                await websocket.aclose()
                pinging.cancel_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert ended == 300
        assert served.server.connection_count == 0
        assert not served.done.is_set()
        assert _errors(records) == []
        assert (await (await served.client()).request("GET", "/"))[0].status_code == 404


async def _ping(websocket: trio_websocket.WebSocketConnection) -> None:
    with contextlib.suppress(trio_websocket.ConnectionClosed):
        await websocket.ping()


async def test_stop_refuses_new_connections_finishes_the_request_in_flight_and_closes_idle_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/slow":
            await release.wait()
        await _hello(scope, receive, send)

    async with _serving(app) as served:
        idle = await served.client()
        assert (await idle.request("GET", "/"))[1] == b"hello"
        busy = await served.client()
        await busy.send(
            h11.Request(method="GET", target="/slow", headers=[("host", "api")]), h11.EndOfMessage()
        )
        await trio.testing.wait_all_tasks_blocked()

        served.server.stop()
        served.server.stop()  # idempotent
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ConnectionRefusedError):
            await served.connect()
        assert await idle.closed_by_server()
        assert served.server.connection_count == 1
        assert not served.done.is_set()

        release.set()
        response, body = await busy.response()
        assert body == b"hello"
        assert (b"connection", b"close") in list(response.headers)
        assert await busy.closed_by_server()
        await served.done.wait()
        assert served.server.connection_count == 0
        assert trio.current_time() == 0


async def test_close_connections_ends_writes_blocked_on_clients_that_do_not_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    outside_send_returned = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200})
            while True:
                await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        elif scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})

            async def outside() -> None:  # as an execution writes from the execution nursery
                await send({"type": "websocket.send", "bytes": b"x" * 65536})
                outside_send_returned.set()

            executions.start_soon(outside)
            await trio.sleep_forever()

    async with trio.open_nursery() as executions, _serving(app, lockstep=True) as served:
        download = await served.client()
        await download.send(
            h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage()
        )
        upgraded = await served.client()
        head = h11.Request(method="GET", target="/", headers=[("host", "api"), *_UPGRADE])
        await upgraded.send(head, h11.EndOfMessage())
        assert (await upgraded.next_event()).status_code == 101
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 2
        assert not outside_send_returned.is_set()

        assert served.server.close_connections() == 2
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 0
        assert outside_send_returned.is_set()
        assert trio.current_time() == 0
        served.server.stop()
        await served.done.wait()


async def test_two_servers_in_one_process_share_nothing() -> None:
    async with _serving(_hello) as first, _serving(_hello) as second:
        clients = [await first.client(), await second.client()]
        for client in clients:
            assert (await client.request("GET", "/"))[1] == b"hello"
        assert first.server.close_connections() == 1
        first.server.stop()
        await first.done.wait()
        assert second.server.connection_count == 1
        assert (await clients[1].request("GET", "/"))[1] == b"hello"
        assert (await (await second.client()).request("GET", "/"))[1] == b"hello"


async def test_a_finished_connection_is_freed_by_reference_counting_alone() -> None:
    async def raises(request: Request) -> Response:
        raise RuntimeError("boom")

    app = Starlette(routes=[Route("/boom", raises), *_echo_app([]).routes])
    network = MemoryNetwork()
    listening = await network.listen(_HOST, 0)
    recording = _RecordingListener(listening.listener)
    server = AsgiServer(app, HttpServerSettings())
    gc.collect()
    gc.disable()
    try:
        with trio.fail_after(_CAP):
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve, Listening(recording, _HOST, listening.port))
                client = _Client(await network.connect(_HOST, listening.port))
                assert (await client.request("GET", "/boom"))[0].status_code == 500
                await client.stream.aclose()
                stream = await network.connect(_HOST, listening.port)
                websocket = await trio_websocket.wrap_client_stream(nursery, stream, "api", "/echo")  # type: ignore[arg-type]
                await websocket.send_message("hi")
                assert await websocket.get_message() == "hi"
                await websocket.aclose()
                await trio.testing.wait_all_tasks_blocked()
                assert server.connection_count == 0
                assert len(recording.streams) == 2
                assert [ref() for ref in recording.streams] == [None, None]
                server.stop()
    finally:
        gc.enable()


async def test_the_lifespan_runs_before_serving_and_shuts_down_after_the_last_connection() -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, str]]:
        events.append("startup")
        yield {"greeting": "hi"}
        events.append("shutdown")

    async def hello(request: Request) -> Response:
        events.append(f"request {request.state.greeting}")
        return PlainTextResponse("hello")

    async def chat(websocket: WebSocket) -> None:
        await websocket.accept()
        events.append(f"message {await websocket.receive_text()}")
        await websocket.close()

    app = Starlette(routes=[Route("/", hello), WebSocketRoute("/chat", chat)], lifespan=lifespan)
    async with _serving(app) as served:
        assert events == ["startup"]
        assert (await (await served.client()).request("GET", "/"))[1] == b"hello"
        websocket = await served.websocket("/chat")
        served.server.stop()
        await trio.testing.wait_all_tasks_blocked()
        assert "shutdown" not in events, "a WebSocket goes on through the stop"
        await websocket.send_message("still here")
        await served.done.wait()
        assert events == ["startup", "request hi", "message still here", "shutdown"]


async def test_an_app_without_a_lifespan_is_served_and_a_failed_startup_is_not(records: list[Any]) -> None:
    async with _serving(_hello) as served:
        assert (await (await served.client()).request("GET", "/"))[1] == b"hello"
    assert _errors(records) == []

    @asynccontextmanager
    async def broken(app: Starlette) -> AsyncIterator[None]:
        raise ValueError("no database")
        yield

    network = MemoryNetwork()
    server = AsgiServer(Starlette(lifespan=broken), HttpServerSettings())
    failure = pytest.RaisesExc(RuntimeError, match="(?s)startup failed.*no database")
    with trio.fail_after(_CAP), pytest.RaisesGroup(failure, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, await network.listen(_HOST, 0))
    assert network.listeners == {}, "its listener closed"


async def test_over_tcp_with_httpx_and_the_access_log(records: list[Any]) -> None:
    scopes: list[Scope] = []

    async def health(request: Request) -> Response:
        scopes.append(request.scope)
        return Response(status_code=204)

    async def echo(request: Request) -> Response:
        return Response(await request.body())

    app = Starlette(routes=[Route("/api/v1/health", health), Route("/echo", echo, methods=["POST"])])
    listening = await TcpNetwork().listen(_HOST, 0)
    server = AsgiServer(app, HttpServerSettings(access_log=True))
    with trio.fail_after(_CAP):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(server.serve, listening)
            assert url == f"http://127.0.0.1:{listening.port}"
            async with httpx.AsyncClient(base_url=url) as http:
                assert (await http.get("/api/v1/health?token=secret")).status_code == 204
                assert (await http.post("/echo", content=b"payload")).content == b"payload"
            server.stop()
    scope = scopes[0]
    assert scope["server"] == (_HOST, listening.port)
    assert scope["client"][0] == _HOST
    messages = [record["message"] for record in records if record["level"].name == "INFO"]
    client = f"127.0.0.1:{scope['client'][1]}"
    assert re.fullmatch(rf'{client} "GET /api/v1/health HTTP/1.1" 204 0 B \d+\.\d ms', messages[0])
    assert re.fullmatch(rf'{client} "POST /echo HTTP/1.1" 200 7 B \d+\.\d ms', messages[1])
    assert not any("secret" in message for message in messages)


async def _status_line(stream: trio.abc.Stream) -> bytes:
    """The first line the server sends on ``stream``."""
    received = b""
    while b"\r\n" not in received:
        received += bytes(await stream.receive_some())
    return received.split(b"\r\n", 1)[0]


async def test_every_status_line_carries_its_reason_phrase() -> None:
    async def echo(request: Request) -> Response:
        return Response(await request.body())

    async def unavailable(request: Request) -> Response:
        return Response(status_code=503)

    async def accept(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.close()

    app = Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/unavailable", unavailable),
            WebSocketRoute("/socket", accept),
        ]
    )
    upgrade = "".join(f"{name}: {value}\r\n" for name, value in _UPGRADE)
    requests = {
        b"GET /unavailable HTTP/1.1\r\nhost: api\r\n\r\n": b"HTTP/1.1 503 Service Unavailable",
        b"GET /nowhere HTTP/1.1\r\nhost: api\r\n\r\n": b"HTTP/1.1 404 Not Found",
        b"POST /echo HTTP/1.1\r\nhost: api\r\ncontent-length: 2\r\n\r\nhi": b"HTTP/1.1 200 OK",
        b"POST /echo HTTP/1.1\r\nhost: api\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n": (
            b"HTTP/1.1 100 Continue"
        ),
        f"GET /socket HTTP/1.1\r\nhost: api\r\n{upgrade}\r\n".encode(): b"HTTP/1.1 101 Switching Protocols",
        b"GET / HTTP/9\r\n\r\n": b"HTTP/1.1 400 Bad Request",
    }
    async with _serving(app) as served:
        for request, status_line in requests.items():
            stream = await served.connect()
            await stream.send_all(request)
            assert await _status_line(stream) == status_line, request
            await stream.aclose()
