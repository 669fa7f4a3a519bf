"""The jobs Poseidon writes (``supervisor/dst/poseidon_jobs.py``) against the strict simulated
cluster: its template job runs (so Poseidon's loader takes it), its runner jobs run, and a claim
written as Poseidon writes it (the job read back, its ``config`` meta changed) keeps the runner's
allocation.

Deterministic: the cluster runs on the test's virtual clock (trio_mode, autojump).
"""

from __future__ import annotations

import httpx

from supervisor.dst.poseidon_jobs import claimed_by_poseidon, poseidon_runner_job, poseidon_template_job
from supervisor.nomad import NomadClient
from supervisor.simulator import SimulatedCluster

from .conftest import settle

ENVIRONMENT = {
    "id": 10,
    "image": "openhpi/co_execenv_python:3.8",
    "prewarmingPoolSize": 2,
    "cpuLimit": 20,
    "memoryLimit": 256,
    "networkAccess": True,
    "exposedPorts": [8080],
}
RUNNER = "10-0f4c3a3e-5b6d-11ef-8a1e-0242ac120002"


def live(cluster: SimulatedCluster, job_id: str) -> list[str]:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return [a.id for a in allocs if a.client_status == "running"]


async def test_poseidons_template_job_runs_and_holds_the_environment(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(poseidon_template_job(ENVIRONMENT))
    await settle(cluster, lambda: bool(live(cluster, "template-10")))
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        (stub,) = (await http.get("/v1/jobs", params={"prefix": "template"})).json()
        job = (await http.get("/v1/job/template-10")).json()
    assert (stub["Type"], stub["Status"]) == ("batch", "running")
    group, config = job["TaskGroups"]
    task = group["Tasks"][0]
    assert (task["Config"]["image"], task["Resources"]["CPU"], task["Resources"]["MemoryMaxMB"]) == (
        "openhpi/co_execenv_python:3.8",
        20,
        256,
    )
    assert [p["To"] for p in group["Networks"][0]["DynamicPorts"]] == [8080]
    assert config["Meta"]["prewarmingPoolSize"] == "2"


async def test_a_claim_written_as_poseidon_writes_it_keeps_the_runners_allocation(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(poseidon_runner_job(ENVIRONMENT, RUNNER.partition("-")[2]))
    await settle(cluster, lambda: bool(live(cluster, RUNNER)))
    before = live(cluster, RUNNER)
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        stored = (await http.get(f"/v1/job/{RUNNER}")).json()
        assert stored["TaskGroups"][1]["Meta"] == {"used": "false"}
        answer = await http.put(f"/v1/job/{RUNNER}", json={"Job": claimed_by_poseidon(stored, 60)})
        assert answer.status_code == 200, answer.text
        await settle(cluster, lambda: cluster.state.jobs[("default", RUNNER)].version == 1)
        marked = (await http.get(f"/v1/job/{RUNNER}")).json()
    assert marked["TaskGroups"][1]["Meta"] == {"used": "true", "timeout": "60"}
    assert live(cluster, RUNNER) == before
