"""The runner pool's decisions, as plain synchronous tests: typed Nomad objects in, actions out."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from supervisor.base.errors import NoIdleRunner, RunnerGoneError, UnknownEnvironment
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment, RunnerProven
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import (
    REASON_ALLOCATION_UNKNOWN,
    REASON_DESTROYED,
    REASON_REPLACED,
    CreateRunner,
    DestroyRunner,
    MarkUsed,
    PoolStats,
    ProbeRunner,
    RelistWanted,
    RunnerGone,
    RunnerState,
)
from supervisor.nomad import Allocation, AllocListStub, JobListStub, Node, NodeEvent, NodeListStub

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())

# The moment facts are applied at, where time does not matter.
AT = Moment(0.0)


def alloc(job_id: str, alloc_id: str, status: str, index: int, **fields: Any) -> Allocation:
    return Allocation(
        id=alloc_id,
        job_id=job_id,
        client_status=status,
        desired_status=fields.pop("desired", "run"),
        create_index=fields.pop("created", index),
        modify_index=index,
        node_id=fields.pop("node_id", "node-1"),
        **fields,
    )


def warm_pool() -> tuple[RunnerPool, list[str]]:
    pool = RunnerPool()
    created, actions = pool.set_environment(ENVIRONMENT)
    assert created
    ids = [a.runner_id for a in actions if isinstance(a, CreateRunner)]
    for i, runner_id in enumerate(ids):
        pool.registered(runner_id, 5)
        pool.apply_allocation(alloc(runner_id, f"a{i}", "running", 10 + i), AT)
    return pool, ids


def test_new_environment_creates_its_pool_and_runners_start_idle_only_when_running() -> None:
    pool = RunnerPool()
    _, actions = pool.set_environment(ENVIRONMENT)
    assert [type(a) for a in actions] == [CreateRunner, CreateRunner]
    runner_id = actions[0].runner_id  # type: ignore[union-attr]
    assert runner_id.startswith("10-")
    pool.apply_allocation(alloc(runner_id, "a1", "pending", 5), AT)
    assert pool.runners[runner_id].state is RunnerState.STARTING
    with pytest.raises(NoIdleRunner):
        pool.claim(10, 0, now=0)
    pool.apply_allocation(alloc(runner_id, "a1", "running", 6), AT)
    assert pool.stats()[10] == PoolStats(environment_id=10, size=2, idle=1, used=0)


def test_claim_marks_used_and_orders_a_replacement() -> None:
    pool, ids = warm_pool()
    runner, actions = pool.claim(10, 60, now=100.0)
    assert runner.id == ids[0], "the oldest idle runner"
    assert runner.state is RunnerState.USED
    assert actions[0] == MarkUsed(runner.id, ENVIRONMENT, 60, force_pull=True), "as it was created"
    assert isinstance(actions[1], CreateRunner)
    with pytest.raises(UnknownEnvironment):
        pool.claim(99, 0, now=0)


def test_replayed_and_duplicated_events_change_nothing() -> None:
    pool, _ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    stale_pending = alloc(runner.id, "a0", "pending", 3)
    assert pool.apply_allocation(stale_pending, AT) == [], "older than what was applied"
    assert pool.apply_allocation(alloc(runner.id, "a0", "running", 10), AT) == [], "the same state again"
    assert pool.used_runner(runner.id) is runner


def test_used_runner_whose_allocation_is_replaced_is_gone_and_destroyed() -> None:
    pool, _ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    replacement = alloc(runner.id, "b0", "pending", 30, raw={"PreviousAllocation": "a0"})
    actions = pool.apply_allocation(replacement, AT)
    assert RunnerGone(runner.id, REASON_REPLACED) in actions
    assert DestroyRunner(runner.id, REASON_REPLACED) in actions
    assert pool.used_runner(runner.id) is None
    warm = [r for r in pool.runners.values() if r.state is not RunnerState.USED]
    assert len(warm) == 2, "the pool stays full: the claim ordered its replacement already"


def test_idle_runner_follows_its_replacement_allocation() -> None:
    pool, ids = warm_pool()
    moved = ids[1]
    lost = alloc(moved, "a1", "lost", 40, desired="stop", created=11, next_allocation="c1")
    assert pool.apply_allocation(lost, AT) == []
    assert pool.runners[moved].state is RunnerState.STARTING, "not handed out while it moves"
    pool.apply_allocation(alloc(moved, "c1", "running", 42, raw={"PreviousAllocation": "a1"}), AT)
    assert pool.runners[moved].state is RunnerState.IDLE
    assert pool.runners[moved].alloc_id == "c1"


def test_reconcile_updates_in_place_and_adopts_claims_from_meta() -> None:
    pool, ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    foreign = "10-5d7c7a8e-7d4e-11ef-9c3a-0242ac120002"
    jobs = [
        JobListStub(id=ids[0], status="running", meta={"used": "true"}),
        JobListStub(id=ids[1], status="running"),
        JobListStub(id=foreign, status="running", meta={"used": "true", "timeout": "30"}),
        JobListStub(id="template-10", status="dead"),
    ]
    allocs = [
        AllocListStub(
            id="a0",
            job_id=ids[0],
            client_status="running",
            node_id="node-2",
            create_index=10,
            modify_index=50,
        ),
        AllocListStub(id="a1", job_id=ids[1], client_status="running", create_index=11, modify_index=11),
        AllocListStub(id="f0", job_id=foreign, client_status="running", create_index=12, modify_index=12),
    ]
    actions = pool.reconcile(jobs, allocs, Moment(5.0), index=100)
    assert pool.runners[runner.id] is runner, "the same object: running executions keep it"
    assert runner.node_id == "node-2", "updated in place"
    adopted = pool.used_runner(foreign)
    assert adopted is not None, "a claim made before a restart is known again"
    assert adopted.inactivity_timeout == 30
    assert not any(isinstance(a, DestroyRunner) for a in actions)


def test_reconcile_destroys_dead_jobs_and_forgets_vanished_ones() -> None:
    pool, ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    jobs = [JobListStub(id=ids[0], status="dead")]
    actions = pool.reconcile(jobs, [], Moment(1.0), index=100)
    assert any(isinstance(a, RunnerGone) and a.runner_id == runner.id for a in actions)
    assert DestroyRunner(ids[1], "the runner's Nomad job is gone") not in actions, (
        "it vanished: nothing to destroy"
    )
    assert ids[1] not in pool.runners
    assert sum(isinstance(a, CreateRunner) for a in actions) == 1, "one more joins the claim's replacement"
    assert len(pool.runners) == 2


def test_release_destroys_and_replaced_environment_retires_used_runners() -> None:
    pool, ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    _, actions = pool.set_environment(ExecutionEnvironment(10, "python:3.13", 2, 100.0, 256, False, ()))
    assert DestroyRunner(ids[1], "the execution environment changed") in actions
    assert sum(isinstance(a, CreateRunner) for a in actions) == 2, "a used runner is never warm"
    assert pool.used_runner(runner.id) is runner, "a running execution is not killed by an update"
    assert runner.retired
    assert runner.environment == ENVIRONMENT, "its job keeps the spec it runs"
    assert DestroyRunner(runner.id, REASON_DESTROYED) in pool.release(runner.id)
    with pytest.raises(RunnerGoneError):
        pool.release(runner.id)


def test_inactivity_expiry_waits_for_running_executions() -> None:
    pool, _ = warm_pool()
    runner, _ = pool.claim(10, 10, now=100.0)
    assert pool.next_expiry() == 110.0
    assert pool.expired(109.0) == []
    runner.executions = 1
    assert pool.expired(200.0) == [], "never while an execution runs"
    runner.executions = 0
    assert pool.expired(200.0) == [runner.id]


def test_a_runner_is_expired_at_the_very_deadline_next_expiry_gives() -> None:
    # 60.511 + 5 rounds down: now - last_activity at the deadline is 4.999...; the expiry woken at
    # next_expiry() found nothing expired and spun (seed 1 of the deterministic simulation).
    pool, _ = warm_pool()
    runner, _ = pool.claim(10, 5, now=60.511)
    deadline = pool.next_expiry()
    assert deadline is not None
    assert deadline - 60.511 < 5
    assert pool.expired(deadline) == [runner.id]


def test_a_runner_registered_after_the_listing_is_not_gone() -> None:
    pool, ids = warm_pool()
    _, actions = pool.claim(10, 0, now=0)
    fresh = next(a.runner_id for a in actions if isinstance(a, CreateRunner))
    pool.registered(fresh, 200)
    jobs = [JobListStub(id=i, status="running") for i in ids]
    allocs = [
        AllocListStub(id=f"a{i}", job_id=r, client_status="running", create_index=10 + i, modify_index=10 + i)
        for i, r in enumerate(ids)
    ]
    pool.reconcile(jobs, allocs, Moment(1.0), index=150)
    assert fresh in pool.runners, "registered at 200, after the listing at 150"
    pool.reconcile(jobs, allocs, Moment(2.0), index=250)
    assert fresh not in pool.runners, "missing from a listing taken after its registration: gone"


def node(status: str = "ready", *, drain: bool = False, message: str = "Node registered") -> Node:
    return Node(
        id="node-1", name="worker-01", status=status, drain=drain, events=[NodeEvent(message=message)]
    )


def test_a_draining_node_takes_nothing_new() -> None:
    pool, ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    actions = pool.apply_node("NodeDrain", node(drain=True), 60)
    idle_left = [r for r in ids if r != runner.id]
    assert DestroyRunner(idle_left[0], "its node is draining") in actions, "idle runners there are replaced"
    assert sum(isinstance(a, CreateRunner) for a in actions) >= 1
    assert pool.used_runner(runner.id) is runner, "its running executions go on"
    assert pool.serving_runner(runner.id) is None, "but nothing new starts on it"
    assert pool.apply_node("NodeDrain", node(drain=True), 61) == [], "idempotent"
    assert pool.replace_nodes([NodeListStub(id="node-1", status="ready")], 70) == []
    assert not pool.nodes.draining("node-1")
    assert DestroyRunner(runner.id, REASON_DESTROYED) in pool.release(runner.id), (
        "its client can still release it"
    )


def listing(pool: RunnerPool, ids: list[str]) -> tuple[list[JobListStub], list[AllocListStub]]:
    """What Nomad lists for ``ids``: their jobs, and their running allocations as warm_pool placed them."""
    jobs = [JobListStub(id=runner_id, status="running") for runner_id in ids]
    allocs = [
        AllocListStub(id=f"a{i}", job_id=r, client_status="running", create_index=10 + i, modify_index=10 + i)
        for i, r in enumerate(ids)
    ]
    return jobs, allocs


def test_a_listing_taken_before_a_release_never_brings_the_runner_back() -> None:
    pool, ids = warm_pool()
    stale_jobs, stale_allocs = listing(pool, ids)  # taken at index 20
    runner, _ = pool.claim(10, 0, now=0)
    assert DestroyRunner(runner.id, REASON_DESTROYED) in pool.release(runner.id)
    actions = pool.reconcile(stale_jobs, stale_allocs, Moment(1.0), index=20)
    assert runner.id not in pool.runners, "a released runner is gone for good"
    assert all(getattr(a, "runner_id", None) != runner.id for a in actions)
    handed_out = [pool.claim(10, 0, now=2.0)[0].id for _ in range(pool.stats()[10].idle)]
    assert handed_out, "the other runner is still idle"
    assert runner.id not in handed_out


def test_a_tombstone_stays_until_a_listing_after_the_purge_no_longer_shows_the_job() -> None:
    pool, ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    pool.release(runner.id)
    jobs, allocs = listing(pool, ids)
    assert pool.tombstones[runner.id].gone_at is None, "its purge is under way"
    pool.reconcile(jobs, allocs, Moment(1.0), index=22)
    assert runner.id not in pool.runners, "while the purge is under way, any listing is stale"
    pool.purged(runner.id, 30)
    assert pool.reconcile(jobs, allocs, Moment(1.0), index=25) == []
    assert runner.id not in pool.runners
    assert pool.tombstones[runner.id].gone_at == 30, "a listing before the purge keeps the tombstone"
    outlived = pool.reconcile(jobs, allocs, Moment(1.0), index=40)
    assert DestroyRunner(runner.id, "a removed runner's job outlived its purge") in outlived
    assert runner.id not in pool.runners
    pool.purged(runner.id, 45)
    without = [j for j in jobs if j.id != runner.id]
    pool.reconcile(without, allocs, Moment(2.0), index=44)
    assert runner.id in pool.tombstones, "taken before the second purge"
    pool.reconcile(without, allocs, Moment(2.0), index=45)
    assert pool.tombstones == {}, "dropped: memory stays bounded"


def test_a_runner_whose_allocation_is_no_longer_listed_as_live_has_ended() -> None:
    pool, ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    idle = next(r for r in ids if r != runner.id)
    jobs, _allocs = listing(pool, ids)
    actions = pool.reconcile(jobs, [], Moment(1.0), index=100)
    assert RunnerGone(runner.id, "the allocation stopped") in actions
    assert DestroyRunner(idle, "the allocation stopped") in actions, "an idle runner is replaced"
    assert idle not in pool.runners
    fresh = next(a.runner_id for a in actions if isinstance(a, CreateRunner))
    pool.registered(fresh, 150)
    pool.apply_allocation(alloc(fresh, "n1", "running", 160), AT)
    assert pool.reconcile([*jobs, JobListStub(id=fresh, status="running")], [], Moment(2.0), index=155) == []
    assert pool.runners[fresh].state is RunnerState.IDLE, "placed after the listing: not judged by it"


def test_a_listing_older_than_one_reconciled_before_is_ignored() -> None:
    pool, ids = warm_pool()
    jobs, allocs = listing(pool, ids)
    pool.reconcile(jobs, allocs, Moment(1.0), index=50)
    assert pool.reconcile([], [], Moment(2.0), index=49) == []
    assert set(ids) <= set(pool.runners), "nothing vanished by a listing older than the last one"
    assert pool.listed_index == 50


def test_a_purge_of_a_job_nomad_no_longer_knew_keeps_the_tombstone_above_the_job_s_last_sighting() -> None:
    pool, _ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    pool.release(runner.id)
    pool.purged(runner.id, 0)  # the job had vanished already: Nomad answers index 0
    assert pool.tombstones[runner.id].gone_at == 10, "its allocation was seen running at index 10"
    pool.reconcile([], [], Moment(1.0), index=5)
    assert runner.id in pool.tombstones, "a listing from before the job existed proves nothing"


def test_an_agent_restart_makes_its_runners_suspect_until_a_probe_after_its_return_proves_them() -> None:
    pool, ids = warm_pool()
    pool.replace_nodes([NodeListStub(id="node-1", status="ready")], 15)
    assert pool.apply_node("NodeRegistration", node("initializing", message="Node re-registered"), 40) == []
    assert pool.stats()[10].idle == 0, "suspect runners are not idle"
    with pytest.raises(NoIdleRunner):
        pool.claim(10, 0, now=0)
    jobs, allocs = listing(pool, ids)
    assert pool.reconcile(jobs, allocs, Moment(1.0), index=41) == []
    assert pool.stats()[10].idle == 0, "the node is still initializing: proves nothing"
    assert pool.apply_node("NodeStreamEvent", node("ready"), 42) == [RelistWanted("an agent restarted")]
    actions = pool.reconcile(jobs[:1], allocs[:1], Moment(1.0), index=41)
    probe = ProbeRunner(ids[0], allocs[0].id)
    assert probe in actions, "listed running after its return, whatever the index of the jobs table"
    assert pool.stats()[10].idle == 0, "the listing repeats what the servers knew: it proves nothing"
    pool.handle(RunnerProven(ids[0], "another allocation"), AT)
    assert pool.stats()[10].idle == 0, "a proof of another allocation proves nothing"
    pool.handle(RunnerProven(ids[0], allocs[0].id), AT)
    assert pool.stats()[10].idle == 1, "a command ran in it"
    assert DestroyRunner(ids[1], "the runner's Nomad job is gone") not in actions, "it vanished with its job"
    assert ids[1] not in pool.runners
    assert pool.found_gone == {"node restart": 1}
    assert sum(isinstance(a, CreateRunner) for a in actions) == 1, "replaced"


def test_a_server_side_update_of_the_allocation_proves_nothing_of_its_agent() -> None:
    """An in-place update (a claim's write) changes the allocation on the servers alone: its
    AllocModifyIndex moves with its ModifyIndex. Only a change of its client's proves the runner."""
    pool, ids = warm_pool()
    pool.apply_node("NodeRegistration", node("initializing", message="Node re-registered"), 40)
    pool.apply_allocation(alloc(ids[0], "a0", "running", 45, created=10, raw={"AllocModifyIndex": 45}), AT)
    assert pool.runners[ids[0]].suspect_since == 40, "the servers' write says nothing of the agent"
    pool.apply_allocation(alloc(ids[0], "a0", "running", 46, created=10, raw={"AllocModifyIndex": 45}), AT)
    assert pool.runners[ids[0]].suspect_since == 0, "its client wrote after the restart"


def test_an_allocation_update_newer_than_the_restart_proves_a_runner() -> None:
    pool, ids = warm_pool()
    pool.apply_node("NodeRegistration", node("initializing", message="Node re-registered"), 40)
    pool.apply_allocation(alloc(ids[0], "a0", "running", 39), AT)
    assert pool.stats()[10].idle == 0, "older than the restart"
    pool.apply_allocation(alloc(ids[0], "a0", "running", 45, created=10), AT)
    assert pool.stats()[10].idle == 1
    assert pool.runners[ids[0]].suspect_since == 0


def test_an_exec_refused_for_an_unknown_allocation_is_evidence_of_loss() -> None:
    pool, _ids = warm_pool()
    runner, _ = pool.claim(10, 0, now=0)
    actions = pool.lost(runner.id, REASON_ALLOCATION_UNKNOWN)
    assert RunnerGone(runner.id, REASON_ALLOCATION_UNKNOWN) in actions
    assert DestroyRunner(runner.id, REASON_ALLOCATION_UNKNOWN) in actions
    assert RelistWanted(REASON_ALLOCATION_UNKNOWN) in actions
    assert pool.used_runner(runner.id) is None
    assert pool.found_gone == {"exec refusal": 1}


def test_only_our_runner_jobs_of_a_vanished_environment_are_orphans() -> None:
    pool = RunnerPool()
    ours = JobListStub(id=f"7-{uuid.uuid4()}", meta={"environment": "7", "used": "false"})
    theirs = JobListStub(id=f"7-{uuid.uuid4()}", meta={})
    actions = pool.orphans([ours, theirs, JobListStub(id="web-frontend")])
    assert [a.runner_id for a in actions if isinstance(a, DestroyRunner)] == [ours.id]
    assert pool.orphans([ours]) == [], "its purge is ordered once"
