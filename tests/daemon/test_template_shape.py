"""Our template jobs as Poseidon's loader reads them (a switch back to Poseidon), and those of the
first shape (count 0) registered anew when a daemon adopts them.

Real clock, as every daemon test (``conftest.py``); waits wake on the step that meets them.
"""

from __future__ import annotations

import httpx

from supervisor.core.environments import ExecutionEnvironment, template_job
from supervisor.dst.poseidon_jobs import poseidon_loads

from .conftest import ENVIRONMENT, Harness


def running(harness: Harness, job_id: str) -> bool:
    allocs = harness.cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return any(a.client_status == "running" for a in allocs)


async def poseidons_view(harness: Harness, environment_id: int) -> dict[str, object] | None:
    """What Poseidon's loader would take of the template job now."""
    async with httpx.AsyncClient(base_url=harness.cluster.addresses[0]) as http:
        job = (await http.get(f"/v1/job/template-{environment_id}")).json()
    loaded = poseidon_loads(job, job["Status"])
    return loaded


async def test_poseidons_loader_takes_our_template(harness: Harness) -> None:
    await harness.environment(10, networkAccess=True, exposedPorts=[8080], cpuLimit=50)
    await harness.wait_for(lambda: running(harness, "template-10"))
    assert await poseidons_view(harness, 10) == {
        **ENVIRONMENT,
        "id": 10,
        "networkAccess": True,
        "exposedPorts": [8080],
        "cpuLimit": 50,
    }
    await harness.wait_for(lambda: harness.idle(10) == 2)
    assert sorted(harness.service.pool.runners) == sorted(
        job_id for (_, job_id) in harness.cluster.state.jobs if job_id.startswith("10-")
    ), "the template's allocation is no runner"


async def test_a_template_of_the_first_shape_is_registered_anew(harness: Harness) -> None:
    """A template job an older daemon wrote (count 0: dead, which Poseidon's loader skips) is
    registered in the current shape when this daemon adopts it, and keeps its environment."""
    environment = ExecutionEnvironment(12, "python:3.12-slim", 1, 100.0, 256, False)
    old = template_job(environment)
    del old["Meta"]["supervisor.template"]
    for group in old["TaskGroups"]:
        group["Count"] = 0
    old["TaskGroups"][0].pop("ReschedulePolicy")
    await harness.nomad.register_job(old)
    harness.service.informer.relists.request("a daemon adopting what Nomad holds")
    await harness.wait_for(lambda: harness.service.pool.environment(12) == environment)
    await harness.wait_for(lambda: running(harness, "template-12"))
    template = harness.cluster.state.jobs[("default", "template-12")]
    assert template.spec["Meta"]["supervisor.template"] == "2"
    view = await poseidons_view(harness, 12)
    assert view is not None
    assert view["image"] == "python:3.12-slim"
    assert (await harness.http.get("/execution-environments/12")).status_code == 200
