"""Execution environments, statistics, health and version, over HTTP (swagger.yaml)."""

from __future__ import annotations

import pytest
import trio

from supervisor.base.levels import StreamState
from supervisor.core.config import ServerSettings, Settings
from supervisor.core.environments import TEMPLATE_PREFIX, environment_from_dict
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from ..waiting import wait_until
from .conftest import ENVIRONMENT, Harness


async def test_create_replace_get_list_delete(harness: Harness) -> None:
    http = harness.http
    assert (await http.put("/execution-environments/21", json=ENVIRONMENT)).status_code == 201
    assert (
        await http.put("/execution-environments/21", json={**ENVIRONMENT, "cpuLimit": 150})
    ).status_code == 204
    got = (await http.get("/execution-environments/21")).json()
    assert got == {**ENVIRONMENT, "id": 21, "cpuLimit": 150}
    listed = (await http.get("/execution-environments")).json()
    assert listed == {"executionEnvironments": [got]}
    job = (await harness.nomad.get_job(f"{TEMPLATE_PREFIX}21")).value
    assert job.type == "service", "stored in Nomad as its template job"
    assert (await http.delete("/execution-environments/21")).status_code == 204
    assert (await http.get("/execution-environments/21")).status_code == 404
    assert (await http.delete("/execution-environments/21")).status_code == 404
    await harness.wait_for(lambda: not any(j for j in harness.cluster.state.jobs if j[1].startswith("21-")))


async def test_fetch_reads_environments_from_nomad(harness: Harness) -> None:
    await harness.http.put("/execution-environments/22", json=ENVIRONMENT)
    harness.service.pool.environments.clear()
    assert (await harness.http.get("/execution-environments/22")).status_code == 404
    fetched = await harness.http.get("/execution-environments/22", params={"fetch": "true"})
    assert fetched.status_code == 200
    assert fetched.json()["image"] == ENVIRONMENT["image"]
    harness.service.pool.environments.clear()
    listed = await harness.http.get("/execution-environments", params={"fetch": "true"})
    assert [e["id"] for e in listed.json()["executionEnvironments"]] == [22]


async def test_statistics_per_environment(harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=3)
    await harness.wait_for(lambda: harness.idle(10) == 3)
    await harness.runner(10)
    stats = (await harness.http.get("/statistics/execution-environments")).json()
    assert stats["10"]["id"] == 10
    assert stats["10"]["prewarmingPoolSize"] == 3
    assert stats["10"]["usedRunners"] == 1
    await harness.wait_for(lambda: harness.idle(10) == 3)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/execution-environments/23", {**ENVIRONMENT, "image": ""}, "image must be a non-empty string"),
        (
            "/execution-environments/23",
            {k: v for k, v in ENVIRONMENT.items() if k != "memoryLimit"},
            "memoryLimit is required",
        ),
        ("/execution-environments/23", {**ENVIRONMENT, "colour": "blue"}, "unknown field 'colour'"),
        ("/execution-environments/23", {**ENVIRONMENT, "id": 24}, "does not match"),
        ("/execution-environments/23", {**ENVIRONMENT, "exposedPorts": [0]}, "exposedPorts"),
        ("/execution-environments/23", {**ENVIRONMENT, "prewarmingPoolSize": -1}, "prewarmingPoolSize"),
        ("/execution-environments/abc", ENVIRONMENT, "must be an integer from 0"),
    ],
)
async def test_invalid_environments_are_400_with_a_message(
    harness: Harness, path: str, body: dict[str, object], message: str
) -> None:
    response = await harness.http.put(path, json=body)
    assert response.status_code == 400
    assert message in response.json()["message"]


async def test_empty_and_malformed_bodies(harness: Harness) -> None:
    empty = await harness.http.put("/execution-environments/25", content=b"")
    assert (empty.status_code, empty.json()["message"]) == (400, "the request body is empty")
    broken = await harness.http.put("/execution-environments/25", content=b"{nope")
    assert broken.status_code == 400
    assert "not JSON" in broken.json()["message"]
    bad_fetch = await harness.http.get("/execution-environments", params={"fetch": "maybe"})
    assert bad_fetch.status_code == 400


async def test_health_and_version(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.service.informer.is_synced())
    assert (await harness.http.get("/health")).status_code == 204
    version = await harness.http.get("/version")
    assert version.status_code == 200
    assert isinstance(version.json(), str)
    await harness.environment(10, prewarmingPoolSize=2)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    for node_id in list(harness.cluster.state.nodes):
        await harness.nomad.set_eligibility(node_id, eligible=False)  # no room for replacements
    await harness.runner(10)
    await harness.runner(10)
    depleting = await harness.http.get("/health")
    assert depleting.status_code == 503
    assert depleting.json() == {
        "message": "the prewarming pool is depleting: environments 10",
        "errorCode": "PREWARMING_POOL_DEPLETING",
    }
    for node_id in list(harness.cluster.state.nodes):
        await harness.nomad.set_eligibility(node_id, eligible=True)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    assert (await harness.http.get("/health")).status_code == 204
    harness.service.gate.report(StreamState.DOWN)
    down = await harness.http.get("/health")
    assert (down.status_code, down.json()["errorCode"]) == (503, "NOMAD_UNREACHABLE")


async def test_configured_environments_are_ensured_at_startup(
    nursery: trio.Nursery, sim_config: SimConfig
) -> None:
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    environment = environment_from_dict({**ENVIRONMENT, "id": 7})
    settings = Settings(server=ServerSettings(port=0), environments=(environment,))
    daemon = await nursery.start(Daemon(settings, environ={"NOMAD_ADDR": cluster.addresses[0]}).run)
    assert daemon.service is not None
    pool = daemon.service.pool
    await wait_until(lambda: getattr(pool.stats().get(7), "idle", 0) == 2, within=20)
    assert ("default", f"{TEMPLATE_PREFIX}7") in cluster.state.jobs
    daemon.stop()
