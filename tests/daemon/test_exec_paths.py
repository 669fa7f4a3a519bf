"""Exec straight to the allocation's client agent, with the servers as fallback (real clock: the
simulated cluster's commands are real processes, and the agent connect timeout is real time)."""

from __future__ import annotations

import httpx
import pytest

from supervisor.core.config import NomadSection, ServerSettings, Settings

from .conftest import Harness, output


async def test_every_command_goes_to_the_agent_when_it_can_be_reached(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    patch = {"copy": [{"path": "a.txt", "content": "aGkK"}]}
    assert (await harness.http.patch(f"/runners/{runner}/files", json=patch)).status_code == 204
    messages = await harness.execute(runner, command="cat a.txt")
    assert output(messages) == "hi\r\n"
    paths = harness.service.client.exec_paths
    assert paths["server"] == 0, "executions, file commands and the rest all went direct"
    assert paths["agent"] >= 3
    assert harness.service.executions.paths == {"agent": 1, "server": 0}
    details = (await harness.http.get("/health/details")).json()["checks"]["exec_paths"]
    assert details["sessions"]["server"] == 0
    assert details["mode"] == "auto"


async def test_an_unreachable_agent_is_tried_once_per_registration_then_the_servers_serve(
    harness: Harness,
) -> None:
    await harness.firewall_agents()
    await harness.environment(10)
    runner = await harness.runner(10)
    paths = harness.service.client.exec_paths
    for _ in range(3):
        assert output(await harness.execute(runner, command="echo ok")) == "ok\r\n"
    assert paths["fallback"] == 1, "one wait for the agent, then straight to the servers"
    assert paths["agent"] == 0
    assert harness.service.executions.paths == {"agent": 0, "server": 3}

    node_id = harness.service.pool.runners[runner].node_id
    node = harness.cluster.state.nodes[node_id]
    async with httpx.AsyncClient(base_url=harness.cluster.addresses[0]) as control:
        await control.post(f"/sim/v1/nodes/{node.name}/restart", json={"downtime_s": 0.3})
    tracker = harness.service.pool.nodes
    await harness.wait_for(lambda: tracker.back(node_id) and tracker.nodes[node_id].restarted_at > 0)
    assert output(await harness.execute(runner, command="echo again")) == "again\r\n"
    # The node registered again: its agent is tried again, once by each session that starts before
    # one has fallen back: the probe of the runner its restart made suspect, and the execution's
    # two (its command's and its stderr's reader's), which start together.
    assert paths["fallback"] in (2, 3, 4), "the node registered again: its agent is tried again"


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), nomad=NomadSection(direct_exec="never"))]
)
async def test_direct_exec_never_goes_through_the_servers_only(harness: Harness, settings: Settings) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    assert output(await harness.execute(runner, command="echo ok")) == "ok\r\n"
    assert harness.service.client.exec_paths["agent"] == 0
    assert harness.service.executions.paths == {"agent": 0, "server": 1}
