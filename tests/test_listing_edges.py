"""Orphan runner jobs at the edges: a job of an environment the pool knows, another system's job
listed first, and the tombstone an orphan's purge leaves. Plain sync tests on ``RunnerPool.orphans``."""

from __future__ import annotations

from supervisor.core.environments import MAX_AMOUNT, ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import (
    FOUND_BY_LISTING,
    FOUND_BY_NODE_RESTART,
    REASON_ALLOCATION_STOPPED,
    REASON_JOB_GONE,
    DestroyRunner,
    RunnerState,
    Tombstone,
)
from supervisor.nomad import AllocListStub, JobListStub, Node, NodeEvent

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 0, 100.0, 256, False, ())
UUID = "0f4c3a3e-5b6d-11ef-8a1e-0242ac120002"


def runner_job(environment_id: int, index: int = 30, uuid: str = UUID) -> JobListStub:
    return JobListStub(
        id=f"{environment_id}-{uuid}", meta={"environment": str(environment_id)}, modify_index=index
    )


def test_a_runner_job_of_an_environment_the_pool_knows_is_no_orphan_even_unknown_to_the_pool() -> None:
    pool = RunnerPool()
    pool.set_environment(ENVIRONMENT)
    assert pool.orphans([runner_job(10)]) == []
    assert pool.tombstones == {}


def test_another_system_s_job_listed_first_hides_no_orphan_after_it() -> None:
    pool = RunnerPool()
    theirs = JobListStub(id=f"7-{UUID}", meta={"environment": "web"})
    ours = runner_job(8, uuid="1f4c3a3e-5b6d-11ef-8a1e-0242ac120002")
    assert pool.orphans([theirs, ours]) == [DestroyRunner(ours.id, "its environment 8 does not exist")]


def test_an_orphan_s_tombstone_floor_is_its_last_sighting_or_the_last_listing() -> None:
    pool = RunnerPool()
    pool.orphans([runner_job(7, index=30)])
    assert pool.tombstones[f"7-{UUID}"] == Tombstone(30, None)
    pool.reconcile([], [], Moment(0.0), index=50)
    later = runner_job(8, index=40)
    pool.orphans([later])
    assert pool.tombstones[later.id] == Tombstone(50, None)


# -- a listing of runner jobs, reconciled: dead jobs, adopted ones, allocations no longer listed


def pool_with_environment() -> RunnerPool:
    pool = RunnerPool()
    pool.set_environment(ENVIRONMENT)
    return pool


def stub(job: JobListStub, alloc_id: str, index: int, status: str = "running") -> AllocListStub:
    return AllocListStub(
        id=alloc_id,
        job_id=job.id,
        node_id="n1",
        client_status=status,
        desired_status="run",
        create_index=index,
        modify_index=index,
    )


def test_a_dead_job_the_pool_did_not_know_is_destroyed_and_tombstoned_at_the_listing() -> None:
    pool = pool_with_environment()
    dead = JobListStub(id=f"10-{UUID}", status="dead", create_index=5, modify_index=6)
    assert pool.reconcile([dead], [], Moment(0.0), index=40) == [
        DestroyRunner(dead.id, "its Nomad job is dead")
    ]
    assert pool.tombstones[dead.id] == Tombstone(40)
    assert dead.id not in pool.runners


def test_a_dead_or_stopped_job_of_a_runner_ends_it_as_found_by_the_listing() -> None:
    pool = pool_with_environment()
    jobs = [JobListStub(id=f"10-{UUID}", status="running", create_index=5, modify_index=6)]
    pool.reconcile(jobs, [stub(jobs[0], "a1", 7)], Moment(0.0), index=10)
    assert jobs[0].id in pool.runners
    stopped = [JobListStub(id=jobs[0].id, status="running", stop=True, create_index=5, modify_index=20)]
    actions = pool.reconcile(stopped, [stub(jobs[0], "a1", 7)], Moment(0.0), index=30)
    assert DestroyRunner(jobs[0].id, REASON_JOB_GONE) in actions
    assert pool.found_gone_counts() == {FOUND_BY_LISTING: 1}


