"""Environment writes against reads and each other, with Nomad's answers held back at chosen points.

Whatever the interleaving, the pool and Nomad end up agreeing: an environment is in the pool exactly
when its template job is in Nomad.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from supervisor.base.entropy import Entropy
from supervisor.base.errors import NomadNotFound, NomadUnavailableError
from supervisor.core.config import Settings
from supervisor.core.environments import (
    TEMPLATE_PREFIX,
    ExecutionEnvironment,
    claim_meta,
    new_runner_id,
    runner_job,
    template_job,
)
from supervisor.core.runners import Action, CreateRunner, DestroyRunner
from supervisor.desk.service import RunnerService
from supervisor.dst.poseidon_jobs import claimed_by_poseidon, poseidon_runner_job, poseidon_template_job
from supervisor.nomad.client import Indexed
from supervisor.nomad.models import (
    AllocListStub,
    Job,
    JobDeregisterResponse,
    JobListStub,
    JobRegisterResponse,
)

from .nomad_double import NomadDouble

ENVIRONMENT = ExecutionEnvironment(7, "python:3.12", 1, 100.0, 256, False, ())
TEMPLATE = f"{TEMPLATE_PREFIX}7"


def _claimed(job: Mapping[str, Any]) -> bool:
    return claim_meta(job).get("used") == "true"


class _GatedNomad(NomadDouble):
    """Jobs in a dict; a call named in ``gates`` stops there until its gate is set."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, dict[str, Any]] = {}
        # Jobs a claim's write created (it landed after the job was gone): claimed, never updated.
        self.created_claimed: set[str] = set()
        self.gates: dict[str, trio.Event] = {}
        self.reached: dict[str, trio.Event] = {}

    def hold(self, call: str) -> trio.Event:
        self.reached[call] = trio.Event()
        self.gates[call] = trio.Event()
        return self.gates[call]

    async def _gate(self, call: str) -> None:
        if call in self.gates:
            self.reached[call].set()
            await self.gates.pop(call).wait()

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        await self._gate("register")
        self.jobs[job["ID"]] = dict(job)
        return JobRegisterResponse(index=1)

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        await self._gate("deregister")
        self.jobs.pop(job_id, None)
        return JobDeregisterResponse()

    async def list_jobs(
        self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
    ) -> Indexed[list[JobListStub]]:
        listing = [
            # A claimed runner's job was updated after its registration: the claim's write.
            JobListStub(
                id=i, meta=j.get("Meta") or {}, create_index=1, job_modify_index=1 + self._updated(i, j)
            )
            for i, j in self.jobs.items()
            if i.startswith(prefix)
        ]
        await self._gate("list")  # the listing was taken before the answer is held back
        return Indexed(listing, 10)

    def _updated(self, job_id: str, job: Mapping[str, Any]) -> bool:
        return _claimed(job) and job_id not in self.created_claimed

    async def get_job(self, job_id: str) -> Indexed[Job]:
        if job_id not in self.jobs:
            raise NomadNotFound(f"job {job_id} not found", status_code=404)
        job = self.jobs[job_id]
        return Indexed(Job(id=job_id, meta=job.get("Meta") or {}, raw_task_groups=job["TaskGroups"]), 10)

    async def read_job(self, job_id: str) -> Indexed[dict[str, Any]]:
        if job_id not in self.jobs:
            raise NomadNotFound(f"job {job_id} not found", status_code=404)
        return Indexed(dict(self.jobs[job_id]), 10)

    async def list_nodes(self) -> Indexed[list[Any]]:
        return Indexed([], 10)

    async def list_allocations(self, **_options: object) -> Indexed[list[Any]]:
        return Indexed([], 10)


def _service(nomad: _GatedNomad, nursery: trio.Nursery) -> RunnerService:
    return RunnerService(nomad, Settings(), execution_nursery=nursery)


def _agree(service: RunnerService, nomad: _GatedNomad) -> bool:
    return (ENVIRONMENT.id in service.pool.environments) == (TEMPLATE in nomad.jobs)


