"""The runner pool's decisions at their edges, as plain synchronous tests: a client's activity, an
environment removed and put again, a destroy or a proof of a runner the pool does not know, an
agent's silence, a draining node's idle runners, and each environment's replacement budget."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.base.errors import UnknownEnvironment
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.replacements import REFILL_SECONDS, ReplacementBudget
from supervisor.core.runners import (
    REASON_ENVIRONMENT,
    CreateRunner,
    DestroyRunner,
    NodeAvoided,
    RunnerGone,
    RunnerState,
)
from supervisor.nomad import Allocation, Node, NodeEvent, NodeListStub

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
    pool.prove("unknown")
    pool.prove(ids[0])
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
    pool.prove(ids[0])
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
