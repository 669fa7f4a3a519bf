"""Agents an exec could not reach: new runners avoid their nodes, the runners waiting to start there
are replaced, and claims take runners elsewhere first."""

from __future__ import annotations

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.nodes import AWAY_SECONDS, SILENT_SECONDS
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import (
    FOUND_BY_LISTING,
    REASON_AGENT_AWAY,
    Action,
    CreateRunner,
    DestroyRunner,
    NodeAvoided,
    RunnerState,
)
from supervisor.nomad import Allocation, NodeListStub

from .test_pool import alloc
from .test_pool_replacements import Clock

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 6, 100.0, 256, False, ())


def placed(runner_id: str, node_id: str, status: str, index: int) -> Allocation:
    return alloc(runner_id, f"alloc-{runner_id}", status, index, node_id=node_id)


def unreachable(pool: RunnerPool, clock: Clock, runner_id: str) -> tuple[bool, list[Action]]:
    """An exec in the runner could not reach its agent: whether its node is newly avoided, and the
    actions beside that news."""
    return avoid(pool, clock, pool.runners[runner_id].node_id)


def avoid(pool: RunnerPool, clock: Clock, node_id: str) -> tuple[bool, list[Action]]:
    actions = pool.avoid(node_id, clock.moment())
    return any(isinstance(a, NodeAvoided) for a in actions), [
        a for a in actions if not isinstance(a, NodeAvoided)
    ]


def two_node_pool() -> tuple[RunnerPool, Clock, list[str]]:
    """Six runners: two idle and one starting on each of two nodes."""
    clock = Clock()
    pool = RunnerPool()
    nodes = [NodeListStub(id=n, status="ready", scheduling_eligibility="eligible") for n in ("n1", "n2")]
    pool.replace_nodes(nodes, 2)
    _, actions = pool.set_environment(ENVIRONMENT)
    ids = [a.runner_id for a in actions if isinstance(a, CreateRunner)]
    for i, runner_id in enumerate(ids):
        pool.registered(runner_id, 5)
        node_id = ("n1", "n2")[i % 2]
        pool.apply_allocation(
            placed(runner_id, node_id, "pending" if i >= 4 else "running", 10 + i), clock.moment()
        )
    return pool, clock, ids


def test_an_unreachable_agent_has_the_runners_waiting_to_start_on_its_node_replaced() -> None:
    pool, clock, ids = two_node_pool()
    idle_on_n1, starting_on_n1 = ids[0], ids[4]
    newly, actions = unreachable(pool, clock, idle_on_n1)
    assert newly
    assert pool.nodes.avoided(clock.now) == ("n1",)
    assert DestroyRunner(starting_on_n1, REASON_AGENT_AWAY) in actions
    assert sum(isinstance(a, CreateRunner) for a in actions) == 1, "its replacement, which avoids n1"
    assert pool.runners[idle_on_n1].state is RunnerState.IDLE, (
        "a running runner stays: its agent may be back soon"
    )
    assert pool.runners[ids[5]].state is RunnerState.STARTING, "runners waiting on other nodes stay"
    assert unreachable(pool, clock, ids[2]) == (False, []), "already avoided: nothing more to replace"


def test_a_new_runner_placed_on_an_avoided_node_is_replaced_while_it_waits() -> None:
    pool, clock, ids = two_node_pool()
    unreachable(pool, clock, ids[0])
    late = next(r for r in pool.runners if r not in ids)  # the replacement of the one waiting on n1
    actions = pool.apply_allocation(placed(late, "n1", "pending", 50), clock.moment())
    assert DestroyRunner(late, REASON_AGENT_AWAY) in actions, "placed on n1 all the same: replaced again"
    clock.now += AWAY_SECONDS
    other = next(r for r in pool.runners if r not in ids)
    assert pool.apply_allocation(placed(other, "n1", "pending", 60), clock.moment()) == [], "the mark lapsed"
    assert pool.runners[other].state is RunnerState.STARTING


def test_claims_take_runners_on_nodes_that_are_not_avoided_first() -> None:
    pool, clock, ids = two_node_pool()
    unreachable(pool, clock, ids[0])
    first, _ = pool.claim(10, 60, clock.now)
    second, _ = pool.claim(10, 60, clock.now)
    assert {first.node_id, second.node_id} == {"n2"}, "the two idle runners on n2"
    third, _ = pool.claim(10, 60, clock.now)
    assert third.node_id == "n1", "then those on the avoided node: better than none"