@pytest.mark.parametrize("read", ["relist", "load"])
async def test_a_listing_answered_before_a_delete_does_not_bring_the_environment_back(
    read: str, nursery: trio.Nursery
) -> None:
    nomad = _GatedNomad()
    service = _service(nomad, nursery)
    await service.environments.put(ENVIRONMENT)
    release = nomad.hold("list")
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.informer.relist if read == "relist" else service.environments.load)
            await nomad.reached["list"].wait()
            nursery.start_soon(service.environments.delete, ENVIRONMENT.id)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    assert ENVIRONMENT.id not in service.pool.environments
    assert _agree(service, nomad)


async def test_an_update_and_a_delete_at_once_leave_the_pool_and_nomad_agreeing(
    nursery: trio.Nursery,
) -> None:
    nomad = _GatedNomad()
    service = _service(nomad, nursery)
    await service.environments.put(ENVIRONMENT)
    registered, deregistered = nomad.hold("register"), nomad.hold("deregister")
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.environments.put, attrs.evolve(ENVIRONMENT, prewarming_pool_size=3))
            await nomad.reached["register"].wait()
            nursery.start_soon(service.environments.delete, ENVIRONMENT.id)
            await trio.testing.wait_all_tasks_blocked()
            registered.set()  # the update's write lands first...
            await trio.testing.wait_all_tasks_blocked()
            deregistered.set()  # ...then the delete's purge
    assert _agree(service, nomad)


async def test_a_restart_adopts_the_runners_it_finds_and_creates_none_beside_them(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a previous run left: the template and its runner jobs, one of them claimed. The first
    listing adopts them all; the pool is not filled before its runner jobs are reconciled, so it is
    not doubled. Runner jobs of an environment whose template is gone are destroyed."""
    nomad = _GatedNomad()
    nomad.jobs[TEMPLATE] = template_job(ENVIRONMENT)
    left = [new_runner_id(ENVIRONMENT.id, Entropy().uuid()), new_runner_id(ENVIRONMENT.id, Entropy().uuid())]
    nomad.jobs[left[0]] = runner_job(ENVIRONMENT, left[0])
    nomad.jobs[left[1]] = runner_job(ENVIRONMENT, left[1], used=True, timeout=60)
    orphan = new_runner_id(99, Entropy().uuid())
    nomad.jobs[orphan] = runner_job(ExecutionEnvironment(99, "python:3.12", 1, 100.0, 256, False, ()), orphan)
    service = _service(nomad, nursery)
    actions: list[object] = []
    monkeypatch.setattr(service.effects, "apply", actions.extend)
    await service.informer.relist()
    assert set(service.pool.runners) == set(left), "adopted, and nothing created beside them"
    assert service.pool.used_runner(left[1]) is not None
    assert [a.runner_id for a in actions if isinstance(a, DestroyRunner)] == [orphan]
    assert not any(isinstance(a, CreateRunner) for a in actions)


class _RestartedNomad(_GatedNomad):
    """A claimed runner's allocation runs; the listing of every job (the start's search for
    orphans) and the sweep's exec are held until released."""

    def __init__(self, claimed: str) -> None:
        super().__init__()
        self.claimed = claimed
        self.orphans_listed, self.orphans_answer = trio.Event(), trio.Event()
        self.sweep_opened, self.sweep_answer = trio.Event(), trio.Event()

    async def list_jobs(
        self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
    ) -> Indexed[list[JobListStub]]:
        if not prefix:
            self.orphans_listed.set()
            await self.orphans_answer.wait()
        return await super().list_jobs(prefix, meta=meta)

    async def list_allocations(self, **_options: object) -> Indexed[list[Any]]:
        alloc = AllocListStub(
            id="a1", job_id=self.claimed, client_status="running", create_index=5, modify_index=5
        )
        return Indexed([alloc], 10)

    @contextlib.asynccontextmanager
    async def open_exec(self, alloc_id: str, **_options: Any) -> AsyncIterator[Any]:
        self.sweep_opened.set()
        await self.sweep_answer.wait()
        yield _ExitedSession()


