"""How the daemon learns that a runner is gone from what Nomad answers its execs, and what a client
sees: 410 (take another runner), never a 500, and an execution's error that names the cause.

Real clock: the simulated cluster's commands are real processes. Where the agent-unreachable wait
is what a test is about, it shortens ``admission.wait_timeout`` and says so.
"""

from __future__ import annotations

import base64

import pytest
import trio

from supervisor.core.config import AdmissionSettings, ServerSettings, Settings
from supervisor.core.evidence import NodeSeen
from supervisor.core.nodes import SILENT_SECONDS
from supervisor.core.runners import REASON_ALLOCATION_UNKNOWN, RunnerState
from supervisor.desk.executions import MESSAGE_AGENT_AWAY, MESSAGE_AGENT_RESTARTED
from supervisor.nomad import Node, NodeEvent
from supervisor.simulator import SimConfig

from .conftest import Harness

SHORT_WAIT = [Settings(server=ServerSettings(port=0), admission=AdmissionSettings(wait_timeout=0.3))]


def vanish(harness: Harness, runner: str) -> None:
    """The runner's job vanishes without any event, as when every agent restarts at once (long
    after its claim: the claim's write of the used flag has landed)."""
    assert harness.claim_meta(runner)["used"] == "true", "the claim's write landed"
    harness.cluster.state.forget_job_silently(("default", runner))


async def claimed(harness: Harness) -> str:
    """A claimed runner whose used flag Nomad holds."""
    runner = await harness.runner(10)
    await harness.wait_for(lambda: harness.claim_meta(runner)["used"] == "true")
    return runner


def suspect(harness: Harness, runner: str) -> None:
    """Its agent re-registered, as the event stream tells it."""
    node_id = harness.service.pool.runners[runner].node_id
    event = Node(id=node_id, status="initializing", events=[NodeEvent(message="Node re-registered")])
    harness.service.effects.tell(NodeSeen("NodeRegistration", event, harness.service.informer.last_index))


async def test_an_exec_refused_for_an_unknown_allocation_ends_with_the_cause_and_the_runner_is_gone(
    harness: Harness,
) -> None:
    await harness.environment(10)
    runner = await claimed(harness)
    vanish(harness, runner)
    messages = await harness.execute(runner, command="echo ok")
    assert messages[-1] == {"type": "error", "data": REASON_ALLOCATION_UNKNOWN}
    again = await harness.http.post(f"/runners/{runner}/execute", json={"command": "true"})
    assert again.status_code == 410, "its client takes another runner"
    assert harness.service.pool.found_gone.get("exec refusal") == 1
    await harness.wait_for(lambda: harness.idle(10) == 2)


async def test_a_file_operation_on_a_runner_nomad_no_longer_knows_is_a_410(harness: Harness) -> None:
    await harness.environment(10)
    runner = await claimed(harness)
    vanish(harness, runner)
    patch = {"delete": ["./*"], "copy": [{"path": "a.txt", "content": base64.b64encode(b"a").decode()}]}
    response = await harness.http.patch(f"/runners/{runner}/files", json=patch)
    assert response.status_code == 410, response.text
    assert REASON_ALLOCATION_UNKNOWN in response.json()["message"]
    assert (await harness.http.get(f"/runners/{runner}/files")).status_code == 410


async def test_execute_on_a_suspect_runner_proves_it_first(harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=1)
    alive, gone = await claimed(harness), await claimed(harness)
    for runner in (alive, gone):
        suspect(harness, runner)
    vanish(harness, gone)
    refused = await harness.http.post(f"/runners/{gone}/execute", json={"command": "echo ok"})
    assert refused.status_code == 410, "proven gone by one GET of its allocation, before anything starts"
    assert harness.service.pool.runners[alive].suspect_since > 0
    messages = await harness.execute(alive, command="echo ok")
    assert messages[-1] == {"type": "exit", "data": 0}
    assert harness.service.pool.runners[alive].suspect_since == 0, "proven alive"


