"""Each node's agent serves exec on its own port (its HTTPAddr), as a Nomad client agent does: a
session it holds outlives any server's restart, and ends with the agent (real clock: real processes)."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import httpx
import orjson
import pytest
import trio
import trio_websocket

from supervisor.nomad import NomadClient
from supervisor.simulator import SimulatedCluster

from .conftest import settle
from .test_sim_exec import TASK, running_alloc


def exec_url(base: str, alloc_id: str, command: list[str]) -> str:
    query = urlencode({"task": TASK, "command": json.dumps(command), "tty": "false"})
    return f"{base}/v1/client/allocation/{alloc_id}/exec?{query}"


def agent_of(cluster: SimulatedCluster, alloc_id: str) -> str:
    node = cluster.state.nodes[cluster.state.allocs[alloc_id].node_id]
    return f"ws://{node.http_addr}"


async def collect(ws: trio_websocket.WebSocketConnection) -> list[dict[str, object]]:
    frames = []
    with pytest.raises(trio_websocket.ConnectionClosed):
        while True:
            frames.append(orjson.loads(await ws.get_message()))
    return frames


async def test_a_node_advertises_its_agents_port_and_serves_exec_there(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    node = (await client.get_node(cluster.state.allocs[alloc_id].node_id)).value
    assert node.http_addr.startswith("127.0.0.1:")
    assert not node.http_addr.endswith(":4646"), "each agent has a port of its own"
    async with trio_websocket.open_websocket_url(
        exec_url(f"ws://{node.http_addr}", alloc_id, ["echo", "hi"])
    ) as ws:
        frames = await collect(ws)
    assert {"stdout": {"data": "aGkK"}} in frames
    assert frames[-1] == {"exited": True, "result": {}}


async def test_an_agent_forwards_another_nodes_allocation_to_the_servers(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    node_id = cluster.state.allocs[alloc_id].node_id
    other = next(e for e in cluster.endpoints.values() if e.node_id != node_id)
    url = exec_url(f"ws://{other.address}", alloc_id, ["sh", "-c", "echo started; sleep 1; echo done"])
    async with trio_websocket.open_websocket_url(url) as ws:
        assert orjson.loads(await ws.get_message()) == {"stdout": {"data": "c3RhcnRlZAo="}}
        assert cluster.leader is not None
        cluster.restart_server(cluster.leader, downtime=0.5)
        frames = await collect(ws)
    assert not any("exited" in f for f in frames), "forwarded through the leader, it ended with it"


async def test_a_session_held_by_the_agent_outlives_a_leader_restart_and_a_forwarded_one_does_not(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    command = ["sh", "-c", "echo started; sleep 1; echo done"]
    direct_url = exec_url(agent_of(cluster, alloc_id), alloc_id, command)
    forwarded_url = exec_url(cluster.addresses[1].replace("http", "ws"), alloc_id, command)
    async with (
        trio_websocket.open_websocket_url(direct_url) as direct,
        trio_websocket.open_websocket_url(forwarded_url) as forwarded,
    ):
        assert orjson.loads(await direct.get_message()) == {"stdout": {"data": "c3RhcnRlZAo="}}
        assert orjson.loads(await forwarded.get_message()) == {"stdout": {"data": "c3RhcnRlZAo="}}
        assert cluster.leader is not None
        cluster.restart_server(cluster.leader, downtime=0.5)
        direct_frames, forwarded_frames = await collect(direct), await collect(forwarded)
    assert direct_frames[-1] == {"exited": True, "result": {}}, "the agent's session ran to its end"
    assert {"stdout": {"data": "ZG9uZQo="}} in direct_frames
    assert not any("exited" in f for f in forwarded_frames), "the forwarded session was cut"


async def test_an_agent_restart_cuts_its_sessions_and_its_port_refuses_until_it_is_back(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    node = cluster.state.nodes[cluster.state.allocs[alloc_id].node_id]
    url = exec_url(agent_of(cluster, alloc_id), alloc_id, ["sh", "-c", "echo started; sleep 30"])
    async with trio_websocket.open_websocket_url(url) as ws:
        await ws.get_message()
        cluster.agents.restarts.restart_agent(node, downtime=1.0)
        frames = await collect(ws)
    assert not any("exited" in f for f in frames)
    with pytest.raises(trio_websocket.HandshakeError) as refused:
        async with trio_websocket.open_websocket_url(url, connect_timeout=2):
            pass  # pragma: no cover
    assert isinstance(refused.value.__cause__, OSError), "the port refuses while the agent is down"
    await settle(cluster, lambda: node.agent_up and node.status == "ready")
    again = exec_url(agent_of(cluster, alloc_id), alloc_id, ["true"])
    async with trio_websocket.open_websocket_url(again) as ws:
        assert (await collect(ws))[-1] == {"exited": True, "result": {}}, "the same port serves again"


async def test_a_firewalled_agent_port_never_completes_a_connection(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    node = cluster.state.nodes[cluster.state.allocs[alloc_id].node_id]
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        assert (
            await http.post(f"/sim/v1/nodes/{node.name}/http", json={"reachable": False})
        ).status_code == 200
        assert (await http.post("/sim/v1/nodes/nope/http", json={"reachable": False})).status_code == 404
        assert (
            await http.post(f"/sim/v1/nodes/{node.name}/http", json={"reachable": "no"})
        ).status_code == 400
    host, port = node.http_addr.split(":")
    with trio.move_on_after(0.5) as waited:
        await trio.open_tcp_stream(host, int(port))
    assert waited.cancelled_caught, "the connect never completes: a client waits for its own timeout"
    await cluster.set_agent_reachable(node.name, True)
    async with trio_websocket.open_websocket_url(
        exec_url(agent_of(cluster, alloc_id), alloc_id, ["true"])
    ) as ws:
        assert (await collect(ws))[-1] == {"exited": True, "result": {}}