def test_a_single_node_is_never_avoided() -> None:
    clock = Clock()
    pool = RunnerPool()
    pool.replace_nodes([NodeListStub(id="n1", status="ready", scheduling_eligibility="eligible")], 2)
    _, actions = pool.set_environment(ENVIRONMENT)
    runner_id = next(a.runner_id for a in actions if isinstance(a, CreateRunner))
    pool.registered(runner_id, 5)
    pool.apply_allocation(placed(runner_id, "n1", "running", 10), clock.moment())
    assert unreachable(pool, clock, runner_id) == (False, [])
    assert pool.nodes.avoided(clock.now) == ()


def test_an_agent_seen_at_work_again_is_no_longer_avoided() -> None:
    pool, clock, ids = two_node_pool()
    unreachable(pool, clock, ids[0])
    pool.agent_reached(ids[2])  # an exec in another runner on n1 ran
    assert pool.nodes.avoided(clock.now) == ()

    unreachable(pool, clock, ids[0])
    unplaced = next(r for r in pool.runners if r not in ids)  # its registration went before the mark
    pool.apply_allocation(placed(ids[5], "n2", "running", 70), clock.moment())
    assert pool.nodes.avoided(clock.now) == ("n1",), "a start on another node proves nothing of n1"
    pool.apply_allocation(placed(unplaced, "n1", "running", 71), clock.moment())
    assert pool.nodes.avoided(clock.now) == (), "n1's agent started a task: it is back"
    assert pool.runners[unplaced].state is RunnerState.IDLE


def received(runner_id: str, node_id: str, status: str, index: int, event: str = "Received") -> Allocation:
    """The allocation as its agent reports it, with a task state."""
    reported = placed(runner_id, node_id, status, index)
    reported.raw["TaskStates"] = {"runner": {"State": "pending", "Events": [{"Type": event}]}}
    return reported


def test_a_runner_placed_where_its_agent_has_not_reported_it_waits_for_that_agent() -> None:
    pool, clock, ids = two_node_pool()
    starting_on_n1, starting_on_n2 = ids[4], ids[5]
    clock.now += SILENT_SECONDS
    pool.agent_reported(received(starting_on_n2, "n2", "pending", 40), clock.moment())
    assert pool.nodes.silent(clock.now, clock.now) == ["n1"], f"{starting_on_n1} waits on n1 since 0"
    newly, actions = avoid(pool, clock, "n1")
    assert newly
    assert DestroyRunner(starting_on_n1, REASON_AGENT_AWAY) in actions
    clock.now += 60
    assert pool.nodes.silent(clock.now, clock.now) == [], "n1's is gone; n2's was received"


def test_an_idle_runner_restarting_in_place_does_not_wait_for_its_agent() -> None:
    pool, clock, ids = two_node_pool()
    pool.agent_reported(received(ids[4], "n1", "pending", 40), clock.moment())
    clock.now += 1
    restarting = received(ids[0], "n1", "pending", 41, event="Restarting")
    pool.agent_reported(restarting, clock.moment())
    pool.apply_allocation(restarting, clock.moment())
    assert pool.runners[ids[0]].state is RunnerState.STARTING
    clock.now += 60
    pool.agent_reported(received(ids[5], "n2", "running", 42), clock.moment())
    assert pool.nodes.silent(clock.now, clock.now) == [], "its agent told of the restart itself"


def test_a_runner_listed_pending_does_not_wait_for_its_agent() -> None:
    pool, clock, ids = two_node_pool()
    for runner_id, node_id in ((ids[4], "n1"), (ids[5], "n2")):
        pool.agent_reported(received(runner_id, node_id, "pending", 40), clock.moment())
    later = placed(ids[4], "n1", "pending", 41)
    later.raw.clear()  # a lean listing's stub: it does not say what the agent reported
    pool.apply_allocation(later, clock.moment(), found=FOUND_BY_LISTING)
    clock.now += 60
    pool.agent_reported(received(ids[5], "n2", "running", 42), clock.moment())
    assert pool.nodes.silent(clock.now, clock.now) == []
