"""The API's HTTP server: how long a connection lives: kept alive between requests for its idle
timeout only, closed after an answer that left a body unread, ended as soon as its client has
gone (and the app told), and freed by reference counting alone.

Rules as in every HTTP server test (``tests/http_serving.py``): pytest-trio in trio_mode; a test in
which time passes takes ``autojump_clock`` and asserts exact ``trio.current_time()`` figures, under
a hard cap on Trio's clock; servers listen on a ``MemoryNetwork`` (or lockstep streams), started
with ``await nursery.start(...)``; clients write the bytes on the wire; tasks are ordered with
``wait_all_tasks_blocked()`` and events, never with sleeps.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from typing import Any

import h11
import trio
import trio.testing
import trio_websocket
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.network import Listening, MemoryNetwork

from .http_serving import (
    CAP,
    HOST,
    HttpClient,
    RecordingListener,
    echo_app,
    hello_app,
    serving,
    warnings_or_worse,
)


async def test_keep_alive_and_the_idle_timeout_that_runs_only_between_requests(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/slow":
            await trio.sleep(100)  # longer than the keep-alive timeout: the request is not cut
        await hello_app(scope, receive, send)

    async with serving(app, HttpServerSettings(keep_alive_timeout=10)) as served:
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
        await hello_app(scope, receive, send)

    async with serving(app) as served:
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


async def test_receive_says_http_disconnect_when_the_client_leaves_or_the_response_is_complete(
    log_records: list[Any],
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
        await hello_app(scope, receive, send)
        messages.append((await receive())["type"])
        answered.set()

    async with serving(app) as served:
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
    assert warnings_or_worse(log_records) == [], (
        "an app that answers nobody once its client has left is no error"
    )


async def test_a_streaming_response_ends_as_soon_as_its_client_leaves() -> None:
    ended = trio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            await trio.sleep_forever()  # as a download waits for its runner
        finally:
            ended.set()

    app = Starlette(routes=[Route("/", lambda request: StreamingResponse(chunks()))])
    async with serving(app) as served:
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
            await hello_app(scope, receive, send)

    async with serving(app) as served:
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


async def test_a_finished_connection_is_freed_by_reference_counting_alone() -> None:
    async def raises(request: Request) -> Response:
        raise RuntimeError("boom")

    app = Starlette(routes=[Route("/boom", raises), *echo_app([]).routes])
    network = MemoryNetwork()
    listening = await network.listen(HOST, 0)
    recording = RecordingListener(listening.listener)
    server = AsgiServer(app, HttpServerSettings())
    gc.collect()
    gc.disable()
    try:
        with trio.fail_after(CAP):
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve, Listening(recording, HOST, listening.port))
                client = HttpClient(await network.connect(HOST, listening.port))
                assert (await client.request("GET", "/boom"))[0].status_code == 500
                await client.stream.aclose()
                stream = await network.connect(HOST, listening.port)
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
