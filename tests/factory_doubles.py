"""The fakes of Nomad that the runner factory's tests run against, and a factory with creations
under way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio

from supervisor.core.config import FactorySettings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import CreateRunner, DestroyRunner, MarkUsed
from supervisor.effects.factory import RunnerFactory
from supervisor.nomad import Indexed
from supervisor.nomad.models import JobDeregisterResponse, JobRegisterResponse

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 1, 100.0, 256, False, ())


class SlowNomad:
    """Registrations wait until released; every call is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.release = trio.Event()
        self.registering = trio.Event()

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.calls.append(("register", job["ID"]))
        self.registering.set()
        await self.release.wait()
        self.calls.append(("registered", job["ID"]))
        return JobRegisterResponse(index=42)

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        self.calls.append(("deregister", job_id))
        return JobDeregisterResponse()

    async def read_job(self, job_id: str) -> Indexed[dict[str, Any]]:
        self.calls.append(("read", job_id))
        raise AssertionError(f"this test reads no job ({job_id})")


class QuickNomad(SlowNomad):
    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.calls.append(("register", job["ID"]))
        return JobRegisterResponse(index=42)


async def two_creations(
    nursery: trio.Nursery,
    nomad: SlowNomad,
    *,
    registrations_per_second: float,
    pool_size: int = 2,
    max_starting: int = FactorySettings().max_starting,
    pool: RunnerPool | None = None,
) -> tuple[RunnerPool, RunnerFactory]:
    """A factory running in ``nursery`` with the creations of a new environment (two, unless
    ``pool_size`` says otherwise) submitted, in ``pool`` or a new one."""
    pool = pool or RunnerPool()
    _, actions = pool.set_environment(attrs.evolve(ENVIRONMENT, prewarming_pool_size=pool_size))
    settings = FactorySettings(registrations_per_second=registrations_per_second, max_starting=max_starting)
    factory = RunnerFactory(nomad, pool, settings)
    await nursery.start(factory.run)
    for action in actions:
        if isinstance(action, CreateRunner | DestroyRunner | MarkUsed):
            factory.submit(action)
    return pool, factory
