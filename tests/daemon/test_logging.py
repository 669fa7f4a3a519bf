"""What the log says at INFO (the default level): one line per event an operator cares about, and no
line per runner for bulk work."""

from __future__ import annotations

from .conftest import Harness


async def test_info_tells_each_event_once_and_bulk_work_in_one_line(
    harness: Harness, info_lines: list[str]
) -> None:
    await harness.environment(10, prewarmingPoolSize=12)
    await harness.wait_for(lambda: harness.idle(10) == 12)
    runner = await harness.runner(10)
    assert (await harness.execute(runner, command="exit 3"))[-1] == {"type": "exit", "data": 3}
    harness.cluster.cut_streams()
    await harness.wait_for(lambda: any(" after " in line and "without it" in line for line in info_lines))
    assert (await harness.http.delete("/execution-environments/10")).status_code == 204

    assert "environment 10 created (image python:3.12-slim, pool of 12)" in info_lines
    started = [line for line in info_lines if line.startswith("execution ") and " started on runner " in line]
    ended = [line for line in info_lines if line.startswith("execution ") and " ended after " in line]
    assert len(started) == len(ended) == 1
    assert started[0].endswith(runner)
    assert ended[0].endswith(": exit 3")
    lost = [line for line in info_lines if line.startswith("event stream lost")]
    assert len(lost) == 1
    assert "connection" in lost[0], "the reason is given"
    assert "environment 10 deleted: 13 runners destroyed" in info_lines, "one line: 12 idle and the claim"
    assert not [line for line in info_lines if "destroyed runner" in line], "per-runner lines are DEBUG"


async def test_runners_found_gone_are_one_line_per_cause(harness: Harness, info_lines: list[str]) -> None:
    await harness.environment(10, prewarmingPoolSize=6)
    await harness.wait_for(lambda: harness.idle(10) == 6)
    node = next(iter(harness.cluster.state.nodes.values()))
    await harness.nomad.drain_node(node.id, deadline=60)
    await harness.wait_for(lambda: any("runners gone: its node is draining" in line for line in info_lines))
    gone = [line for line in info_lines if "gone: its node is draining" in line]
    assert len(gone) == 1, gone
