"""The API's HTTP server: its start and stop: the lifespan around serving, a graceful stop that
finishes what is in flight, the cut of writes blocked on clients that do not read, and two
servers in one process that share nothing.

Rules as in every HTTP server test (``tests/http_serving.py``): pytest-trio in trio_mode; a test in
which time passes takes ``autojump_clock`` and asserts exact ``trio.current_time()`` figures, under
a hard cap on Trio's clock; servers listen on a ``MemoryNetwork`` (or lockstep streams), started
with ``await nursery.start(...)``; clients write the bytes on the wire; tasks are ordered with
``wait_all_tasks_blocked()`` and events, never with sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h11
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
from supervisor.base.network import MemoryNetwork

from .http_serving import CAP, HOST, UPGRADE_HEADERS, hello_app, serving, warnings_or_worse


async def test_stop_refuses_new_connections_finishes_the_request_in_flight_and_closes_idle_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/slow":
            await release.wait()
        await hello_app(scope, receive, send)

    async with serving(app) as served:
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

    async with trio.open_nursery() as executions, serving(app, lockstep=True) as served:
        download = await served.client()
        await download.send(
            h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage()
        )
        upgraded = await served.client()
        head = h11.Request(method="GET", target="/", headers=[("host", "api"), *UPGRADE_HEADERS])
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
    async with serving(hello_app) as first, serving(hello_app) as second:
        clients = [await first.client(), await second.client()]
        for client in clients:
            assert (await client.request("GET", "/"))[1] == b"hello"
        assert first.server.close_connections() == 1
        first.server.stop()
        await first.done.wait()
        assert second.server.connection_count == 1
        assert (await clients[1].request("GET", "/"))[1] == b"hello"
        assert (await (await second.client()).request("GET", "/"))[1] == b"hello"


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
    async with serving(app) as served:
        assert events == ["startup"]
        assert (await (await served.client()).request("GET", "/"))[1] == b"hello"
        websocket = await served.websocket("/chat")
        served.server.stop()
        await trio.testing.wait_all_tasks_blocked()
        assert "shutdown" not in events, "a WebSocket goes on through the stop"
        await websocket.send_message("still here")
        await served.done.wait()
        assert events == ["startup", "request hi", "message still here", "shutdown"]


async def test_an_app_without_a_lifespan_is_served_and_a_failed_startup_is_not(
    log_records: list[Any],
) -> None:
    async with serving(hello_app) as served:
        assert (await (await served.client()).request("GET", "/"))[1] == b"hello"
    assert warnings_or_worse(log_records) == []

    @asynccontextmanager
    async def broken(app: Starlette) -> AsyncIterator[None]:
        raise ValueError("no database")
        yield

    network = MemoryNetwork()
    server = AsgiServer(Starlette(lifespan=broken), HttpServerSettings())
    failure = pytest.RaisesExc(RuntimeError, match="(?s)startup failed.*no database")
    with trio.fail_after(CAP), pytest.RaisesGroup(failure, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, await network.listen(HOST, 0))
    assert network.listeners == {}, "its listener closed"
