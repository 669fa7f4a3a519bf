"""The pool's reads at their edges (``PoolView``, and ``Runner.mapped_ports``): what the desk, the
reports and exec ask of the pool, as plain synchronous tests on a pool fed typed Nomad objects."""

from __future__ import annotations

from typing import Any

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import FOUND_BY_EXEC_REFUSAL, CreateRunner, PoolStats, RunnerState, Tombstone
from supervisor.nomad import Allocation, Node, NodeEvent, NodeListStub, PortMapping
from supervisor.nomad.agents import AgentRoute

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())
OTHER = ExecutionEnvironment(3, "java:21", 1, 100.0, 256, False, ())
AT = Moment(0.0)


def alloc(job_id: str, alloc_id: str, index: int, **fields: Any) -> Allocation:
    return Allocation(
        id=alloc_id,
        job_id=job_id,
        client_status=fields.pop("status", "running"),
        desired_status="run",
        create_index=index,
        modify_index=index,
        node_id=fields.pop("node_id", "n1"),
        **fields,
    )


def warm_pool(environment: ExecutionEnvironment = ENVIRONMENT) -> tuple[RunnerPool, list[str]]:
    pool = RunnerPool()
    _, actions = pool.set_environment(environment)
    ids = [a.runner_id for a in actions if isinstance(a, CreateRunner)]
    for i, runner_id in enumerate(ids):
        pool.registered(runner_id, 5)
        pool.apply_allocation(alloc(runner_id, f"a{i}", 10 + i), AT)
    return pool, ids


def test_a_runner_is_found_by_its_allocation_only_while_that_is_its_allocation() -> None:
    pool, ids = warm_pool()
    assert pool.runner_of_alloc("a0") is pool.runners[ids[0]]
    assert pool.knows_alloc("a0")
    assert pool.runner_of_alloc("unknown") is None
    assert not pool.knows_alloc("unknown")
    # The runner's allocation is replaced: the old one is no longer the runner's.
    pool.apply_allocation(alloc(ids[0], "a9", 30), AT)
    assert pool.runner_of_alloc("a9") is pool.runners[ids[0]]
    assert pool.runner_of_alloc("a0") is None
    assert not pool.knows_alloc("a0")


def test_a_failed_registration_forgets_the_runner_and_orders_nothing() -> None:
    pool, ids = warm_pool()
    assert pool.registration_failed(ids[0]) == []
    assert pool.runner(ids[0]) is None
    assert pool.runner_of_alloc("a0") is None
    assert pool.stats()[10].idle == 1, "no longer idle either"
    runner, _ = pool.claim(10, 0, now=1.0)
    assert runner.id == ids[1], "the forgotten runner is never handed out"
    assert pool.registration_failed("unknown") == []


def test_every_runner_and_every_environment_in_id_order() -> None:
    pool, ids = warm_pool()
    pool.set_environment(OTHER)
    assert sorted(r.id for r in pool.all_runners()) == sorted([*ids, *pool.runners_in(RunnerState.STARTING)])
    assert len(pool.all_runners()) == 3
    assert [e.id for e in pool.all_environments()] == [3, 10]
    assert pool.environment_ids() == [3, 10]


def test_runner_counts_by_environment_and_state() -> None:
    pool, _ = warm_pool()
    pool.set_environment(OTHER)
    pool.claim(10, 0, now=1.0)
    counts = pool.runner_counts()
    assert counts[(10, RunnerState.USED)] == 1
    assert counts[(10, RunnerState.IDLE)] == 1
    assert counts[(10, RunnerState.STARTING)] == 1, "the claim's replacement"
    assert counts[(3, RunnerState.STARTING)] == 1
    assert sum(counts.values()) == len(pool.runners) == 4


