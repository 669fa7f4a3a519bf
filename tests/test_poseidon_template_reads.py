"""The environment store reads Poseidon's template jobs: one GET each, again only when the job
changed (its ModifyIndex), a template that holds no environment told once, and ours (meta) read
without a GET, winning over the fields. Plain trio tests with a Nomad double, no time passes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from loguru import logger

from supervisor.base.errors import NomadUnavailableError
from supervisor.core.environments import ExecutionEnvironment, template_job
from supervisor.core.evidence import Moment
from supervisor.core.orders import Change
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import Action
from supervisor.dst.poseidon_jobs import poseidon_template_job
from supervisor.effects.environment_store import EnvironmentStore
from supervisor.nomad import Indexed, Job, JobListStub
from supervisor.nomad.decode import structure
from supervisor.nomad.models import JobDeregisterResponse, JobRegisterResponse

from .nomad_double import NomadDouble

POSEIDONS: dict[str, Any] = {
    "id": 3,
    "image": "openhpi/co_execenv_java:17",
    "prewarmingPoolSize": 4,
    "cpuLimit": 30,
    "memoryLimit": 512,
    "networkAccess": False,
    "exposedPorts": [],
}


class _Templates(NomadDouble):
    """Template jobs in a dict, each with its ModifyIndex; GETs counted."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, tuple[dict[str, Any], int]] = {}
        self.reads: list[str] = []

    async def list_jobs(
        self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
    ) -> Indexed[list[JobListStub]]:
        stubs = [
            JobListStub(id=job_id, meta=dict(job.get("Meta") or {}), modify_index=index)
            for job_id, (job, index) in self.jobs.items()
            if job_id.startswith(prefix)
        ]
        return Indexed(stubs, 1)

    async def read_job(self, job_id: str) -> Indexed[dict[str, Any]]:
        job, index = self.jobs[job_id]
        return Indexed({**job, "ModifyIndex": index, "Status": "running"}, index)

    async def get_job(self, job_id: str) -> Indexed[Job]:
        self.reads.append(job_id)
        job, index = self.jobs[job_id]
        return Indexed(structure({**job, "ModifyIndex": index}, Job), index)


def _store(nomad: _Templates) -> tuple[EnvironmentStore, RunnerPool]:
    pool = RunnerPool()

    def tell(change: Change) -> list[Action]:
        return pool.handle(change, Moment(0.0))

    return EnvironmentStore(nomad, pool.view, tell), pool


async def test_poseidons_template_is_read_once_per_change() -> None:
    nomad = _Templates()
    nomad.jobs["template-3"] = (poseidon_template_job(POSEIDONS), 20)
    store, pool = _store(nomad)
    await store.load()
    await store.load()
    assert nomad.reads == ["template-3"]
    assert pool.environments[3] == ExecutionEnvironment(3, "openhpi/co_execenv_java:17", 4, 30.0, 512, False)
    nomad.jobs["template-3"] = (poseidon_template_job({**POSEIDONS, "prewarmingPoolSize": 1}), 25)
    await store.load()
    assert nomad.reads == ["template-3", "template-3"]
    assert pool.environments[3].prewarming_pool_size == 1


async def test_a_template_that_holds_no_environment_is_told_once() -> None:
    nomad = _Templates()
    nomad.jobs["template-3"] = (poseidon_template_job({**POSEIDONS, "image": ""}), 20)
    store, pool = _store(nomad)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
    try:
        for _ in range(3):
            await store.load()
    finally:
        logger.remove(sink)
    assert nomad.reads == ["template-3"]
    assert 3 not in pool.environments
    assert len(warnings) == 1
    assert "template-3" in warnings[0]
    assert "image must be a non-empty string" in warnings[0]


async def test_our_meta_wins_and_needs_no_read() -> None:
    ours = ExecutionEnvironment(3, "python:3.12", 2, 0.5, 256, True, (8080,))
    nomad = _Templates()
    nomad.jobs["template-3"] = (template_job(ours), 20)
    store, pool = _store(nomad)
    await store.load()
    assert nomad.reads == []
    assert pool.environments[3].cpu_limit == 0.5  # the fields say 1 MHz: the meta is exact


async def test_other_jobs_named_template_are_not_read() -> None:
    nomad = _Templates()
    nomad.jobs["template-3-old"] = (poseidon_template_job(POSEIDONS), 20)
    store, pool = _store(nomad)
    await store.load()
    assert nomad.reads == []
    assert pool.environments == {}


async def test_fetch_reads_poseidons_template() -> None:
    nomad = _Templates()
    nomad.jobs["template-3"] = (poseidon_template_job(POSEIDONS), 20)
    store, pool = _store(nomad)
    environment = await store.fetch(3)
    assert environment is not None
    assert environment.image == "openhpi/co_execenv_java:17"
    assert 3 in pool.environments


