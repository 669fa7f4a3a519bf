"""What the log says at INFO (the default level): one line per event an operator cares about, with
the event's fields beside its message, and no line per runner for bulk work."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

from supervisor.core.config import LogSettings, ServerSettings, Settings
from supervisor.ops.logs import json_line

from .conftest import Harness


@pytest.fixture
def events() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Each INFO line's message and fields while the test runs."""
    found: list[tuple[str, dict[str, Any]]] = []
    sink = logger.add(lambda m: found.append((m.record["message"], dict(m.record["extra"]))), level="INFO")
    yield found
    logger.remove(sink)


@pytest.fixture
def json_lines() -> Iterator[list[str]]:
    """Each INFO line as the JSON log writes it."""
    found: list[str] = []
    sink = logger.add(lambda m: found.append(json_line(m.record)), level="INFO")
    yield found
    logger.remove(sink)


async def test_info_tells_each_event_once_and_bulk_work_in_one_line(
    harness: Harness, info_lines: list[str], events: list[tuple[str, dict[str, Any]]]
) -> None:
    await harness.environment(10, prewarmingPoolSize=12)
    await harness.wait_for(lambda: harness.idle(10) == 12)
    runner = await harness.runner(10)
    assert (await harness.execute(runner, command="exit 3"))[-1] == {"type": "exit", "data": 3}
    harness.cluster.cut_streams()
    await harness.wait_for(lambda: any(" after " in line and "without it" in line for line in info_lines))
    assert (await harness.http.delete("/execution-environments/10")).status_code == 204

    assert "environment 10 created (image python:3.12-slim, pool of 12)" in info_lines
    claimed = [fields for message, fields in events if message == "runner claimed"]
    assert claimed == [{"runner": runner, "inactivity_timeout": 0}]
    started = [fields for message, fields in events if message == "execution started"]
    ended = [fields for message, fields in events if message == "execution ended"]
    assert len(started) == len(ended) == 1
    assert started[0]["runner"] == ended[0]["runner"] == runner
    assert started[0]["execution"] == ended[0]["execution"]
    assert ended[0]["outcome"] == "exit 3"
    assert isinstance(ended[0]["seconds"], float)
    lost = [line for line in info_lines if line.startswith("event stream lost")]
    assert len(lost) == 1
    assert "connection" in lost[0], "the reason is given"
    assert "environment 10 deleted: 13 runners destroyed" in info_lines, "one line: 12 idle and the claim"
    assert not [line for line in info_lines if "destroyed runner" in line], "per-runner lines are DEBUG"


async def test_a_runner_given_back_is_one_info_line(
    harness: Harness, events: list[tuple[str, dict[str, Any]]]
) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    runner = await harness.runner(10)
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204
    assert ("runner released", {"runner": runner}) in events
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 410
    assert [m for m, _ in events].count("runner released") == 1, "a refused release says nothing"


@pytest.mark.parametrize("settings", [Settings(server=ServerSettings(port=0), log=LogSettings(access=True))])
async def test_typical_json_lines_are_under_300_bytes(
    harness: Harness, settings: Settings, json_lines: list[str]
) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    runner = await harness.runner(10)
    await harness.http.patch(f"/runners/{runner}/files", json={"copy": [{"path": "a.txt", "content": ""}]})
    assert (await harness.execute(runner, command="exit 0"))[-1] == {"type": "exit", "data": 0}
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204
    for wanted in ("runner claimed", "execution started", "execution ended", "runner released", "PATCH /api"):
        assert any(wanted in line for line in json_lines), wanted
    for line in json_lines:
        if any(word in line for word in ("runner ", "execution ", '"protocol"')):
            assert len(line.encode()) < 300, line


async def test_runners_found_gone_are_one_line_per_cause(harness: Harness, info_lines: list[str]) -> None:
    await harness.environment(10, prewarmingPoolSize=6)
    await harness.wait_for(lambda: harness.idle(10) == 6)
    node = next(iter(harness.cluster.state.nodes.values()))
    await harness.nomad.drain_node(node.id, deadline=60)
    await harness.wait_for(lambda: any("runners gone: its node is draining" in line for line in info_lines))
    gone = [line for line in info_lines if "gone: its node is draining" in line]
    assert len(gone) == 1, gone
