"""A daemon that takes over a cluster Poseidon left: its environments, its idle runners and the
runners its clients hold (``supervisor/dst/poseidon_jobs.py`` writes them as Poseidon does).

Real clock, as every daemon test (``conftest.py``); waits wake on the step that meets them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from supervisor.core.config import ServerSettings, Settings
from supervisor.core.runners import RunnerState
from supervisor.dst.poseidon_jobs import claimed_by_poseidon, poseidon_runner_job, poseidon_template_job
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.simulator import SimConfig, SimulatedCluster

from ..waiting import wait_until
from .conftest import Harness, daemon_on, output

ENVIRONMENT: dict[str, Any] = {
    "id": 10,
    "image": "python:3.12-slim",
    "prewarmingPoolSize": 2,
    "cpuLimit": 20,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}
IDLE = ("10-0f4c3a3e-5b6d-11ef-8a1e-0242ac120002", "10-5d1e9b0a-7c2f-4e8a-9b3d-2a6f1c0e4b7d")
HELD = "10-9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def live(cluster: SimulatedCluster, job_id: str) -> list[str]:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return [a.id for a in allocs if a.client_status == "running"]


async def poseidons_cluster(cluster: SimulatedCluster) -> None:
    """The template job, two idle runners and one a client holds, as Poseidon left them."""
    async with NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as nomad:
        await nomad.register_job(poseidon_template_job(ENVIRONMENT))
        for runner in (*IDLE, HELD):
            await nomad.register_job(poseidon_runner_job(ENVIRONMENT, runner.partition("-")[2]))
        jobs = ("template-10", *IDLE, HELD)
        await wait_until(lambda: all(live(cluster, j) for j in jobs), within=20)
        stored = (await nomad.read_job(HELD)).value
        await nomad.register_job(claimed_by_poseidon(stored, 300))
        await wait_until(lambda: cluster.state.jobs[("default", HELD)].version == 1, within=20)


@pytest.fixture
async def harness(nursery: trio.Nursery, sim_config: SimConfig) -> AsyncIterator[Harness]:
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    await poseidons_cluster(cluster)
    async with daemon_on(cluster, nursery, Settings(server=ServerSettings(port=0))) as harness:
        yield harness


async def test_poseidons_environment_is_listed_with_its_fields(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.daemon.service is not None and harness.service.pool.stats() != {})
    listed = (await harness.http.get("/execution-environments")).json()
    assert listed == {"executionEnvironments": [ENVIRONMENT]}
    one = await harness.http.get("/execution-environments/10")
    assert (one.status_code, one.json()) == (200, ENVIRONMENT)


async def test_poseidons_idle_runners_fill_the_pool_and_none_is_made(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.idle(10) == 2)
    pool = harness.service.pool
    assert sorted(r.id for r in pool.runners.values() if r.state is RunnerState.IDLE) == sorted(IDLE)
    assert pool.used_runner(HELD) is not None
    assert harness.service.effects.factory.created == 0
    runner_jobs = [k for k in harness.cluster.state.jobs if not k[1].startswith("template-")]
    assert len(runner_jobs) == 3


async def test_a_claim_of_poseidons_idle_runner_keeps_its_allocation(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.idle(10) == 2)
    allocations = {runner: live(harness.cluster, runner) for runner in IDLE}
    runner = await harness.runner(10, inactivity_timeout=120)
    assert runner in IDLE
    assert harness.claim_meta(runner) == {"used": "true", "timeout": "120"}
    assert harness.cluster.state.jobs[("default", runner)].spec.get("Meta") in (None, {})
    await harness.wait_for(lambda: harness.idle(10) == 2)  # its replacement, one of ours, runs
    assert live(harness.cluster, runner) == allocations[runner]
    messages = await harness.execute(runner, command="echo still here")
    assert output(messages).strip() == "still here"
    assert live(harness.cluster, runner) == allocations[runner]


async def test_a_runner_held_under_poseidon_serves_its_client(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.daemon.service is not None and harness.idle(10) == 2)
    allocation = live(harness.cluster, HELD)
    patch = {"copy": [{"path": "kept.txt", "content": "aGVsZA=="}]}
    assert (await harness.http.patch(f"/runners/{HELD}/files", json=patch)).status_code == 204
    messages = await harness.execute(HELD, command="cat kept.txt")
    assert output(messages) == "held"
    assert live(harness.cluster, HELD) == allocation
    assert (await harness.http.delete(f"/runners/{HELD}")).status_code == 204
    await harness.wait_for(lambda: ("default", HELD) not in harness.cluster.state.jobs)


async def test_a_put_over_poseidons_template_replaces_it_and_keeps_the_held_runner(harness: Harness) -> None:
    """Nomad refuses to change the template's type: Poseidon's batch job is purged, ours
    registered; the runner a client holds goes on in the same allocation."""
    await harness.wait_for(lambda: harness.idle(10) == 2)
    allocation = live(harness.cluster, HELD)
    definition = {k: v for k, v in ENVIRONMENT.items() if k != "id"}
    response = await harness.http.put("/execution-environments/10", json=definition)
    assert response.status_code == 204, response.text
    template = harness.cluster.state.jobs[("default", "template-10")]
    assert template.type == "service"
    assert "supervisor.environment" in (template.spec.get("Meta") or {})
    await harness.wait_for(lambda: bool(live(harness.cluster, "template-10")))
    await harness.wait_for(lambda: harness.idle(10) == 2)
    assert not set(IDLE) & set(harness.service.pool.runners), "rolled out, as every PUT"
    assert live(harness.cluster, HELD) == allocation
    messages = await harness.execute(HELD, command="echo held")
    assert output(messages).strip() == "held"
    listed = (await harness.http.get("/execution-environments/10")).json()
    assert listed == ENVIRONMENT
