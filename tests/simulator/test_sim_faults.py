"""Faults as the field saw them, through the control API, on virtual time."""

from __future__ import annotations

import httpx
import pytest
import trio

from supervisor.base.errors import NomadUnavailableError
from supervisor.nomad import Node, NomadClient, RetryPolicy
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.simulator.agents.client_api import ExecRoute
from supervisor.simulator.agents.restarts import RESTORE_FAILED
from supervisor.simulator.state.objects import SimNode

from .conftest import batch_job, make_client, settle


def allocs_of(cluster: SimulatedCluster, job_id: str) -> list:  # type: ignore[type-arg]
    return sorted(
        cluster.state.allocs_by_job.get(("default", job_id), {}).values(), key=lambda a: a.create_index
    )


def all_running(cluster: SimulatedCluster, job_ids: list[str]) -> bool:
    return all(any(a.client_status == "running" for a in allocs_of(cluster, j)) for j in job_ids)


async def control(cluster: SimulatedCluster, path: str, body: dict | None = None) -> httpx.Response:  # type: ignore[type-arg]
    async with httpx.AsyncClient(base_url=cluster.addresses[-1]) as http:
        return await http.post(path, json=body or {})


async def place(client: NomadClient, cluster: SimulatedCluster, count: int, prefix: str = "r") -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(count)]
    for job_id in ids:
        await client.register_job(batch_job(job_id))
    await settle(cluster, lambda: all_running(cluster, ids))
    return ids


