"""A stalled event stream: open, silent (not even a heartbeat) until healed, then what it held."""

from __future__ import annotations

import httpx
import pytest
import trio

from supervisor.simulator import SimulatedCluster


async def test_a_stalled_stream_stays_open_and_silent_then_delivers_what_it_held(
    cluster: SimulatedCluster, autojump_clock: trio.abc.Clock
) -> None:
    server = cluster.servers[0]
    start = trio.current_time()
    seen: list[tuple[str, float]] = []

    async def read() -> None:
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(5, read=None)) as http,
            http.stream(
                "GET", cluster.addresses[0] + "/v1/event/stream", params=[("topic", "Job:none")]
            ) as answer,
        ):
            async for line in answer.aiter_lines():
                seen.append((line, trio.current_time()))
                if len(seen) == 4:
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.sleep(1)
        cluster.stream_stalls.stall(server.name)
        await trio.sleep(99)  # the heartbeats due at 30, 60 and 90 s are held
        assert [line for line, _ in seen] == ["{}"]
        assert server.http is not None
        assert server.http.connection_count("stream") == 1, "a black hole sends no FIN"
        assert cluster.stream_stalls.freshest_delivery() == pytest.approx(start, abs=0.1)
        cluster.stream_stalls.heal(server.name)
    assert [line for line, _ in seen] == ["{}"] * 4
    assert all(at == pytest.approx(start + 100, abs=0.1) for _, at in seen[1:])


async def test_only_the_stalled_server_is_silent(cluster: SimulatedCluster) -> None:
    cluster.stream_stalls.stall(cluster.servers[0].name)
    assert cluster.stream_stalls.stalled(cluster.servers[0].name)
    assert not any(cluster.stream_stalls.stalled(s.name) for s in cluster.servers[1:])
    cluster.stream_stalls.heal(cluster.servers[0].name)
    assert not cluster.stream_stalls.stalled(cluster.servers[0].name)