def test_the_inactivity_deadline_is_the_last_activity_plus_the_timeout_while_nothing_works() -> None:
    pool, _ = warm_pool()
    runner, _ = pool.claim(10, 60, now=100.0)
    assert pool.inactivity_deadline(runner.id) == 160.0
    pool.activity(runner.id, 110.0, working=1)
    assert pool.inactivity_deadline(runner.id) is None, "an execution works in it"
    pool.activity(runner.id, 120.0, working=-1)
    assert pool.inactivity_deadline(runner.id) == 180.0
    assert pool.inactivity_deadline("unknown") is None
    untimed, _ = pool.claim(10, 0, now=100.0)
    assert pool.inactivity_deadline(untimed.id) is None, "a timeout of 0 never expires"


def test_an_idle_runner_has_no_inactivity_deadline() -> None:
    pool, ids = warm_pool()
    pool.runners[ids[0]].inactivity_timeout = 5.0
    assert pool.inactivity_deadline(ids[0]) is None


def test_found_gone_counts_are_a_copy() -> None:
    pool, ids = warm_pool()
    pool.lost(ids[0], "gone")
    counts = pool.found_gone_counts()
    assert counts[FOUND_BY_EXEC_REFUSAL] == 1
    counts[FOUND_BY_EXEC_REFUSAL] = 7
    assert pool.found_gone_counts()[FOUND_BY_EXEC_REFUSAL] == 1


def node(node_id: str, name: str, status: str = "ready", **fields: Any) -> Node:
    return Node(id=node_id, name=name, status=status, events=[NodeEvent(message="Node registered")], **fields)


def test_the_agent_route_of_an_allocation_is_its_runner_s_node() -> None:
    pool, _ = warm_pool()
    pool.apply_node(
        "NodeRegistration", node("n1", "worker-01", http_addr="10.0.0.1:4646", tls_enabled=True), 3
    )
    assert pool.agent_route("a0") == AgentRoute("n1", 0, "10.0.0.1:4646", True)
    assert pool.agent_route("unknown") is None
    pool.apply_allocation(alloc("unplaced", "x", 40, node_id=""), AT)
    assert pool.agent_route("x") is None


def test_an_unknown_node_s_route_has_no_address_and_a_down_node_has_none() -> None:
    pool, _ = warm_pool()
    assert pool.agent_route("a0") == AgentRoute("n1")
    pool.apply_node("NodeRegistration", node("n1", "worker-01", "down"), 3)
    assert pool.agent_route("a0") is None


def test_nodes_by_name_or_id_when_they_have_none() -> None:
    pool, _ = warm_pool()
    listed = [
        NodeListStub(id="n2", name="", status="ready", drain=True),
        NodeListStub(id="n1", name="worker-01", status="ready", drain=True),
        NodeListStub(id="n3", name="worker-03", status="ready", scheduling_eligibility="eligible"),
    ]
    pool.replace_nodes(listed, 20)
    assert pool.node_draining("n1")
    assert not pool.node_draining("n3")
    assert pool.draining_node_names() == ["n2", "worker-01"]


def test_avoided_nodes_by_name() -> None:
    pool, _ = warm_pool()
    pool.replace_nodes(
        [
            NodeListStub(id="n1", name="", status="ready", scheduling_eligibility="eligible"),
            NodeListStub(id="n2", name="worker-02", status="ready", scheduling_eligibility="eligible"),
            NodeListStub(id="n3", name="worker-03", status="ready", scheduling_eligibility="eligible"),
            NodeListStub(id="n4", name="worker-04", status="ready", scheduling_eligibility="eligible"),
            NodeListStub(id="n5", name="worker-05", status="ready", scheduling_eligibility="eligible"),
        ],
        20,
    )
    pool.avoid("n2", Moment(10.0))
    pool.avoid("n1", Moment(10.0))
    assert pool.avoided_node_names(11.0) == ["n1", "worker-02"]
    assert pool.avoided_node_names(10_000.0) == []


def test_silent_nodes_and_unreachable_agents_are_the_tracker_s() -> None:
    pool, _ = warm_pool()
    pool.nodes.agent_unreachable(AgentRoute("n2", 4))
    assert pool.unreachable_agents() == ["n2"]
    assert pool.silent_nodes(Moment(0.0)) == pool.nodes.silent(0.0, 0.0)


