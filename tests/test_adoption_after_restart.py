"""A runner adopted by a listing at the start of a term, on a node whose agent registered again after
its client last wrote the runner's allocation: the restart happened before this process could see
it, and the servers list a container its agent came back without as running until its client says.
Such a runner is suspect, and probed, like one whose agent restarted before this process's eyes."""

from __future__ import annotations

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment, NodesListed, RunnerProven
from supervisor.core.nodes import NODE_EVENTS_KEPT, last_registration
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import ProbeRunner
from supervisor.nomad import AllocListStub, JobListStub, Node, NodeEvent, NodeListStub

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())
AT = Moment(0.0)
RUNNER = "10-00000000-0000-4000-8000-000000000001"


def _node(*events: tuple[str, int]) -> Node:
    return Node(id="node-1", events=[NodeEvent(message=m, create_index=i) for m, i in events])


def test_the_last_registration_is_read_from_the_node_events() -> None:
    assert last_registration(_node(("Node registered", 5), ("Node re-registered", 40), ("Drain", 41))) == 40
    assert last_registration(_node(("Node registered", 5), ("Node drain complete", 30))) == 5
    assert last_registration(_node(("Node heartbeat missed", 30))) == 0, "all its events are there"
    full = _node(*((f"Node drain {i}", 100 + i) for i in range(NODE_EVENTS_KEPT)))
    assert last_registration(full) == 100, "dropped: no older than the oldest kept"


def _adopting_pool(registered: int) -> RunnerPool:
    pool = RunnerPool()
    pool.set_environment(ENVIRONMENT)
    nodes = [NodeListStub(id="node-1", status="ready")]
    pool.handle(NodesListed(nodes, 60, {"node-1": registered}), AT)
    return pool


def _listed(written: int) -> tuple[list[JobListStub], list[AllocListStub]]:
    alloc = AllocListStub(
        id="a1",
        job_id=RUNNER,
        node_id="node-1",
        client_status="running",
        create_index=10,
        modify_index=written,
    )
    return [JobListStub(id=RUNNER, status="running", meta={"forcePull": "true"})], [alloc]


def test_a_runner_whose_client_wrote_before_its_agent_registered_again_is_probed_first() -> None:
    pool = _adopting_pool(registered=50)
    actions = pool.reconcile(*_listed(written=40), AT, index=60)
    assert ProbeRunner(RUNNER, "a1") in actions
    assert pool.stats()[10].idle == 0, "the servers' listing repeats what its client wrote before"
    pool.handle(RunnerProven(RUNNER, "a1"), AT)
    assert pool.stats()[10].idle == 1


def test_a_runner_whose_client_wrote_since_is_idle_at_once() -> None:
    pool = _adopting_pool(registered=50)
    actions = pool.reconcile(*_listed(written=55), AT, index=60)
    assert not any(isinstance(a, ProbeRunner) for a in actions)
    assert pool.stats()[10].idle == 1


def test_a_registration_newer_than_any_seen_is_a_restart_the_stream_missed() -> None:
    pool = _adopting_pool(registered=50)
    pool.reconcile(*_listed(written=55), AT, index=60)
    assert pool.stats()[10].idle == 1
    nodes = [NodeListStub(id="node-1", status="ready")]
    pool.handle(NodesListed(nodes, 70, {"node-1": 50}), AT)
    assert pool.stats()[10].idle == 1, "the same registration: nothing happened"
    pool.handle(NodesListed(nodes, 90, {"node-1": 80}), AT)
    assert pool.suspect_runners() == [RUNNER], "ready before and after, but its agent registered again"
    actions = pool.reconcile(*_listed(written=55), AT, index=90)
    assert ProbeRunner(RUNNER, "a1") in actions