def test_a_dead_job_whose_allocation_still_lives_is_adopted() -> None:
    pool = pool_with_environment()
    dead = JobListStub(id=f"10-{UUID}", status="dead", create_index=5, modify_index=6)
    pool.reconcile([dead], [stub(dead, "a1", 7)], Moment(0.0), index=40)
    assert pool.runners[dead.id].state is RunnerState.IDLE


def test_an_adopted_claim_keeps_its_timeout_and_starts_its_clock_at_the_listing() -> None:
    pool = pool_with_environment()
    jobs = [
        JobListStub(id=f"10-{UUID}", meta={"used": "true", "timeout": "30"}, create_index=0),
        JobListStub(id=f"10-1{UUID[1:]}", meta={"used": "true", "timeout": "soon"}, create_index=8),
        JobListStub(id=f"10-2{UUID[1:]}", meta={"used": "true", "timeout": str(2**40)}, create_index=8),
        JobListStub(id=f"10-3{UUID[1:]}", meta={"used": "false"}, create_index=8),
    ]
    pool.reconcile(jobs, [], Moment(77.0), index=40)
    first, unparsed, huge, idle = (pool.runners[job.id] for job in jobs)
    assert (first.state, first.inactivity_timeout, first.last_activity) == (RunnerState.USED, 30.0, 77.0)
    assert first.registered_index == 1, "known to exist, even at index 0"
    assert unparsed.inactivity_timeout == 60.0
    assert huge.inactivity_timeout == float(MAX_AMOUNT)
    assert (idle.state, idle.inactivity_timeout, idle.registered_index) == (RunnerState.STARTING, 0.0, 8)


def test_a_runner_whose_allocation_a_listing_no_longer_shows_has_stopped() -> None:
    pool = pool_with_environment()
    jobs = [JobListStub(id=f"10-{UUID}", create_index=5, modify_index=6)]
    pool.reconcile(jobs, [stub(jobs[0], "a1", 7)], Moment(0.0), index=10)
    assert pool.reconcile(jobs, [], Moment(0.0), index=6) == [], "an older listing is ignored"
    actions = pool.reconcile(jobs, [], Moment(0.0), index=20)
    assert DestroyRunner(jobs[0].id, REASON_ALLOCATION_STOPPED) in actions
    assert pool.found_gone_counts() == {FOUND_BY_LISTING: 1}


def test_a_suspect_runner_missing_from_a_listing_was_found_by_its_node_s_restart() -> None:
    pool = pool_with_environment()
    jobs = [JobListStub(id=f"10-{UUID}", create_index=5, modify_index=6)]
    pool.reconcile(jobs, [stub(jobs[0], "a1", 7)], Moment(0.0), index=10)
    again = Node(
        id="n1", status="initializing", events=[NodeEvent(message="Node re-registered")], modify_index=40
    )
    pool.apply_node("NodeRegistration", again, 40)
    pool.reconcile([], [], Moment(0.0), index=50)
    assert pool.found_gone_counts() == {FOUND_BY_NODE_RESTART: 1}


def test_a_removed_runner_s_job_listed_at_its_purge_s_index_is_destroyed_again() -> None:
    pool = pool_with_environment()
    jobs = [JobListStub(id=f"10-{UUID}", create_index=5, modify_index=6)]
    pool.reconcile(jobs, [stub(jobs[0], "a1", 7)], Moment(0.0), index=10)
    pool.destroy(jobs[0].id, "gone")
    pool.purged(jobs[0].id, 30)
    assert pool.reconcile(jobs, [], Moment(0.0), index=29) == []
    actions = pool.reconcile(jobs, [], Moment(0.0), index=30)
    assert DestroyRunner(jobs[0].id, "a removed runner's job outlived its purge") in actions
    assert pool.tombstones[jobs[0].id] == Tombstone(30)