def test_a_pool_is_depleting_below_the_threshold_of_its_idle_runners() -> None:
    pool, _ = warm_pool()
    pool.set_environment(OTHER)
    assert pool.depleting(0.5) == [3], "the other pool has no idle runner yet"
    pool.claim(10, 0, now=1.0)
    assert pool.depleting(0.5) == [3], "1 idle of 2 is not below half"
    assert pool.depleting(0.51) == [3, 10]


def test_ports_are_mapped_as_poseidon_s_api_maps_them() -> None:
    pool, ids = warm_pool()
    runner = pool.runners[ids[0]]
    runner.ports = (PortMapping(label="a", value=23001, to=8080, host_ip="10.0.0.1"),)
    assert runner.mapped_ports() == [{"exposedPort": 8080, "hostAddress": "10.0.0.1:23001"}]


def test_a_pool_depletes_below_the_share_of_idle_runners_and_one_of_size_0_never_does() -> None:
    assert not PoolStats(1, size=0, idle=0, used=0).is_depleting(0.5)
    assert PoolStats(1, size=1, idle=0, used=1).is_depleting(0.5)
    assert PoolStats(1, size=4, idle=1, used=3).is_depleting(0.5)
    assert not PoolStats(1, size=4, idle=2, used=2).is_depleting(0.5)


def test_a_runner_without_an_inactivity_timeout_never_expires_and_one_of_a_second_does() -> None:
    pool, _ = warm_pool()
    untimed, _ = pool.claim(10, 0, now=100.0)
    assert pool.expired(10_000.0) == []
    assert pool.next_expiry() is None
    timed, _ = pool.claim(10, 1, now=100.0)
    assert pool.next_expiry() == 101.0
    assert pool.expired(101.0) == [timed.id]
    pool.activity(timed.id, 100.0, working=1)
    assert pool.next_expiry() is None, "an execution works in it"
    assert untimed.id not in pool.expired(10_000.0)


def test_a_job_is_unknown_only_when_neither_a_runner_nor_removed() -> None:
    pool, ids = warm_pool()
    assert not pool.unknown(ids[0])
    pool.release(pool.claim(10, 0, now=1.0)[0].id)
    assert not pool.unknown(ids[0]), "removed: its tombstone stays"
    assert pool.unknown("10-never-seen")


def test_a_runner_is_found_by_its_id_and_counted_with_the_others_of_its_state() -> None:
    pool, ids = warm_pool()
    assert pool.runner(ids[0]) is pool.runners[ids[0]]
    assert pool.runner_counts() == {(10, RunnerState.IDLE): 2}


def test_a_used_runner_with_a_timeout_of_one_second_expires_a_second_after_its_last_use() -> None:
    pool, _ = warm_pool()
    runner, _ = pool.claim(10, 1, now=100.0)
    assert pool.inactivity_deadline(runner.id) == 101.0


def test_the_avoided_nodes_are_the_tracker_s_at_that_moment() -> None:
    pool, _ = warm_pool()
    pool.replace_nodes(
        [
            NodeListStub(id=f"n{i}", name=f"n{i}", status="ready", scheduling_eligibility="eligible")
            for i in range(1, 4)
        ],
        20,
    )
    pool.avoid("n2", Moment(10.0))
    assert pool.avoided_nodes(11.0) == ("n2",)
    assert pool.avoided_nodes(10_000.0) == ()


def test_a_tombstone_s_purge_keeps_its_floor_and_the_newest_index() -> None:
    assert Tombstone(5).purged(3) == Tombstone(5, 5), "never below the job's last sighting"
    assert Tombstone(5, 9).purged(7) == Tombstone(5, 9), "a purge confirmed again earlier moves nothing"
    assert Tombstone(5, 9).purged(12) == Tombstone(5, 12)
    assert Tombstone(0).purged(0) == Tombstone(0, 0)
