"""Service jobs against batch jobs where Nomad treats them apart: a job never changes its type (even
stopped, until purged), and a service job's allocation that ended complete is replaced by the next
evaluation of its job, where a batch job's stays complete.

Deterministic: the cluster runs on the test's virtual clock (trio_mode, autojump).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from supervisor.base.errors import NomadRequestError, NomadUnavailableError
from supervisor.nomad import NomadClient
from supervisor.simulator import SimulatedCluster

from .conftest import batch_job, settle


def service_job(job_id: str) -> dict[str, Any]:
    return {**batch_job(job_id), "Type": "service"}


def allocations(cluster: SimulatedCluster, job_id: str) -> list[tuple[str, str]]:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return sorted((a.id, a.client_status) for a in allocs)


def running(cluster: SimulatedCluster, job_id: str) -> list[str]:
    return [alloc_id for alloc_id, status in allocations(cluster, job_id) if status == "running"]


async def register(cluster: SimulatedCluster, job: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        return await http.put("/v1/jobs", json={"Job": job})


@pytest.mark.parametrize(("first", "then"), [("batch", "service"), ("service", "batch")])
async def test_a_job_keeps_its_type(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, first: str, then: str
) -> None:
    assert (await register(cluster, {**batch_job("template-5"), "Type": first})).status_code == 200
    refused = await register(cluster, {**batch_job("template-5"), "Type": then})
    assert (refused.status_code, refused.text) == (500, f'cannot update job from type "{first}" to "{then}"')
    assert cluster.state.jobs[("default", "template-5")].type == first


async def test_a_stopped_job_keeps_its_type_until_purged(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(batch_job("template-5"))
    await client.deregister_job("template-5")
    with pytest.raises((NomadRequestError, NomadUnavailableError), match="cannot update job from type"):
        await client.register_job(service_job("template-5"))
    await client.deregister_job("template-5", purge=True)
    await client.register_job(service_job("template-5"))
    await settle(cluster, lambda: bool(running(cluster, "template-5")))
    assert cluster.state.jobs[("default", "template-5")].type == "service"


async def test_a_restored_agent_ends_both_templates_complete_and_only_the_service_one_is_replaced(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster, client: NomadClient
) -> None:
    """All agents restart at once (the field's failure mode): the restored clients report the
    template jobs' allocations complete. Nomad evaluates every job with an allocation on a node
    that turns ready: the service job's is replaced, the batch job ends dead."""
    await client.register_job(service_job("template-1"))
    await client.register_job(batch_job("template-2"))
    await settle(cluster, lambda: bool(running(cluster, "template-1") and running(cluster, "template-2")))
    (service_before,) = running(cluster, "template-1")
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        answer = await http.post("/sim/v1/nodes/restart-all", json={"downtime_s": 5, "lose_fraction": 0})
        assert answer.status_code == 200, answer.text
    await settle(cluster, lambda: cluster.state.jobs[("default", "template-2")].status == "dead")
    await settle(cluster, lambda: bool(set(running(cluster, "template-1")) - {service_before}))
    assert (service_before, "complete") in allocations(cluster, "template-1")
    assert cluster.state.jobs[("default", "template-1")].status == "running"
    assert [status for _, status in allocations(cluster, "template-2")] == ["complete"]
