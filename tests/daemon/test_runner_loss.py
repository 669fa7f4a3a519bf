"""What clients see when a runner's allocation ends under them, and claims across a daemon restart."""

from __future__ import annotations

import httpx
import pytest
import trio

from supervisor.core.config import ServerSettings, Settings
from supervisor.core.runners import REASON_DRAINED, REASON_OOM
from supervisor.tree.daemon import Daemon

from ..waiting import wait_until
from .conftest import Harness

# The runner template's restart delay: what a failed task waits for before it runs again.
RESTART_DELAY = 15.0


async def test_oom_during_an_execution(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    alloc_id = harness.service.pool.runners[runner].alloc_id

    async def oom() -> None:
        async with httpx.AsyncClient() as http:
            await http.post(
                f"{harness.cluster.addresses[0]}/sim/v1/allocations/{alloc_id}/fail", json={"reason": "oom"}
            )

    messages = await harness.run_until_end(runner, "echo started; sleep 60", oom)
    terminal = [m for m in messages if m["type"] in ("exit", "error", "timeout")]
    assert len(terminal) == 1, messages
    assert terminal[0] in ({"type": "exit", "data": 137}, {"type": "error", "data": REASON_OOM})
    await harness.wait_for(lambda: harness.service.pool.used_runner(runner) is None)
    assert (await harness.http.get(f"/runners/{runner}/files")).status_code == 410, "its files are gone"


async def test_an_idle_runner_whose_task_fails_is_replaced_before_its_restart(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    failed = next(iter(harness.service.pool.runners.values()))
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{harness.cluster.addresses[0]}/sim/v1/allocations/{failed.alloc_id}/fail",
            json={"reason": "crash"},
        )
    assert response.status_code == 200, response.text
    started = trio.current_time()
    await harness.wait_for(lambda: ("default", failed.id) not in harness.cluster.state.jobs)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    assert trio.current_time() - started < RESTART_DELAY / 2, "a new runner, not the task's restart"
    assert failed.id not in harness.service.pool.runners


async def test_drained_node_ends_the_execution_with_an_error(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    node_id = harness.service.pool.runners[runner].node_id

    async def drain() -> None:
        await harness.nomad.drain_node(node_id, deadline=0.3)

    messages = await harness.run_until_end(runner, "echo started; sleep 60", drain)
    assert messages[-1] == {"type": "error", "data": REASON_DRAINED}
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 410
    await harness.wait_for(lambda: ("default", runner) not in harness.cluster.state.jobs)


async def test_a_restarted_daemon_knows_its_claims(harness: Harness, nursery: trio.Nursery) -> None:
    await harness.environment(10)
    runner = await harness.runner(10, inactivity_timeout=300)
    await harness.wait_for(lambda: harness.claim_meta(runner)["used"] == "true")
    harness.daemon.stop()
    environ = {"NOMAD_ADDR": ",".join(harness.cluster.addresses)}
    second = await nursery.start(Daemon(Settings(server=ServerSettings(port=0)), environ=environ).run)
    async with httpx.AsyncClient(base_url=second.addresses[0] + "/api/v1") as http:
        pool = second.service.pool
        await wait_until(lambda: pool.used_runner(runner) is not None, within=20)
        stats = (await http.get("/statistics/execution-environments")).json()
        assert stats["10"]["usedRunners"] == 1
        patch = {"copy": [{"path": "after-restart.txt", "content": ""}]}
        assert (await http.patch(f"/runners/{runner}/files", json=patch)).status_code == 204
        claimed = second.service.pool.used_runner(runner)
        assert claimed is not None
        assert claimed.inactivity_timeout == 300
    second.stop()


async def test_an_environment_update_leaves_used_runners_running(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    changed = {
        "image": "python:3.13-slim",
        "prewarmingPoolSize": 2,
        "cpuLimit": 100,
        "memoryLimit": 256,
        "networkAccess": False,
        "exposedPorts": [],
    }
    assert (await harness.http.put("/execution-environments/10", json=changed)).status_code == 204
    await harness.wait_for(lambda: harness.claim_meta(runner)["used"] == "true")
    job = harness.cluster.state.jobs[("default", runner)]
    assert job.spec["TaskGroups"][0]["Tasks"][0]["Config"]["image"] == "python:3.12-slim", "its spec is kept"
    messages = await harness.execute(runner, command="echo still here")
    assert messages[-1] == {"type": "exit", "data": 0}
    await harness.wait_for(lambda: harness.idle(10) == 2)
    idle = [r for r in harness.service.pool.runners.values() if r.id != runner]
    assert all(r.environment and r.environment.image == "python:3.13-slim" for r in idle)
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204
    await harness.wait_for(lambda: ("default", runner) not in harness.cluster.state.jobs)


async def test_a_graceful_stop_lets_running_executions_finish(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)

    async def stop_the_daemon() -> None:
        harness.daemon.stop()

    messages = await harness.run_until_end(runner, "echo started; sleep 1; echo finished", stop_the_daemon)
    assert messages[-1] == {"type": "exit", "data": 0}
    assert "finished\r\n" in [m.get("data") for m in messages]  # on the execution's terminal
    with pytest.raises(httpx.TransportError):
        await harness.http.get("/version")  # it stopped accepting


async def test_jobs_lost_without_an_event_are_replaced_once_the_agents_are_back(harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=6)
    await harness.wait_for(lambda: harness.idle(10) == 6)
    claimed = await harness.runner(10)
    await harness.wait_for(lambda: harness.idle(10) == 6)
    known = set(harness.service.pool.runners)
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{harness.cluster.addresses[0]}/sim/v1/nodes/restart-all",
            json={"downtime_s": 0.3, "lose_fraction": 0.5},
        )
        assert response.status_code == 200
    await harness.wait_for(
        lambda: all(n.agent_up and n.status == "ready" for n in harness.cluster.state.nodes.values())
    )
    # The daemon may have found some gone already: judge by what Nomad holds, not by the pool.
    lost = [r for r in known if ("default", r) not in harness.cluster.state.jobs]
    assert lost, "the fault removed some runner jobs, silently"
    assert harness.service.gate.losses == 0, "the stream never dropped: no reconnect would have noticed"
    await harness.wait_for(
        lambda: (
            harness.idle(10) == 6
            and all(("default", r) in harness.cluster.state.jobs for r in harness.service.pool.runners)
        ),
        within=20,
    )
    assert harness.service.pool.found_gone.get("node restart", 0) >= 1
    assert "periodic" not in harness.service.informer.relisted, (
        "found by the relist the agents' re-registration asked for, not the periodic one (60 s)"
    )
    if claimed in lost:
        assert (await harness.http.get(f"/runners/{claimed}/files")).status_code == 410
    else:
        assert (await harness.http.get(f"/runners/{claimed}/files")).status_code == 200


async def test_a_draining_node_gets_no_new_work_but_finishes_what_runs(harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=3)
    await harness.wait_for(lambda: harness.idle(10) == 3)
    runner = await harness.runner(10)
    node_id = harness.service.pool.runners[runner].node_id

    async def drain() -> None:
        await harness.nomad.drain_node(node_id, deadline=3600)
        await harness.wait_for(lambda: harness.service.pool.serving_runner(runner) is None)
        refused = await harness.http.post(f"/runners/{runner}/execute", json={"command": "true"})
        assert refused.status_code == 410, "a moving runner: the client asks for a new one"

    messages = await harness.run_until_end(runner, "echo started; sleep 1; echo finished", drain)
    assert messages[-1] == {"type": "exit", "data": 0}, "the running execution was not killed"
    await harness.wait_for(
        lambda: (
            harness.idle(10) == 3
            and all(r.node_id != node_id for r in harness.service.pool.runners.values() if r.id != runner)
        )
    )
    fresh = await harness.runner(10)
    assert harness.service.pool.runners[fresh].node_id != node_id, "never handed out on a draining node"
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204
