"""The runner pool's decisions at their edges, as plain synchronous tests: a client's activity, an
environment removed and put again, a destroy or a proof of a runner the pool does not know, an
agent's silence, a draining node's idle runners, each environment's replacement budget, and each
change through the pool's one door."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.base.errors import RunnerGoneError, UnknownEnvironment
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import (
    AgentAddressLearned,
    AgentUnreachable,
    AllocationSeen,
    JobPurged,
    JobRefused,
    JobRegistered,
    JobSeen,
    Moment,
    NodeSeen,
    RunnerProven,
    RunnersListed,
    StreamResumed,
)
from supervisor.core.nodes import QUICK_SILENT_SECONDS
from supervisor.core.orders import Destroy, Touch
from supervisor.core.pool import RunnerPool
from supervisor.core.replacements import REFILL_SECONDS, ReplacementBudget
from supervisor.core.runners import (
    FOUND_BY_EVENT,
    FOUND_BY_LISTING,
    REASON_ALLOCATION_STOPPED,
    REASON_ENVIRONMENT,
    REASON_FAILED_IDLE,
    REASON_JOB_GONE,
    CreateRunner,
    DestroyRunner,
    NodeAvoided,
    PoolStats,
    ProbeRunner,
    RunnerGone,
    RunnerStarted,
    RunnerState,
    Tombstone,
)
from supervisor.nomad import Allocation, AllocListStub, JobListStub, Node, NodeEvent, NodeListStub
from supervisor.nomad.agents import AgentRoute

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 3, 100.0, 256, False, ())
AT = Moment(0.0)


def alloc(job_id: str, alloc_id: str, index: int, node_id: str = "n1", **fields: Any) -> Allocation:
    return Allocation(
        id=alloc_id,
        job_id=job_id,
        client_status=fields.pop("status", "running"),
        desired_status="run",
        create_index=index,
        modify_index=index,
        node_id=node_id,
        **fields,
    )


def warm_pool() -> tuple[RunnerPool, list[str]]:
    pool = RunnerPool()
    _, actions = pool.set_environment(ENVIRONMENT)
    ids = [a.runner_id for a in actions if isinstance(a, CreateRunner)]
    for i, runner_id in enumerate(ids):
        pool.registered(runner_id, 5)
        pool.apply_allocation(alloc(runner_id, f"a{i}", 10 + i), AT)
    return pool, ids


def test_activity_counts_what_works_in_a_used_runner_and_when_it_was_last_used() -> None:
    pool, _ = warm_pool()
    runner, _ = pool.claim(10, 60, now=100.0)
    pool.activity(runner.id, 110.0, working=1)
    pool.activity(runner.id, 111.0, working=1)
    assert (runner.executions, runner.last_activity) == (2, 111.0)
    pool.activity(runner.id, 120.0, working=-1)
    pool.activity(runner.id, 125.0)
    assert (runner.executions, runner.last_activity) == (1, 125.0), "plain activity counts nothing"
    assert pool.expired(10_000.0) == [], "never while one works in it"
    pool.activity(runner.id, 130.0, working=-1)
    assert pool.expired(189.9) == []
    assert pool.expired(190.0) == [runner.id]


def test_activity_in_a_runner_not_used_changes_nothing() -> None:
    pool, ids = warm_pool()
    pool.activity(ids[0], 50.0, working=1)
    assert (pool.runners[ids[0]].executions, pool.runners[ids[0]].last_activity) == (0, 0.0)
    pool.activity("unknown", 50.0, working=1)


def test_removing_an_environment_ends_each_of_its_runners() -> None:
    pool, _ = warm_pool()
    used, _ = pool.claim(10, 0, now=1.0)
    actions = pool.remove_environment(10)
    assert RunnerGone(used.id, REASON_ENVIRONMENT) in actions
    destroyed = {a.runner_id for a in actions if isinstance(a, DestroyRunner)}
    assert destroyed == set(pool.tombstones)
    assert len(destroyed) == 4, "three first runners and a replacement"
    assert all(a.reason == REASON_ENVIRONMENT for a in actions if isinstance(a, DestroyRunner))
    assert not any(isinstance(a, CreateRunner) for a in actions), "nothing refills a removed pool"
    assert pool.runners == {}
    assert pool.stats() == {}
    with pytest.raises(UnknownEnvironment):
        pool.claim(10, 0, now=2.0)


def test_removing_an_unknown_environment_is_refused_with_its_id() -> None:
    pool, _ = warm_pool()
    with pytest.raises(UnknownEnvironment) as refused:
        pool.remove_environment(99)
    assert refused.value.args == (99,)
    assert 10 in pool.environments


def test_an_environment_put_again_after_its_removal_has_a_full_replacement_budget() -> None:
    budget = ReplacementBudget()
    assert budget.take(10, 3, now=0.0)
    assert not budget.take(10, 3, now=0.0)
    budget.forget(10)
    assert budget.take(10, 3, now=0.0)


def test_a_spent_budget_does_not_refill_without_time_passing_however_often_it_is_asked() -> None:
    budget = ReplacementBudget()
    assert budget.take(10, 3, now=0.0)
    assert not any(budget.take(10, 3, now=0.0) for _ in range(200))
    assert not budget.take(10, 3, now=REFILL_SECONDS - 1)
    assert budget.take(10, 3, now=REFILL_SECONDS)


@pytest.mark.parametrize(("pool_size", "capacity"), [(0, 1), (9, 1), (15, 1), (20, 2), (29, 2), (100, 10)])
def test_an_environment_replaces_a_tenth_of_its_pool_at_once_and_at_least_one(
    pool_size: int, capacity: int
) -> None:
    assert ReplacementBudget.capacity(pool_size) == capacity
    assert isinstance(ReplacementBudget.capacity(pool_size), int)


def test_destroying_a_runner_the_pool_does_not_know_does_nothing() -> None:
    pool, _ = warm_pool()
    assert pool.destroy("unknown", "gone") == []
    assert len(pool.runners) == 3


def test_a_proof_of_a_runner_the_pool_does_not_know_or_that_is_not_suspect_does_nothing() -> None:
    pool, ids = warm_pool()
    pool.prove("unknown", "a0")
    pool.prove(ids[0], "a0")
    assert pool.runners[ids[0]].suspect_since == 0
    assert pool.runners[ids[0]].state is RunnerState.IDLE


def node(status: str, message: str, index: int) -> Node:
    return Node(
        id="n1", name="worker-01", status=status, modify_index=index, events=[NodeEvent(message=message)]
    )


def test_a_proven_runner_is_made_suspect_again_by_a_later_restart() -> None:
    pool, ids = warm_pool()
    pool.apply_node("NodeRegistration", node("ready", "Node registered", 3), 3)
    pool.apply_node("NodeRegistration", node("initializing", "Node re-registered", 40), 40)
    assert pool.suspect_runners() == ids
    pool.prove(ids[0], "another allocation")
    assert pool.runners[ids[0]].suspect_since == 40, "a proof of another allocation proves nothing"
    pool.prove(ids[0], "a0")
    assert pool.runners[ids[0]].suspect_since == 0
    assert pool.stats()[10].idle == 1
    pool.apply_node("NodeRegistration", node("initializing", "Node re-registered", 50), 50)
    assert pool.runners[ids[0]].suspect_since == 50
    assert pool.stats()[10].idle == 0


def placeable(*names: str) -> list[NodeListStub]:
    return [NodeListStub(id=n, name=n, status="ready", scheduling_eligibility="eligible") for n in names]


def test_a_silent_agent_is_avoided_past_half_of_the_nodes_and_an_unreachable_one_is_not() -> None:
    pool, _ = warm_pool()
    pool.replace_nodes(placeable("n1", "n2", "n3"), 20)
    assert pool.avoid("n1", Moment(10.0)) == [NodeAvoided("n1", False)]
    assert pool.avoid("n2", Moment(10.0)) == [], "two of three unreachable: trouble everywhere"
    assert pool.avoid("n2", Moment(10.0), silent=True) == [NodeAvoided("n2", True)]


def test_each_idle_runner_on_a_node_that_begins_to_drain_is_destroyed() -> None:
    pool, ids = warm_pool()
    pool.replace_nodes(placeable("n1", "n2"), 20)
    draining = [NodeListStub(id="n1", name="n1", status="ready", drain=True), *placeable("n2")]
    actions = pool.replace_nodes(draining, 21)
    destroyed = [a.runner_id for a in actions if isinstance(a, DestroyRunner)]
    assert destroyed == ids
    assert all(a.reason == "its node is draining" for a in actions if isinstance(a, DestroyRunner))
    assert len([a for a in actions if isinstance(a, CreateRunner)]) == 3


# -- through the pool's one door (``RunnerPool.handle``): each change does what the pool's own entry
# for it does, with the moment and every field it carries.

DOOR_ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())
DOOR_AT = Moment(5.0, 5.0)


def door_alloc(job_id: str, alloc_id: str, index: int, status: str = "running", **fields: Any) -> Allocation:
    return Allocation(
        id=alloc_id,
        job_id=job_id,
        client_status=status,
        desired_status="run",
        create_index=fields.pop("created", index),
        modify_index=index,
        node_id="n1",
        **fields,
    )


def door_new_pool() -> tuple[RunnerPool, list[str]]:
    pool = RunnerPool()
    _, actions = pool.set_environment(DOOR_ENVIRONMENT)
    return pool, [a.runner_id for a in actions if isinstance(a, CreateRunner)]


def door_warm_pool() -> tuple[RunnerPool, list[str]]:
    pool, ids = door_new_pool()
    for i, runner_id in enumerate(ids):
        pool.handle(JobRegistered(runner_id, 5), DOOR_AT)
        pool.handle(AllocationSeen(door_alloc(runner_id, f"a{i}", 10 + i)), DOOR_AT)
    return pool, ids


def test_a_registration_and_a_purge_are_recorded_at_their_index() -> None:
    pool, ids = door_new_pool()
    assert pool.handle(JobRegistered(ids[0], 7), DOOR_AT) == []
    assert pool.runners[ids[0]].registered_index == 7
    pool.destroy(ids[0], "gone")
    pool.handle(JobPurged(ids[0], 90), DOOR_AT)
    assert pool.tombstones[ids[0]] == Tombstone(7, 90)


def test_a_refused_registration_forgets_the_runner() -> None:
    pool, ids = door_new_pool()
    assert pool.handle(JobRefused(ids[0]), DOOR_AT) == []
    assert ids[0] not in pool.runners


def test_a_runner_whose_allocation_first_runs_is_started() -> None:
    pool, ids = door_new_pool()
    pool.handle(JobRegistered(ids[0], 5), DOOR_AT)
    assert pool.handle(AllocationSeen(door_alloc(ids[0], "a0", 10, "pending")), DOOR_AT) == []
    assert pool.handle(AllocationSeen(door_alloc(ids[0], "a0", 11)), DOOR_AT) == [RunnerStarted(ids[0])]
    assert pool.handle(AllocationSeen(door_alloc(ids[0], "a0", 12)), DOOR_AT) == [], "once"


def test_an_allocation_seen_in_a_listing_counts_as_found_there() -> None:
    pool, ids = door_warm_pool()
    stopped = door_alloc(ids[0], "a0", 30, "complete")
    actions = pool.handle(AllocationSeen(stopped, FOUND_BY_LISTING), DOOR_AT)
    assert DestroyRunner(ids[0], REASON_ALLOCATION_STOPPED) in actions
    assert pool.found_gone_counts() == {FOUND_BY_LISTING: 1}


def test_a_stopped_job_ends_its_runner() -> None:
    pool, ids = door_warm_pool()
    assert DestroyRunner(ids[0], REASON_JOB_GONE) in pool.handle(
        JobSeen(ids[0], deleted=False, stopped=True), AT
    )
    assert pool.handle(JobSeen(ids[1], deleted=False, stopped=False), DOOR_AT) == []
    assert ids[1] in pool.runners


def test_a_touch_counts_what_works_in_the_runner_at_the_moment() -> None:
    pool, _ = door_warm_pool()
    runner, _ = pool.claim(10, 60, now=1.0)
    pool.handle(Touch(runner.id, working=1), Moment(42.0))
    assert (runner.executions, runner.last_activity) == (1, 42.0)


def test_a_destroy_order_gives_its_reason() -> None:
    pool, ids = door_warm_pool()
    assert DestroyRunner(ids[0], "expired") in pool.handle(Destroy(ids[0], "expired"), DOOR_AT)


def test_a_proof_clears_a_suspect_runner() -> None:
    pool, ids = door_warm_pool()
    registered = Node(id="n1", status="ready", events=[NodeEvent(message="Node registered")], modify_index=3)
    pool.handle(NodeSeen("NodeRegistration", registered, 3), DOOR_AT)
    again = Node(
        id="n1", status="initializing", events=[NodeEvent(message="Node re-registered")], modify_index=40
    )
    assert pool.handle(NodeSeen("NodeRegistration", again, 40), DOOR_AT) == []
    assert pool.suspect_runners() == ids
    pool.handle(RunnerProven(ids[0], "a0"), DOOR_AT)
    assert pool.suspect_runners() == ids[1:]


def test_an_agent_s_address_and_its_unreachability_reach_the_node_tracker() -> None:
    pool, _ = door_warm_pool()
    pool.handle(AgentAddressLearned(AgentRoute("n1"), "10.0.0.2:4646", True), DOOR_AT)
    assert pool.agent_route("a0") == AgentRoute("n1", 0, "10.0.0.2:4646", True)
    pool.handle(AgentUnreachable(AgentRoute("n1")), DOOR_AT)
    assert pool.agent_route("a0") is None


def test_a_stream_that_resumed_gives_an_agent_placed_before_it_longer() -> None:
    pool, _ = door_warm_pool()
    pool.replace_nodes(
        [
            NodeListStub(id=n, name=n, status="ready", scheduling_eligibility="eligible")
            for n in ("n1", "n2", "n3")
        ],
        20,
    )
    pool.nodes.waiting("r9", "n1", "a9", 1.0)
    pool.nodes.heard("n2", 2.0)
    assert pool.silent_nodes(Moment(0.0, 1.0 + QUICK_SILENT_SECONDS)) == ["n1"]
    pool.handle(StreamResumed(2.0), DOOR_AT)
    assert pool.silent_nodes(Moment(0.0, 1.0 + QUICK_SILENT_SECONDS)) == []


def test_each_node_that_begins_to_drain_has_its_idle_runners_destroyed() -> None:
    pool, ids = door_new_pool()
    for i, runner_id in enumerate(ids):
        pool.registered(runner_id, 5)
        placed = Allocation(
            id=f"a{i}",
            job_id=runner_id,
            client_status="running",
            desired_status="run",
            create_index=10 + i,
            modify_index=10 + i,
            node_id=f"n{i}",
        )
        pool.apply_allocation(placed, DOOR_AT)
    draining = [NodeListStub(id=f"n{i}", name=f"n{i}", status="ready", drain=True) for i in range(2)]
    actions = pool.replace_nodes(draining, 30)
    assert sorted(a.runner_id for a in actions if isinstance(a, DestroyRunner)) == sorted(ids)
    assert not any(isinstance(a, NodeAvoided) for a in actions)


def test_the_pool_s_figures_count_its_used_and_suspect_runners() -> None:
    pool, _ = door_warm_pool()
    pool.claim(10, 0, now=1.0)
    assert pool.stats()[10] == PoolStats(10, size=2, idle=1, used=1, suspect=0)
    again = Node(id="n1", status="ready", events=[NodeEvent(message="Node re-registered")], modify_index=40)
    pool.handle(NodeSeen("NodeRegistration", again, 40), DOOR_AT)
    assert pool.stats()[10].suspect == 2, "a re-registration is a restart, even ready already"


def test_a_job_seen_stopped_counts_its_runner_as_found_by_an_event() -> None:
    pool, ids = door_warm_pool()
    pool.handle(JobSeen(ids[0], deleted=True, stopped=False), DOOR_AT)
    assert pool.found_gone_counts() == {FOUND_BY_EVENT: 1}


def test_a_release_of_a_runner_not_used_says_which() -> None:
    pool, ids = door_warm_pool()
    with pytest.raises(RunnerGoneError) as refused:
        pool.release(ids[0])
    assert str(refused.value) == f"no used runner {ids[0]}"


def test_a_listing_s_stub_has_a_suspect_runner_probed_and_a_probe_proves_it() -> None:
    pool, ids = door_warm_pool()
    again = Node(
        id="n1", status="initializing", events=[NodeEvent(message="Node re-registered")], modify_index=40
    )
    pool.handle(NodeSeen("NodeRegistration", again, 40), DOOR_AT)
    ready = Node(id="n1", status="ready", events=[NodeEvent(message="Node re-registered")], modify_index=41)
    pool.handle(NodeSeen("NodeStreamEvent", ready, 41), DOOR_AT)
    jobs = [JobListStub(id=runner_id, modify_index=5) for runner_id in ids]
    stubs = [
        AllocListStub(
            id=f"a{i}",
            job_id=runner_id,
            node_id="n1",
            client_status="running",
            desired_status="run",
            create_index=10 + i,
            modify_index=50,
        )
        for i, runner_id in enumerate(ids)
    ]
    actions = pool.handle(RunnersListed(jobs, stubs, 60), DOOR_AT)
    assert [a for a in actions if isinstance(a, ProbeRunner)] == [
        ProbeRunner(r, f"a{i}") for i, r in enumerate(ids)
    ]
    assert pool.suspect_runners() == ids, "a listing repeats what the servers knew: it proves nothing"
    for i, runner_id in enumerate(ids):
        pool.handle(RunnerProven(runner_id, f"a{i}"), DOOR_AT)
    assert pool.suspect_runners() == []
    assert pool.stats()[10].idle == 2


def test_an_environment_put_again_after_its_removal_replaces_a_failed_idle_runner_at_once() -> None:
    pool, ids = door_warm_pool()
    failing = {"TaskStates": {"t": {"Events": [{"Type": "Restarting", "StartDelay": 15_000_000_000}]}}}
    assert DestroyRunner(ids[0], REASON_FAILED_IDLE) in pool.handle(
        AllocationSeen(door_alloc(ids[0], "a0", 20, "pending", created=10, raw=failing)), DOOR_AT
    ), "the budget's one replacement"
    pool.remove_environment(10)
    again, _ = door_new_pool_into(pool)
    pool.handle(AllocationSeen(door_alloc(again[0], "b0", 30)), DOOR_AT)
    actions = pool.handle(
        AllocationSeen(door_alloc(again[0], "b0", 31, "pending", created=30, raw=failing)), DOOR_AT
    )
    assert DestroyRunner(again[0], REASON_FAILED_IDLE) in actions, "a new environment, a full budget"


def door_new_pool_into(pool: RunnerPool) -> tuple[list[str], list[object]]:
    _, actions = pool.set_environment(DOOR_ENVIRONMENT)
    return [a.runner_id for a in actions if isinstance(a, CreateRunner)], list(actions)
