"""Orphan runner jobs at the edges: a job of an environment the pool knows, another system's job
listed first, and the tombstone an orphan's purge leaves. Plain sync tests on ``RunnerPool.orphans``."""

from __future__ import annotations

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import DestroyRunner, Tombstone
from supervisor.nomad import JobListStub

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
