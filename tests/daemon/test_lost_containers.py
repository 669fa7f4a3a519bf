"""An agent that comes back without some of its containers (its host rebooted): the servers still
list those allocations running until the restored client writes "Failed Restoring Task", and an exec
into one answers that its task is not running. None of them is handed out meanwhile: a runner of a
restarted agent is proven by evidence newer than the restart, not by a listing that only repeats
what the servers knew before it."""

from __future__ import annotations

from supervisor.core.runners import REASON_CONTAINER_LOST, RunnerState

from .conftest import Harness

# Long enough that the node is ready, and relisted, well before the client writes.
REPORT_DELAY = 3.0


async def test_no_runner_whose_container_its_agent_lost_is_handed_out(harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=4)
    await harness.wait_for(lambda: harness.idle(10) == 4)
    pool, state = harness.service.pool, harness.cluster.state
    node = state.nodes[next(iter(pool.runners.values())).node_id]
    on_node = {r.id for r in pool.runners.values() if r.node_id == node.id}
    harness.cluster.agents.restarts.restart_agent(
        node, downtime=0.5, lose_containers=1.0, report_delay=REPORT_DELAY
    )
    await harness.wait_for(lambda: node.agent_up and node.status == "ready")
    lost = {a.job_id for a in state.every_alloc() if a.container_lost and a.job_id in pool.runners}
    assert lost == on_node, "the node's containers are gone, and the servers do not know it yet"
    await harness.wait_for(lambda: harness.idle(10) == 4)
    for _ in range(4):
        runner = await harness.runner(10)
        alloc = state.allocs[pool.runners[runner].alloc_id]
        assert not alloc.container_lost, f"{runner}: handed out while its container is gone"
        messages = await harness.execute(runner, command="echo ok")
        assert messages[-1] == {"type": "exit", "data": 0}, messages


async def test_a_lost_container_runs_again_once_its_client_writes_and_then_serves(
    harness: Harness,
) -> None:
    await harness.environment(10, prewarmingPoolSize=2)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    pool, state = harness.service.pool, harness.cluster.state
    runner = next(iter(pool.runners.values()))
    node = state.nodes[runner.node_id]
    harness.cluster.agents.restarts.restart_agent(node, downtime=0.5, lose_containers=1.0, report_delay=1.0)
    await harness.wait_for(lambda: node.agent_up and not any(a.container_lost for a in state.every_alloc()))
    alloc = state.allocs[runner.alloc_id]
    events = [e["Type"] for e in alloc.task_states[alloc.tasks[0]]["Events"]]
    assert "Failed Restoring Task" in events, events
    assert alloc.task_states[alloc.tasks[0]]["Restarts"] == 0, "Nomad does not count it as a restart"
    await harness.wait_for(
        lambda: pool.runners[runner.id].state is RunnerState.IDLE and harness.idle(10) == 2
    )
    claimed = await harness.runner(10)
    messages = await harness.execute(claimed, command="echo ok")
    assert messages[-1] == {"type": "exit", "data": 0}, messages


async def test_a_claimed_runner_whose_container_its_agent_lost_is_gone_before_its_client_says(
    harness: Harness,
) -> None:
    await harness.environment(10, prewarmingPoolSize=1)
    runner = await harness.runner(10)
    state = harness.cluster.state
    node = state.nodes[harness.service.pool.runners[runner].node_id]
    harness.cluster.agents.restarts.restart_agent(
        node, downtime=0.5, lose_containers=1.0, report_delay=REPORT_DELAY
    )
    await harness.wait_for(lambda: node.agent_up and node.status == "ready")
    alloc = state.allocs[harness.service.pool.runners[runner].alloc_id]
    assert alloc.container_lost
    assert alloc.client_status == "running", "the servers do not know yet"
    response = await harness.http.get(f"/runners/{runner}/files")
    assert response.status_code == 410, response.text
    assert REASON_CONTAINER_LOST in response.json()["message"]