class _ExitedSession:
    async def wait_exit(self) -> int:
        return 0


async def test_a_request_in_an_adopted_claim_waits_for_its_sweep_from_the_moment_it_is_known(
    nursery: trio.Nursery,
) -> None:
    """The first listing makes a previous run's claim known; the sweep that stops that run's
    commands is due from that same step, so a request in the runner that comes while the rest of the
    start is under way waits for it, and the sweep never stops the request's own command."""
    claimed = new_runner_id(ENVIRONMENT.id, Entropy().uuid())
    nomad = _RestartedNomad(claimed)
    nomad.jobs[TEMPLATE] = template_job(ENVIRONMENT)
    nomad.jobs[claimed] = runner_job(ENVIRONMENT, claimed, used=True, timeout=60)
    service = _service(nomad, nursery)
    proven = trio.Event()

    async def request_in_the_claim() -> None:
        runner = service.pool.used_runner(claimed)
        assert runner is not None, "the first listing adopted the claim"
        await service.desk.runner_for_work(runner.id)
        proven.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as inner:
            inner.start_soon(service.informer.relist)
            await nomad.orphans_listed.wait()
            inner.start_soon(request_in_the_claim)
            await nomad.sweep_opened.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert not proven.is_set(), "the request went ahead of the sweep"
            nomad.orphans_answer.set()
            nomad.sweep_answer.set()
    assert proven.is_set()


class _PurgedAfterListingNomad(_GatedNomad):
    """Lists every job, then forgets the claimed ones before their GET: released meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    async def get_job(self, job_id: str) -> Indexed[Job]:
        self.reads.append(job_id)
        if _claimed(self.jobs[job_id]):
            raise NomadNotFound(f"job {job_id} not found", status_code=404)
        return await super().get_job(job_id)


async def test_a_relist_reads_only_the_claimed_jobs_and_adopts_none_purged_since_the_listing(
    nursery: trio.Nursery,
) -> None:
    nomad = _PurgedAfterListingNomad()
    nomad.jobs[TEMPLATE] = template_job(ENVIRONMENT)
    idle, released = (new_runner_id(ENVIRONMENT.id, Entropy().uuid()) for _ in range(2))
    nomad.jobs[idle] = runner_job(ENVIRONMENT, idle)
    nomad.jobs[released] = runner_job(ENVIRONMENT, released, used=True, timeout=60)
    service = _service(nomad, nursery)
    await service.informer.relist()
    assert nomad.reads == [released], "a job never updated since its registration holds no claim"
    assert released not in service.pool.runners, "gone before it was read: never adopted as idle"
    assert idle in service.pool.runners


async def test_a_job_a_late_claim_write_created_is_adopted_as_claimed_never_as_idle(
    nursery: trio.Nursery,
) -> None:
    """A claim's write that lands after its runner's job vanished (and after the last listing that
    remembered the runner) creates the job anew: claimed, though never updated. Handed out as idle,
    its ID would reach a second client."""
    nomad = _GatedNomad()
    nomad.jobs[TEMPLATE] = template_job(ENVIRONMENT)
    service = _service(nomad, nursery)
    await service.informer.relist()
    late = new_runner_id(ENVIRONMENT.id, Entropy().uuid())
    nomad.jobs[late] = runner_job(ENVIRONMENT, late, used=True, timeout=60)
    nomad.created_claimed.add(late)
    await service.informer.relist()
    assert service.pool.used_runner(late) is not None, "after the start, every unknown runner job is read"


class _OverlappingNomad(_GatedNomad):
    """Answers a runner job listing only once the allocation listing is under way; ``failure``, if
    set, is what the allocation listing raises."""

    def __init__(self, failure: Exception | None = None) -> None:
        super().__init__()
        self.allocations_asked = trio.Event()
        self.failure = failure

    async def list_jobs(
        self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
    ) -> Indexed[list[JobListStub]]:
        if prefix != TEMPLATE_PREFIX:
            await self.allocations_asked.wait()
        return await super().list_jobs(prefix, meta=meta, per_page=per_page)

    async def list_allocations(self, **_options: object) -> Indexed[list[Any]]:
        self.allocations_asked.set()
        if self.failure is not None:
            raise self.failure
        return Indexed([], 10)


async def test_a_relist_reads_the_allocations_while_it_reads_the_runner_jobs(nursery: trio.Nursery) -> None:
    nomad = _OverlappingNomad()
    nomad.jobs[TEMPLATE] = template_job(ENVIRONMENT)
    idle = new_runner_id(ENVIRONMENT.id, Entropy().uuid())
    nomad.jobs[idle] = runner_job(ENVIRONMENT, idle)
    service = _service(nomad, nursery)
    with trio.fail_after(5):  # read one after the other, the runner jobs would wait forever
        await service.informer.relist()
    assert idle in service.pool.runners


async def test_a_relist_whose_read_fails_raises_that_error_alone(nursery: trio.Nursery) -> None:
    nomad = _OverlappingNomad(NomadUnavailableError("GET /v1/allocations: no cluster leader"))
    nomad.jobs[TEMPLATE] = template_job(ENVIRONMENT)
    service = _service(nomad, nursery)
    with trio.fail_after(5), pytest.raises(NomadUnavailableError, match="no cluster leader"):
        await service.informer.relist()


def _poseidons(nomad: _GatedNomad) -> list[str]:
    """Poseidon's template of ENVIRONMENT and two runners of it, one claimed, as Poseidon left them."""
    definition = {**ENVIRONMENT.to_api(), "cpuLimit": 100}
    nomad.jobs[TEMPLATE] = poseidon_template_job(definition)
    runners = [new_runner_id(ENVIRONMENT.id, Entropy().uuid()) for _ in range(2)]
    for runner in runners:
        nomad.jobs[runner] = poseidon_runner_job(definition, runner.partition("-")[2])
    nomad.jobs[runners[1]] = claimed_by_poseidon(nomad.jobs[runners[1]], 60)
    return runners


