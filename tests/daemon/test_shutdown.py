"""The daemon's stop: one budget (``server.graceful_timeout``, shortened here since it is what is
tested), a line every few seconds of what it waits for, and executions still running at the end
told so and closed as going away, their commands stopped; a second stop ends them at once."""

from __future__ import annotations

import json
import subprocess

import pytest
import trio
import trio_websocket

from supervisor.base.levels import StreamState
from supervisor.core.config import ServerSettings, Settings

from .conftest import Harness

BUDGET = 6.0
SHUTTING_DOWN = {"type": "error", "data": "the supervisor is shutting down"}


@pytest.fixture
def settings() -> Settings:
    return Settings(server=ServerSettings(port=0, graceful_timeout=BUDGET))


def running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False).returncode == 0


async def start_long_execution(
    harness: Harness, nursery: trio.Nursery, marker: str, *, ignoring_term: bool = False
) -> trio_websocket.WebSocketConnection:
    await harness.environment(10)
    runner = await harness.runner(10)
    command = f'trap "" TERM; sleep {marker}' if ignoring_term else f"sleep {marker}"
    response = await harness.http.post(f"/runners/{runner}/execute", json={"command": command})
    ws = await trio_websocket.connect_websocket_url(nursery, response.json()["websocketUrl"])
    assert json.loads(await ws.get_message()) == {"type": "start"}
    await harness.wait_for(lambda: running(f"sleep {marker}"))
    return ws


async def read_to_close(ws: trio_websocket.WebSocketConnection) -> tuple[list[dict[str, object]], int | None]:
    messages: list[dict[str, object]] = []
    with pytest.raises(trio_websocket.ConnectionClosed) as closed:
        while True:
            messages.append(json.loads(await ws.get_message()))
    assert closed.value.reason is not None
    return messages, closed.value.reason.code


async def test_an_execution_still_running_at_the_end_of_the_budget_is_told_and_stopped(
    harness: Harness, nursery: trio.Nursery, info_lines: list[str]
) -> None:
    ws = await start_long_execution(harness, nursery, "50.125")
    began = trio.current_time()
    harness.daemon.stop()
    messages, code = await read_to_close(ws)
    took = trio.current_time() - began
    assert messages == [SHUTTING_DOWN]
    assert code == 1001, "going away, never a bare 1006"
    assert BUDGET - 2 <= took <= BUDGET, took
    assert any(line.startswith("stopping: waiting for 1 execution(s), ") for line in info_lines)
    await harness.wait_for(lambda: not running("sleep 50.125"), within=5)


async def test_a_second_stop_ends_them_at_once(harness: Harness, nursery: trio.Nursery) -> None:
    ws = await start_long_execution(harness, nursery, "50.375")
    began = trio.current_time()
    harness.daemon.stop()
    await trio.sleep(0.5)
    harness.daemon.stop()
    messages, code = await read_to_close(ws)
    assert trio.current_time() - began < BUDGET / 2
    assert (messages, code) == ([SHUTTING_DOWN], 1001)
    await harness.wait_for(lambda: not running("sleep 50.375"), within=5)


async def test_a_command_that_ignores_term_is_told_in_time_and_killed(
    harness: Harness, nursery: trio.Nursery
) -> None:
    """Its stop takes TERM, then KILL after execution.stop_grace (3 s): longer than the stop may
    wait. The client is told within the budget anyway, and the daemon ends with it."""
    ws = await start_long_execution(harness, nursery, "50.625", ignoring_term=True)
    began = trio.current_time()
    harness.daemon.stop()
    assert await read_to_close(ws) == ([SHUTTING_DOWN], 1001)
    assert trio.current_time() - began <= BUDGET
    with trio.fail_after(BUDGET + 1 - (trio.current_time() - began)):
        await harness.daemon.ended.wait()


async def test_a_second_stop_is_not_held_by_a_download_nobody_reads(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(runner, command="head -c 100000000 /dev/zero > big")
    assert messages[-1] == {"type": "exit", "data": 0}
    async with harness.http.stream("GET", f"/runners/{runner}/files/raw", params={"path": "big"}) as download:
        assert download.status_code == 200
        began = trio.current_time()
        harness.daemon.stop()
        await trio.sleep(0.5)
        harness.daemon.stop()
        with trio.fail_after(3):
            await harness.daemon.ended.wait()
        assert trio.current_time() - began < BUDGET / 2


async def test_an_execution_admitted_after_the_stop_began_does_not_start(
    harness: Harness, nursery: trio.Nursery
) -> None:
    """Its WebSocket connected before the stop, and waited at the admission gate (the stream was
    down) until after it had begun."""
    await harness.environment(10)
    runner = await harness.runner(10)
    response = await harness.http.post(f"/runners/{runner}/execute", json={"command": "sleep 50.875"})
    harness.service.gate.report(StreamState.DOWN)
    result: list[tuple[list[dict[str, object]], int | None]] = []

    async def client() -> None:
        async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
            result.append(await read_to_close(ws))

    nursery.start_soon(client)
    await trio.sleep(0.5)  # its upgrade request waits at the gate
    harness.daemon.stop()
    await trio.sleep(0.5)
    harness.service.gate.report(StreamState.UP)
    await harness.wait_for(lambda: bool(result))
    assert result == [([SHUTTING_DOWN], 1001)]
    assert not running("sleep 50.875")
