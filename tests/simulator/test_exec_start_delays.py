"""A node whose container runtime is loaded starts exec'd commands late (real processes, real clock)."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import orjson
import trio
import trio_websocket

from supervisor.nomad import NomadClient
from supervisor.simulator import SimulatedCluster

from .test_sim_exec import TASK, running_alloc


async def first_frame_after(cluster: SimulatedCluster, alloc_id: str) -> float:
    query = urlencode({"task": TASK, "command": json.dumps(["sh", "-c", "echo hi"]), "tty": "false"})
    url = cluster.addresses[0].replace("http", "ws") + f"/v1/client/allocation/{alloc_id}/exec?{query}"
    started = trio.current_time()
    async with trio_websocket.open_websocket_url(url) as ws:
        orjson.loads(await ws.get_message())
        return trio.current_time() - started


async def test_a_command_on_a_slow_node_starts_late_and_on_time_once_healed(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    node_id = cluster.state.allocs[alloc_id].node_id
    cluster.execs.start_delays[node_id] = 0.5
    assert await first_frame_after(cluster, alloc_id) >= 0.5
    del cluster.execs.start_delays[node_id]
    assert await first_frame_after(cluster, alloc_id) < 0.5