async def test_a_put_over_poseidons_template_loses_no_runner_in_its_window(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Poseidon's batch template is purged, then ours registered, under the store's lock: a relist
    asked for in between waits, and no runner is destroyed."""
    nomad = _GatedNomad()
    runners = _poseidons(nomad)
    service = _service(nomad, nursery)
    await service.informer.relist()
    assert service.pool.environment(ENVIRONMENT.id) == ENVIRONMENT
    assert set(service.pool.runners) == set(runners)
    destroyed: list[str] = []
    real_apply = service.effects.apply

    def apply(actions: Iterable[Action]) -> None:
        actions = list(actions)
        destroyed.extend(a.runner_id for a in actions if isinstance(a, DestroyRunner))
        real_apply(actions)

    monkeypatch.setattr(service.effects, "apply", apply)
    registered = nomad.hold("register")
    with trio.fail_after(5):
        async with trio.open_nursery() as inner:
            inner.start_soon(functools.partial(service.environments.put, ENVIRONMENT, roll_out=False))
            await nomad.reached["register"].wait()
            assert TEMPLATE not in nomad.jobs, "purged first: Nomad refuses a type change"
            inner.start_soon(service.informer.relist)
            await trio.testing.wait_all_tasks_blocked()
            registered.set()
    assert nomad.jobs[TEMPLATE]["Type"] == "service"
    assert destroyed == []
    assert service.pool.used_runner(runners[1]) is not None


async def test_a_restart_between_the_purge_and_the_registration_keeps_poseidons_runners(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash in that window leaves no template: the environment is unknown until the client
    sends it again, and Poseidon's runner jobs (no meta naming their environment) are no orphans."""
    nomad = _GatedNomad()
    runners = _poseidons(nomad)
    del nomad.jobs[TEMPLATE]
    service = _service(nomad, nursery)
    actions: list[object] = []
    monkeypatch.setattr(service.effects, "apply", actions.extend)
    await service.informer.relist()
    assert service.pool.environment(ENVIRONMENT.id) is None
    assert not any(isinstance(a, DestroyRunner) for a in actions)
    assert all(r in nomad.jobs for r in runners)
