"""The API's HTTP server: WebSockets: messages both ways, pings and either side's close, a silent peer
taken for gone, the message size limit, an upgrade the app refuses, and frames of three writers that
cross.

Rules as in every HTTP server test (``tests/http_serving.py``): pytest-trio in trio_mode; a test in
which time passes takes ``autojump_clock`` and asserts exact ``trio.current_time()`` figures, under
a hard cap on Trio's clock; servers listen on a ``MemoryNetwork`` (or lockstep streams), started
with ``await nursery.start(...)``; clients write the bytes on the wire; tasks are ordered with
``wait_all_tasks_blocked()`` and events, never with sleeps.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest
import trio
import trio.testing
import trio_websocket
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionType
from wsproto.events import CloseConnection, Ping, TextMessage

from supervisor.api.http_server import HttpServerSettings

from .http_serving import UPGRADE_HEADERS, echo_app, serving, warnings_or_worse


def _close_of(error: trio_websocket.ConnectionClosed) -> tuple[int, str | None]:
    assert error.reason is not None
    return error.reason.code, error.reason.reason


async def test_a_websocket_echoes_text_and_bytes_and_closes_with_either_sides_code(
    log_records: list[Any],
) -> None:
    disconnects: list[int] = []
    async with serving(echo_app(disconnects), HttpServerSettings(access_log=True)) as served:
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
    lines = [record["message"] for record in log_records if '"GET /echo WebSocket"' in record["message"]]
    assert len(lines) == 2
    assert re.fullmatch(r'- "GET /echo WebSocket" 101 8 B \d+\.\d ms', lines[0]), (
        "héllo (6 bytes) and 2 bytes echoed"
    )


async def test_a_websocket_message_over_max_message_closes_with_1009() -> None:
    disconnects: list[int] = []
    async with serving(echo_app(disconnects), HttpServerSettings(max_message=1000)) as served:
        websocket = await served.websocket("/echo")
        await websocket.send_message("é" * 500)  # 1000 bytes: the most taken
        assert await websocket.get_message() == "é" * 500
        await websocket.send_message(b"x" * 1001)
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await websocket.get_message()
        assert _close_of(closed.value)[0] == 1009
        await trio.testing.wait_all_tasks_blocked()
        assert disconnects == [1009]


async def test_an_upgrade_refused_by_the_app(log_records: list[Any]) -> None:
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
    async with serving(Starlette(routes=routes)) as served:
        client = await served.client()
        response, body = await client.request("GET", "/refuse", UPGRADE_HEADERS)
        assert (response.status_code, body) == (503, b"standby")
        assert (b"retry-after", b"5") in list(response.headers)
        assert await client.closed_by_server()
        for path, status in (("/close", 403), ("/leave", 500), ("/fail", 500)):
            response, _ = await (await served.client()).request("GET", path, UPGRADE_HEADERS)
            assert response.status_code == status, path
        for path, code in (("/leave_open", 1000), ("/fail_open", 1011)):
            websocket = await served.websocket(path)
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await websocket.get_message()
            assert _close_of(closed.value)[0] == code, path
        assert [record["exception"].value.args[0] for record in log_records if record["exception"]] == [
            "no",
            "open",
        ]
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 0


async def test_a_client_closing_its_websocket_as_the_app_writes_and_closes_harms_nothing(
    log_records: list[Any],
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

    async with serving(Starlette(routes=[WebSocketRoute("/", app)])) as served:
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
        assert warnings_or_worse(log_records) == []
        assert (await (await served.client()).request("GET", "/"))[0].status_code == 404


async def _ping(websocket: trio_websocket.WebSocketConnection) -> None:
    with contextlib.suppress(trio_websocket.ConnectionClosed):
        await websocket.ping()


async def _silent_websocket(served: Any, path: str) -> tuple[trio.abc.Stream, bytes]:
    """A WebSocket opened by hand, whose peer then never sends a frame: the bytes after the 101."""
    stream = await served.connect()
    head = "".join(f"{name}: {value}\r\n" for name, value in [("host", "api"), *UPGRADE_HEADERS])
    await stream.send_all(f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received:
        received += await stream.receive_some()
    response, _, rest = received.partition(b"\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 101 "), response
    return stream, rest


async def test_a_silent_websocket_peer_is_pinged_and_taken_for_gone_without_an_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disconnects: list[tuple[int, str]] = []

    async def wait(websocket: WebSocket) -> None:
        await websocket.accept()
        message = await websocket.receive()
        disconnects.append((message["code"], message["reason"]))

    settings = HttpServerSettings(websocket_ping_interval=20, websocket_ping_timeout=10)
    async with serving(Starlette(routes=[WebSocketRoute("/", wait)]), settings) as served:
        began = trio.current_time()
        stream, rest = await _silent_websocket(served, "/")
        client = WsConnection(ConnectionType.CLIENT)
        events: list[tuple[float, Any]] = []
        client.receive_data(rest)
        while data := await stream.receive_some():
            client.receive_data(bytes(data))
            events += [(trio.current_time() - began, event) for event in client.events()]
        assert [(at, type(event)) for at, event in events] == [(20.0, Ping), (30.0, CloseConnection)]
        close = events[1][1]
        assert (close.code, close.reason) == (1011, "no answer to a ping within 10 s")
        assert trio.current_time() - began == 30.0, "the connection closed with the close frame"
        assert disconnects == [(1011, "no answer to a ping within 10 s")]
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 0


async def test_a_websocket_peer_that_answers_pings_or_speaks_is_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disconnects: list[int] = []
    settings = HttpServerSettings(websocket_ping_interval=20, websocket_ping_timeout=10)
    async with serving(echo_app(disconnects), settings) as served:
        answering = await served.websocket("/echo")  # trio-websocket answers pings by itself
        speaking, _ = await _silent_websocket(served, "/echo")
        client = WsConnection(ConnectionType.CLIENT)
        for _ in range(10):  # frames every 15 s: never silent for the ping interval
            await trio.sleep(15)
            await speaking.send_all(client.send(TextMessage(data="hi")))
        await answering.send_message("still here")
        assert await answering.get_message() == "still here"
        assert served.server.connection_count == 2
        assert disconnects == []


async def test_a_websocket_ping_interval_of_0_never_pings(autojump_clock: trio.testing.MockClock) -> None:
    disconnects: list[int] = []
    settings = HttpServerSettings(websocket_ping_interval=0, websocket_ping_timeout=1)
    async with serving(echo_app(disconnects), settings) as served:
        stream, rest = await _silent_websocket(served, "/echo")
        with trio.move_on_after(500):
            rest += await stream.receive_some()
        assert rest == b""
        assert served.server.connection_count == 1


async def test_a_peer_is_not_taken_for_gone_while_the_app_takes_none_of_its_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its pong would wait behind the messages the reader holds: its silence is not known then."""
    taking = trio.Event()
    taken: list[str] = []

    async def busy(websocket: WebSocket) -> None:
        await websocket.accept()
        await taking.wait()
        taken.append(await websocket.receive_text())
        taken.append(await websocket.receive_text())
        message = await websocket.receive()
        taken.append(f"{message['code']} {message['reason']}")

    settings = HttpServerSettings(websocket_ping_interval=20, websocket_ping_timeout=10, max_message=1000)
    async with serving(Starlette(routes=[WebSocketRoute("/", busy)]), settings) as served:
        stream, _ = await _silent_websocket(served, "/")
        client = WsConnection(ConnectionType.CLIENT)
        await stream.send_all(client.send(TextMessage(data="a" * 1000)) + client.send(TextMessage(data="b")))
        await trio.sleep(300)
        assert served.server.connection_count == 1, "held, not taken for gone"
        began = trio.current_time()
        taking.set()
        await trio.testing.wait_all_tasks_blocked()
        assert taken[:2] == ["a" * 1000, "b"]
        while await stream.receive_some():
            pass
        assert trio.current_time() - began == 30.0, "silent from then on: pinged after 20 s, gone 10 s later"
        assert taken[2] == "1011 no answer to a ping within 10 s"