class _Refusing(_Templates):
    """Refuses a registration that changes a job's type, as Nomad does (a 500)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str]] = []

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        known = self.jobs.get(job["ID"])
        if known is not None and known[0]["Type"] != job["Type"]:
            body = f'cannot update job from type "{known[0]["Type"]}" to "{job["Type"]}"'
            raise NomadUnavailableError("register", status_code=500, body=body)
        self.writes.append(("register", job["ID"]))
        self.jobs[job["ID"]] = (dict(job), 30)
        return JobRegisterResponse(index=30)

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        self.writes.append(("purge" if purge else "stop", job_id))
        self.jobs.pop(job_id, None)
        return JobDeregisterResponse(index=31)


@pytest.mark.parametrize("listed_first", [True, False])
async def test_a_put_over_poseidons_template_purges_it_first(listed_first: bool) -> None:
    """Known from a listing, Poseidon's template is purged before ours is registered; not yet
    listed, Nomad's refusal of the type change says so, and the same follows."""
    nomad = _Refusing()
    nomad.jobs["template-3"] = (poseidon_template_job(POSEIDONS), 20)
    store, pool = _store(nomad)
    if listed_first:
        await store.load()
    ours = ExecutionEnvironment(3, "openhpi/co_execenv_java:21", 4, 30.0, 512, False)
    await store.put(ours)
    assert nomad.writes == [("purge", "template-3"), ("register", "template-3")]
    assert nomad.jobs["template-3"][0]["Type"] == "service"
    assert pool.environments[3] == ours


async def test_another_refusal_of_the_template_is_no_type_change() -> None:
    nomad = _Refusing()
    store, _ = _store(nomad)

    async def refuse(job: Mapping[str, Any]) -> JobRegisterResponse:
        raise NomadUnavailableError("register", status_code=500, body="rpc error: no leader")

    nomad.register_job = refuse  # type: ignore[method-assign]
    with pytest.raises(NomadUnavailableError, match="no leader"):
        await store.put(ExecutionEnvironment(3, "python:3.12", 1, 1.0, 256, False))
    assert nomad.writes == []


class _FailingOnce(_Refusing):
    """Fails the first registration of ours after a purge, as a Nomad without a leader does."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next_service = True

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        if job["Type"] == "service" and self.fail_next_service:
            self.fail_next_service = False
            raise NomadUnavailableError("register", status_code=500, body="rpc error: no leader")
        return await super().register_job(job)


async def test_a_failed_registration_after_the_purge_brings_poseidons_template_back() -> None:
    nomad = _FailingOnce()
    nomad.jobs["template-3"] = (poseidon_template_job(POSEIDONS), 20)
    store, pool = _store(nomad)
    await store.load()
    known = pool.environments[3]
    ours = ExecutionEnvironment(3, "openhpi/co_execenv_java:21", 4, 30.0, 512, False)
    with pytest.raises(NomadUnavailableError, match="no leader"):
        await store.put(ours)
    assert nomad.writes == [("purge", "template-3"), ("register", "template-3")]
    restored = nomad.jobs["template-3"][0]
    assert restored["Type"] == "batch", "Poseidon's own job, as it was read"
    assert restored["TaskGroups"] == poseidon_template_job(POSEIDONS)["TaskGroups"]
    assert pool.environments[3] == known, "a refused PUT changes nothing"
    await store.put(ours)  # the client tries again
    assert nomad.jobs["template-3"][0]["Type"] == "service"
    assert pool.environments[3] == ours


class _Flaky(_Templates):
    """Its next GET of a job fails as a Nomad server without a leader answers."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    async def get_job(self, job_id: str) -> Indexed[Job]:
        if self.failing:
            self.reads.append(job_id)
            raise NomadUnavailableError("read", status_code=500, body="rpc error: no leader")
        return await super().get_job(job_id)


async def test_a_template_that_cannot_be_read_now_fails_no_listing() -> None:
    nomad = _Flaky()
    nomad.jobs["template-3"] = (poseidon_template_job(POSEIDONS), 20)
    nomad.jobs["template-4"] = (poseidon_template_job({**POSEIDONS, "id": 4}), 21)
    store, pool = _store(nomad)
    await store.load()
    nomad.jobs["template-3"] = (poseidon_template_job({**POSEIDONS, "prewarmingPoolSize": 1}), 25)
    nomad.failing = True
    await store.load()  # no error: template-4 needs no read, template-3's read fails
    assert pool.environments[3].prewarming_pool_size == 4, "kept as the pool knew it"
    nomad.failing = False
    await store.load()
    assert pool.environments[3].prewarming_pool_size == 1, "read again once it can be"
    assert set(pool.environments) == {3, 4}
