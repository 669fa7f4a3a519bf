"""Image roll-out as Poseidon does it, through the factory and the environment store against a fake
Nomad: the jobs written carry ``force_pull`` as Poseidon sets it, a PUT of an unchanged environment
replaces its runners, and the configured environments ensured at a restart do not.

Virtual time (``autojump_clock``); tasks are ordered with ``wait_all_tasks_blocked``, never sleeps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
import trio.testing

from supervisor.core.config import FactorySettings, Settings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.job_template import JobShape
from supervisor.core.pool import RunnerPool
from supervisor.desk.service import RunnerService
from supervisor.effects.factory import RunnerFactory
from supervisor.nomad.models import Allocation, JobDeregisterResponse, JobRegisterResponse

from .nomad_double import NomadDouble

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())


def force_pull(job: Mapping[str, Any]) -> bool:
    return bool(job["TaskGroups"][0]["Tasks"][0]["Config"]["force_pull"])


class RecordingNomad(NomadDouble):
    """Every job written, in order; purges recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[dict[str, Any]] = []
        self.purged: list[str] = []

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.written.append(dict(job))
        return JobRegisterResponse(index=len(self.written) + 1)

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        self.purged.append(job_id)
        return JobDeregisterResponse(index=100)


async def test_the_factory_writes_force_pull_as_the_pool_asks_and_never_when_disabled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for disabled in (False, True):
        nomad = RecordingNomad()
        pool = RunnerPool()
        _, fill = pool.set_environment(ENVIRONMENT)
        factory = RunnerFactory(nomad, pool, FactorySettings(), shape=JobShape(disable_force_pull=disabled))
        async with trio.open_nursery() as nursery:
            await nursery.start(factory.run)
            for action in fill:
                factory.submit(action)  # type: ignore[arg-type]
            await trio.testing.wait_all_tasks_blocked()
            first = fill[0].runner_id  # type: ignore[union-attr]
            alloc = Allocation(id="a1", job_id=first, client_status="running", create_index=3, modify_index=3)
            pool.apply_allocation(alloc, Moment(trio.current_time()))
            _, claimed = pool.claim(10, 60, now=trio.current_time())
            for action in claimed:
                factory.submit(action)  # type: ignore[arg-type]
            await trio.sleep(1)  # virtual: the registrations' pace
            nursery.cancel_scope.cancel("test over")
        by_id = {(j["ID"], j["TaskGroups"][1]["Meta"]["used"]): j for j in nomad.written}
        replacement = claimed[1].runner_id  # type: ignore[union-attr]
        assert force_pull(by_id[first, "false"]) is not disabled
        assert force_pull(by_id[replacement, "false"]) is False
        mark = by_id[first, "true"]
        assert mark["TaskGroups"][0] == by_id[first, "false"]["TaskGroups"][0], (
            "a claim's write leaves the task as it was, or Nomad would replace its container"
        )


async def test_a_put_of_an_unchanged_environment_rolls_it_out_and_a_restart_does_not(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    nomad = RecordingNomad()
    service = RunnerService(nomad, Settings(), execution_nursery=nursery)
    await nursery.start(service.factory.run)
    assert await service.environments.put(ENVIRONMENT) is True
    await trio.sleep(1)
    first = set(service.pool.runners)
    assert len(first) == 2
    template = nomad.written[0]
    assert template["ID"] == "template-10"
    assert force_pull(template), "every registration of an environment pulls, as Poseidon's"

    await service.environments.ensure([ENVIRONMENT])  # the daemon restarted, its configuration read
    await trio.testing.wait_all_tasks_blocked()
    assert set(service.pool.runners) == first, "nothing rolled out"
    assert nomad.purged == []

    assert await service.environments.put(ENVIRONMENT) is False  # CodeOcean's synchronize
    await trio.sleep(1)  # virtual: the registrations' pace
    assert sorted(nomad.purged) == sorted(first)
    second = set(service.pool.runners)
    assert len(second) == 2
    assert not second & first
    new_jobs = [j for j in nomad.written if j["ID"] in second]
    assert len(new_jobs) == 2
    assert all(force_pull(j) for j in new_jobs), "the new runners pull the image again"