@pytest.mark.parametrize("settings", SHORT_WAIT)
async def test_an_agent_out_of_reach_past_the_wait_makes_the_runner_move(
    harness: Harness, settings: Settings
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    node = harness.cluster.state.nodes[harness.service.pool.runners[runner].node_id]
    harness.cluster.agents.stop_agent(node)  # its exec answers "no path to node"
    started = trio.current_time()
    response = await harness.http.get(f"/runners/{runner}/files")
    assert response.status_code == 410, response.text
    assert trio.current_time() - started >= 0.3, "retried for admission.wait_timeout first"
    assert MESSAGE_AGENT_AWAY in response.json()["message"]
    assert harness.service.pool.serving_runner(runner) is None, "moving: nothing new starts on it"
    refused = await harness.http.post(f"/runners/{runner}/execute", json={"command": "true"})
    assert refused.status_code == 410


async def test_an_agent_back_within_the_wait_serves_the_request(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    node = harness.cluster.state.nodes[harness.service.pool.runners[runner].node_id]
    harness.cluster.agents.restarts.restart_agent(node, downtime=1.0)
    response = await harness.http.get(f"/runners/{runner}/files")
    assert response.status_code == 200, response.text
    messages = await harness.execute(runner, command="echo ok")
    assert messages[-1] == {"type": "exit", "data": 0}


async def test_an_execution_cut_by_its_agent_restarting_says_so(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    node = harness.cluster.state.nodes[harness.service.pool.runners[runner].node_id]

    async def restart_the_agent() -> None:
        harness.cluster.agents.restarts.restart_agent(node, downtime=1.0)

    messages = await harness.run_until_end(runner, "echo started; sleep 30", restart_the_agent)
    assert messages[-1] == {"type": "error", "data": MESSAGE_AGENT_RESTARTED}, messages
    await harness.wait_for(lambda: node.agent_up and node.status == "ready")
    assert harness.service.pool.used_runner(runner) is not None, "its allocation survived: the runner is kept"
    again = await harness.execute(runner, command="echo ok")
    assert again[-1] == {"type": "exit", "data": 0}


async def test_new_runners_avoid_a_node_whose_agent_an_exec_could_not_reach(harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=6)
    runner = await harness.runner(10)
    pool, state = harness.service.pool, harness.cluster.state
    node = state.nodes[pool.runners[runner].node_id]
    harness.cluster.agents.stop_agent(node)  # away, and Nomad will not know it for its heartbeat grace
    await harness.runner(10)  # a refill, which Nomad may place on the node that is away
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.http.get, f"/runners/{runner}/files")
        await harness.wait_for(lambda: node.id in pool.nodes.avoided(trio.current_time()), within=2.0)
        assert pool.serving_runner(runner) is not None, "marked at the first refusal, before the wait ends"
        details = (await harness.http.get("/health/details")).json()
        assert details["checks"]["away_nodes"] == {"status": "ok", "nodes": [node.name]}
        await trio.sleep(0.2)  # a registration under way at the mark lands
        jobs_before = set(state.jobs)
        for _ in range(3):
            await harness.runner(10)  # each refill is registered after the mark

        def at_strength() -> bool:
            starting = [r for r in pool.runners.values() if r.state is RunnerState.STARTING]
            return harness.idle(10) == 6 and all(r.node_id != node.id for r in starting)

        await harness.wait_for(at_strength, within=10.0)
    new_jobs = [state.jobs[key] for key in set(state.jobs) - jobs_before]
    assert len(new_jobs) >= 3, "the claims' replacements"
    excluded = {"LTarget": "${node.unique.id}", "RTarget": node.id, "Operand": "!="}
    assert all(excluded in (job.spec.get("Constraints") or []) for job in new_jobs)
    assert not any(
        a.node_id == node.id
        for key in set(state.jobs) - jobs_before
        for a in state.allocs_by_job.get(key, {}).values()
    )


async def test_new_runners_avoid_a_node_whose_agent_says_nothing_of_the_runners_placed_there(
    harness: Harness,
) -> None:
    await harness.environment(10, prewarmingPoolSize=4)
    pool, state = harness.service.pool, harness.cluster.state
    await harness.wait_for(lambda: harness.idle(10) == 4)
    node = state.nodes[pool.runners[next(iter(pool.runners))].node_id]
    harness.cluster.agents.stop_agent(node)  # no exec goes there; Nomad learns it after 20 s
    stopped = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_claims_given_back, harness)
        await harness.wait_for(
            lambda: bool(pool.nodes.avoided(trio.current_time())), within=SILENT_SECONDS + 3
        )
        assert pool.nodes.avoided(trio.current_time()) == (node.id,), "the other agent reports"
        await harness.wait_for(lambda: not _waiting_on(harness, node.id), within=5.0)
        nursery.cancel_scope.cancel()
    assert node.status == "ready", "all before Nomad missed the agent's heartbeats"
    assert trio.current_time() - stopped < state.config.heartbeat_grace


async def _claims_given_back(harness: Harness) -> None:
    """Claims given back at once: each refill is placed, some on the node that is away, and the
    other agents' reports (stops, starts) keep the event stream going."""
    while True:
        runner = await harness.runner(10)
        await harness.http.delete(f"/runners/{runner}")
        await trio.sleep(0.2)


def _waiting_on(harness: Harness, node_id: str) -> bool:
    pool = harness.service.pool
    return any(r.node_id == node_id and r.state is RunnerState.STARTING for r in pool.runners.values())


@pytest.mark.parametrize(
    "sim_config",
    # Three nodes; a heartbeat grace long enough that the mark, not Nomad, is what the test sees.
    [
        SimConfig(
            seed=11,
            nodes=3,
            alloc_start_delay=0.01,
            task_kill_delay=0.01,
            eval_delay=0.001,
            heartbeat_grace=60,
        )
    ],
)
async def test_the_silence_of_an_emptied_node_s_agent_outlasts_stream_cuts(
    harness: Harness,
) -> None:
    """A node that a drain emptied, made eligible again, whose agent then stops: no exec goes there,
    and Nomad's spread ranks it first for the refills. Its agent's silence is found though the
    event stream is cut every 3 s (the silence goes on across each cut), and the pool is whole long
    before Nomad marks the node down."""
    await harness.environment(10, prewarmingPoolSize=6)
    pool, state = harness.service.pool, harness.cluster.state
    await harness.wait_for(lambda: harness.idle(10) == 6)
    node = state.nodes[pool.runners[next(iter(pool.runners))].node_id]
    harness.cluster.agents.drain(node, deadline_ns=-1, mark_eligible=False, meta={}, accessor="")
    await harness.wait_for(lambda: harness.idle(10) == 6 and not _on(harness, node.id))
    harness.cluster.agents.set_eligibility(node, True)
    harness.cluster.agents.stop_agent(node)
    stopped = trio.current_time()

    async def cuts() -> None:
        while True:
            await trio.sleep(3)
            harness.cluster.cut_streams()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_claims_given_back, harness)
        nursery.start_soon(cuts)
        await harness.wait_for(lambda: _on(harness, node.id), within=5.0)
        await harness.wait_for(lambda: node.id in pool.nodes.avoided(trio.current_time()), within=25.0)
        assert harness.cluster.stats.stream_cuts >= 1, "found through stream cuts, 3 s apart"
        await harness.wait_for(lambda: harness.idle(10) == 6 and not _on(harness, node.id), within=5.0)
        nursery.cancel_scope.cancel()
    assert trio.current_time() - stopped < 30.0, "long before Nomad's grace"


def _on(harness: Harness, node_id: str) -> bool:
    """Whether a runner that is not used has its allocation on the node."""
    return any(
        r.node_id == node_id and r.state is not RunnerState.USED
        for r in harness.service.pool.runners.values()
    )
