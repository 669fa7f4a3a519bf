"""The API's HTTP server: one HTTP/1.1 exchange as the app sees it and as the wire carries it:
the scope, a request body read only as the app asks, 100-continue, streamed and HEAD responses,
an app's failure and an oversized head, status lines, and an exchange over real TCP.

Rules as in every HTTP server test (``tests/http_serving.py``): pytest-trio in trio_mode; a test in
which time passes takes ``autojump_clock`` and asserts exact ``trio.current_time()`` figures, under
a hard cap on Trio's clock; servers listen on a ``MemoryNetwork`` (or lockstep streams), started
with ``await nursery.start(...)``; clients write the bytes on the wire; tasks are ordered with
``wait_all_tasks_blocked()`` and events, never with sleeps.
"""

from __future__ import annotations

import re
from typing import Any

import h11
import httpx
import pytest
import trio
import trio.testing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.network import TcpNetwork

from .http_serving import CAP, HOST, UPGRADE_HEADERS, hello_app, serving


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
    async with serving(app) as served:
        assert served.url == f"http://{HOST}:{served.listening.port}"
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

    async with serving(app, lockstep=True) as served:
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

    async with serving(app) as served:
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

    async with serving(app) as served:
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
    async with serving(app) as served:
        client = await served.client()
        response, body = await client.request("HEAD", "/")
        assert (b"content-length", b"5") in list(response.headers)
        assert body == b""
        assert (await client.request("GET", "/"))[1] == b"hello", "and the connection goes on"


async def test_an_app_error_is_a_plain_500_and_the_server_serves_on(log_records: list[Any]) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/boom":
            raise RuntimeError("boom")
        if scope["path"] == "/late":
            await send({"type": "http.response.start", "status": 200})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
            raise RuntimeError("late")
        await hello_app(scope, receive, send)

    async with serving(app) as served:
        client = await served.client()
        response, body = await client.request("GET", "/boom")
        assert (response.status_code, body) == (500, b"Internal Server Error")
        failure = next(record for record in log_records if record["level"].name == "ERROR")
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
    async with serving(hello_app, HttpServerSettings(max_head=1024)) as served:
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
    upgrade = "".join(f"{name}: {value}\r\n" for name, value in UPGRADE_HEADERS)
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
    async with serving(app) as served:
        for request, status_line in requests.items():
            stream = await served.connect()
            await stream.send_all(request)
            assert await _status_line(stream) == status_line, request
            await stream.aclose()


async def test_over_tcp_with_httpx_and_the_access_log(log_records: list[Any]) -> None:
    scopes: list[Scope] = []

    async def health(request: Request) -> Response:
        scopes.append(request.scope)
        return Response(status_code=204)

    async def echo(request: Request) -> Response:
        return Response(await request.body())

    app = Starlette(routes=[Route("/api/v1/health", health), Route("/echo", echo, methods=["POST"])])
    listening = await TcpNetwork().listen(HOST, 0)
    server = AsgiServer(app, HttpServerSettings(access_log=True))
    with trio.fail_after(CAP):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(server.serve, listening)
            assert url == f"http://127.0.0.1:{listening.port}"
            async with httpx.AsyncClient(base_url=url) as http:
                assert (await http.get("/api/v1/health?token=secret")).status_code == 204
                assert (await http.post("/echo", content=b"payload")).content == b"payload"
            server.stop()
    scope = scopes[0]
    assert scope["server"] == (HOST, listening.port)
    assert scope["client"][0] == HOST
    messages = [record["message"] for record in log_records if record["level"].name == "INFO"]
    client = f"127.0.0.1:{scope['client'][1]}"
    assert re.fullmatch(rf'{client} "GET /api/v1/health HTTP/1.1" 204 0 B \d+\.\d ms', messages[0])
    assert re.fullmatch(rf'{client} "POST /echo HTTP/1.1" 200 7 B \d+\.\d ms', messages[1])
    assert not any("secret" in message for message in messages)
