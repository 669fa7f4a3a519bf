"""The daemon's stop: one budget (``server.graceful_timeout``, shortened here since it is what is
tested), a line every few seconds of what it waits for, and executions still running at the end
told so and closed as going away, their commands stopped; a second stop ends them at once."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
import trio
import trio_websocket
from loguru import logger

from supervisor.config import ServerSettings, Settings

from .conftest import Harness

BUDGET = 6.0
SHUTTING_DOWN = {"type": "error", "data": "the supervisor is shutting down"}


@pytest.fixture
def settings() -> Settings:
    return Settings(server=ServerSettings(port=0, graceful_timeout=BUDGET))


@pytest.fixture
def lines() -> Iterator[list[str]]:
    seen: list[str] = []
    sink = logger.add(lambda message: seen.append(message.record["message"]), level="INFO")
    yield seen
    logger.remove(sink)


def running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False).returncode == 0


async def start_long_execution(
    harness: Harness, nursery: trio.Nursery, marker: str
) -> trio_websocket.WebSocketConnection:
    await harness.environment(10)
    runner = await harness.runner(10)
    response = await harness.http.post(f"/runners/{runner}/execute", json={"command": f"sleep {marker}"})
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
    harness: Harness, nursery: trio.Nursery, lines: list[str]
) -> None:
    ws = await start_long_execution(harness, nursery, "50.125")
    began = trio.current_time()
    harness.daemon.stop()
    messages, code = await read_to_close(ws)
    took = trio.current_time() - began
    assert messages == [SHUTTING_DOWN]
    assert code == 1001, "going away, never a bare 1006"
    assert BUDGET - 2 <= took <= BUDGET, took
    assert any(line.startswith("stopping: waiting for 1 execution(s), ") for line in lines)
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