async def test_agent_restart_shorter_than_the_grace_changes_nothing(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    ids = await place(client, cluster, 3)
    node = cluster.state.nodes[allocs_of(cluster, ids[0])[0].node_id]
    before = {a.id for a in cluster.state.allocs.values()}
    response = await control(cluster, f"/sim/v1/nodes/{node.name}/restart", {"downtime_s": 5})
    assert response.status_code == 200
    assert not node.agent_up
    await trio.sleep(30)
    assert node.agent_up
    assert node.status == "ready"
    assert {a.id for a in cluster.state.allocs.values()} == before
    assert all(a.client_status == "running" for a in cluster.state.allocs.values())


async def test_a_task_waiting_for_its_restart_is_restarted_when_its_agent_comes_back(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    """A task crashed and waits its restart delay; its agent restarts meanwhile. The restored
    client runs it again, as Nomad's restored task runner does: it never hangs pending."""
    restart = {"Attempts": 3, "Delay": 2_000_000_000, "Interval": 60_000_000_000, "Mode": "fail"}
    await client.register_job(batch_job("crashing", restart=restart))
    await settle(cluster, lambda: all_running(cluster, ["crashing"]))
    (alloc,) = allocs_of(cluster, "crashing")
    node = cluster.state.nodes[alloc.node_id]
    cluster.agents.fail(alloc, "crash")
    assert alloc.client_status == "pending"
    cluster.agents.restarts.restart_agent(node, downtime=5)  # away when the restart delay ends
    await trio.sleep(10)
    assert node.agent_up
    assert alloc.client_status == "running"
    assert [a.id for a in allocs_of(cluster, "crashing")] == [alloc.id], "restarted in place"


async def test_agent_down_past_the_grace_loses_and_replaces_allocations(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    ids = await place(client, cluster, 3)
    node = cluster.state.nodes[allocs_of(cluster, ids[0])[0].node_id]
    victims = [a for a in cluster.state.allocs.values() if a.node_id == node.id]
    start = trio.current_time()
    await control(cluster, f"/sim/v1/nodes/{node.name}/restart", {"downtime_s": 60})
    await settle(cluster, lambda: node.status == "down")
    assert trio.current_time() - start == pytest.approx(cluster.config.heartbeat_grace, abs=0.1)
    await settle(cluster, lambda: all(v.next_allocation for v in victims))
    for victim in victims:
        assert victim.client_status == "lost"
        assert victim.desired_description == "alloc is lost since its node is down"
        replacement = cluster.state.allocs[victim.next_allocation]
        assert replacement.previous_allocation == victim.id
        assert replacement.node_id != node.id
    await settle(cluster, lambda: node.status == "ready")
    assert node.events[-1]["Message"] == "Node re-registered", "the agent registers again when it starts"


@pytest.mark.parametrize("downtime", [5.0, 60.0], ids=["within-the-grace", "past-the-grace"])
async def test_every_agent_start_registers_again_then_turns_ready(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient, downtime: float
) -> None:
    """nomad-api.md §4: registration sends ``initializing`` (NodeRegistration, "Node re-registered"
    for a known node), then the status becomes ``ready`` (NodeStreamEvent); a missed heartbeat is
    ``down`` (NodeStreamEvent, "Node heartbeat missed")."""
    node = next(iter(cluster.state.nodes.values()))
    seen: list[tuple[str, str, str]] = []
    async with client.open_event_stream({"Node": node.id}, index=cluster.state.index + 1) as stream:
        await control(cluster, f"/sim/v1/nodes/{node.name}/restart", {"downtime_s": downtime})
        while not seen or seen[-1][1] != "ready" or len(seen) < 2:
            batch = await stream.receive()
            for event in batch.events:
                payload = event.payload
                assert isinstance(payload, Node)
                seen.append(
                    (event.type, payload.status, payload.events[-1].message if payload.events else "")
                )
    expected = [
        ("NodeRegistration", "initializing", "Node re-registered"),
        ("NodeStreamEvent", "ready", "Node re-registered"),
    ]
    if downtime > cluster.config.heartbeat_grace:
        expected.insert(0, ("NodeStreamEvent", "down", "Node heartbeat missed"))
    assert seen == expected


async def test_drain_on_shutdown_migrates_batch_allocations_at_the_deadline(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    ids = await place(client, cluster, 3)
    node = cluster.state.nodes[allocs_of(cluster, ids[0])[0].node_id]
    victim = next(a for a in cluster.state.allocs.values() if a.node_id == node.id)
    start = trio.current_time()
    body = {"downtime_s": 10, "drain_on_shutdown": True, "drain_deadline_s": 15}
    await control(cluster, f"/sim/v1/nodes/{node.name}/restart", body)
    await settle(cluster, lambda: node.drain_strategy is not None)
    assert node.eligibility == "ineligible"
    assert node.last_drain is not None
    assert node.last_drain["Meta"] == {"message": "shutting down"}
    assert victim.client_status == "running", "batch allocations run on until the deadline"
    await settle(cluster, lambda: bool(victim.next_allocation))
    assert trio.current_time() - start == pytest.approx(15, abs=0.2)
    assert victim.desired_description == "alloc is being migrated"
    await settle(cluster, lambda: node.drain_strategy is None and not node.agent_up)
    assert node.last_drain is not None
    assert node.last_drain["Status"] == "complete"
    assert node.events[-1]["Details"] == {"deadline_reached": "true"}
    await settle(cluster, lambda: node.agent_up)
    assert node.eligibility == "ineligible", "a drained node stays ineligible"


async def test_recreated_containers_restart_their_tasks(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    ids = await place(client, cluster, 1)
    alloc = allocs_of(cluster, ids[0])[0]
    node = cluster.state.nodes[alloc.node_id]
    body = {"downtime_s": 3, "recreate_containers": True}
    await control(cluster, f"/sim/v1/nodes/{node.name}/restart", body)
    await settle(cluster, lambda: alloc.task_states["default-task"].get("Restarts") == 1)
    assert alloc.client_status == "running"
    assert alloc.next_allocation == "", "same allocation, fresh container"


async def test_all_agents_at_once_lose_runners_silently_and_kill_environments(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    runners = await place(client, cluster, 10, prefix="29")
    await client.register_job(batch_job("template-29"))
    await settle(cluster, lambda: all_running(cluster, ["template-29"]))
    async with client.open_event_stream({"Job": "*"}, index=cluster.state.index + 1) as stream:
        await control(cluster, "/sim/v1/nodes/restart-all", {"downtime_s": 5, "lose_fraction": 0.3})
        await settle(cluster, lambda: all(n.agent_up for n in cluster.state.nodes.values()))
        await settle(cluster, lambda: cluster.state.jobs[("default", "template-29")].status == "dead")
        job_events = []
        with trio.move_on_after(1):
            async for batch in stream:
                job_events.extend(batch.events)
    remaining = [r for r in runners if ("default", r) in cluster.state.jobs]
    assert len(remaining) == 7, "30 % of the runner jobs vanished"
    assert not any(e.type in ("JobDeregistered", "JobBatchDeregistered") for e in job_events), (
        "without a word"
    )
    environment = (await client.get_job("template-29")).value
    assert environment.status == "dead"
    assert not environment.stop, "dead but still existing"
    assert all_running(cluster, remaining)


async def test_leader_restart_answers_no_cluster_leader_then_elects(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    old_leader = cluster.leader
    assert old_leader == "server-1"
    response = await control(cluster, f"/sim/v1/servers/{old_leader}/restart", {"downtime_s": 10})
    assert response.json() == {"server": old_leader, "was_leader": True}
    await trio.sleep(0.1)
    follower = make_client(cluster)
    follower._current = 1
    async with follower:
        with pytest.raises(NomadUnavailableError, match="No cluster leader"):
            await follower.register_job(batch_job("during-election"))
        await trio.sleep(cluster.config.election_timeout)
        assert cluster.leader not in (None, old_leader)
        await follower.register_job(batch_job("after-election"))
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(cluster.addresses[0] + "/v1/jobs")
        await trio.sleep(10)
        assert (await http.get(cluster.addresses[0] + "/v1/jobs")).status_code == 200, "same address again"
    assert cluster.server(old_leader).restarts == 1  # type: ignore[union-attr]


async def test_client_fails_over_to_the_next_server(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    await control(cluster, "/sim/v1/servers/server-2/restart", {"downtime_s": 30})
    await trio.sleep(0.1)
    async with make_client(cluster, retry=RetryPolicy(attempts=3)) as c:
        c._current = 1
        jobs = await c.list_jobs()
        assert jobs.value == []
        assert c.address == cluster.addresses[2]


FLOOD = SimConfig(seed=3, nodes=1, flood_limit=5, flood_window=60, flood_downtime=5, alloc_start_delay=0.5)


async def restarted_node(cluster: SimulatedCluster) -> SimNode:
    node = cluster.state.node_by_name("worker-01")
    assert node is not None
    await control(cluster, "/sim/v1/nodes/worker-01/restart", {"downtime_s": 2})
    await settle(cluster, lambda: not node.agent_up)
    await settle(cluster, lambda: node.agent_up and node.status == "ready")
    return node


async def test_a_burst_of_starts_crashes_a_node_that_came_back_and_the_storm_goes_on(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    cluster = await nursery.start(SimulatedCluster(FLOOD).run)
    node = await restarted_node(cluster)
    async with make_client(cluster) as client:
        for i in range(2 * FLOOD.flood_limit):
            await client.register_job(batch_job(f"r-{i}"))
        await settle(cluster, lambda: node.flood_crashes == 1)
        assert not node.agent_up, "starting more tasks at once than it can crashed it"
        # Back after the downtime, it restores its pending allocations all at once: and crashes again.
        await settle(cluster, lambda: node.flood_crashes == 2)
        assert not any(a.client_status == "running" for a in cluster.state.allocs.values())


async def test_the_same_placements_paced_slower_than_a_start_do_not_crash_it(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    cluster = await nursery.start(SimulatedCluster(FLOOD).run)
    node = await restarted_node(cluster)
    async with make_client(cluster) as client:
        ids = [f"r-{i}" for i in range(2 * FLOOD.flood_limit)]
        for job_id in ids:
            await client.register_job(batch_job(job_id))
            await trio.sleep(FLOOD.alloc_start_delay / 2)
        await settle(cluster, lambda: all_running(cluster, ids))
    assert node.flood_crashes == 0
    assert node.agent_up


async def test_control_api_rejects_bad_input(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    assert (await control(cluster, "/sim/v1/nodes/nope/restart")).status_code == 404
    assert (await control(cluster, "/sim/v1/servers/nope/restart")).status_code == 404
    assert (await control(cluster, "/sim/v1/allocations/nope/fail", {"reason": "oom"})).status_code == 404
    bad = await control(cluster, "/sim/v1/nodes/worker-01/restart", {"downtime_s": "long"})
    assert bad.status_code == 400
    assert "downtime_s" in bad.text
    fraction = await control(cluster, "/sim/v1/nodes/restart-all", {"lose_fraction": 2})
    assert fraction.status_code == 400
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        state = (await http.get("/sim/v1/state")).json()
        assert (await http.get("/sim/v1/streams/cut")).status_code == 405
    assert state["leader"] == "server-1"
    assert [s["up"] for s in state["servers"]] == [True, True, True]
    assert {n["status"] for n in state["nodes"]} == {"ready"}
    assert set(state["nodes"][0]) >= {"id", "name", "status", "eligibility"}
    assert state["registrations"] == []


async def test_an_agent_back_without_a_container_writes_so_late_and_runs_it_again(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    ids = await place(client, cluster, 1)
    alloc = allocs_of(cluster, ids[0])[0]
    node = cluster.state.nodes[alloc.node_id]
    body = {"downtime_s": 1, "lose_containers": 1.0, "report_delay_s": 8}
    await control(cluster, f"/sim/v1/nodes/{node.name}/restart", body)
    await settle(cluster, lambda: node.agent_up and node.status == "ready")
    modified = alloc.modify_index
    assert alloc.client_status == "running", "the servers still list it as its client last wrote it"
    refused = ExecRoute(cluster).refusal(alloc.id, "default-task")
    assert refused == (1008, 'task "default-task" is not running.')
    await settle(cluster, lambda: alloc.modify_index > modified)
    task = alloc.task_states["default-task"]
    assert task["Events"][-1]["Type"] == "Failed Restoring Task"
    assert task["Events"][-1]["DisplayMessage"] == RESTORE_FAILED
    assert alloc.client_status == "pending"
    await settle(cluster, lambda: alloc.client_status == "running")
    assert ExecRoute(cluster).refusal(alloc.id, "default-task") is None, "run again, in a new container"
    assert task["Restarts"] == 0, "Nomad does not count it as a restart"
    assert alloc.next_allocation == ""


async def test_lost_containers_must_be_a_share(cluster: SimulatedCluster) -> None:
    node = next(iter(cluster.state.nodes.values()))
    answer = await control(cluster, f"/sim/v1/nodes/{node.name}/restart", {"lose_containers": 2})
    assert answer.status_code == 400
    assert "lose_containers must be at most 1.0" in answer.text
