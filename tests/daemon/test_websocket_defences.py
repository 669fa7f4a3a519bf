"""An execution's WebSocket against clients that break its protocol or vanish: a binary message is
refused with 1003 (Poseidon reads no more of such a client), and a client that falls silent without
closing, as a half-open peer does, is pinged and, unanswered, taken for gone: its command is stopped
and its runner takes the next execution. Both on an execution with no time limit, which nothing
else would end. The ping's interval and timeout are lowered to a second: they are what is tested.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
import trio
import trio_websocket
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection, Ping, Request, TextMessage

from supervisor.api.app import CLOSE_BINARY, REASON_BINARY
from supervisor.core.config import ServerSettings, Settings

from .conftest import Harness

PINGING = Settings(server=ServerSettings(port=0, websocket_ping_interval=1, websocket_ping_timeout=1))


async def test_a_binary_message_is_refused_with_1003_and_stops_the_command(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    response = await harness.http.post(f"/runners/{runner}/execute", json={"command": "cat"})
    async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
        assert json.loads(await ws.get_message()) == {"type": "start"}
        await ws.send_message(b"stdin as bytes\n")
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason is not None
    assert (closed.value.reason.code, closed.value.reason.reason) == (CLOSE_BINARY, REASON_BINARY)
    await harness.wait_for(lambda: harness.service.executions.running_count == 0, within=10)
    await harness.wait_for(lambda: harness.cluster.execs.count == 0, within=10)


async def _silent_websocket(url: str) -> tuple[trio.SocketStream, WSConnection]:
    """The execution's WebSocket, opened by hand: the client then sends nothing, pongs included."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    client = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(client.send(Request(host=parts.netloc, target=f"{parts.path}?{parts.query}")))
    while client.state is ConnectionState.CONNECTING:
        client.receive_data(bytes(await stream.receive_some()))
        list(client.events())
    return stream, client


@pytest.mark.parametrize("settings", [PINGING])
async def test_a_silent_client_is_pinged_then_taken_for_gone_and_its_runner_freed(
    harness: Harness,
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10, inactivity_timeout=600)
    body = {"command": "echo go; sleep 600", "timeLimit": 0}
    response = await harness.http.post(f"/runners/{runner}/execute", json=body)
    stream, client = await _silent_websocket(response.json()["websocketUrl"])
    events: list[object] = []
    with trio.fail_after(10):
        while data := await stream.receive_some():
            client.receive_data(bytes(data))
            events += client.events()
    messages = [json.loads(event.data) for event in events if isinstance(event, TextMessage)]
    assert messages == [{"type": "start"}, {"type": "stdout", "data": "go\r\n"}], "the output came whole"
    kinds = [type(event) for event in events if not isinstance(event, TextMessage)]
    assert kinds == [Ping, CloseConnection]
    close = events[-1]
    assert isinstance(close, CloseConnection)
    assert (close.code, close.reason) == (1011, "no answer to a ping within 1 s")
    await harness.wait_for(lambda: harness.service.executions.running_count == 0, within=10)
    await harness.wait_for(lambda: harness.cluster.execs.count == 0, within=10)
    assert (await harness.execute(runner, command="echo again"))[-1] == {"type": "exit", "data": 0}
    await stream.aclose()
