"""Runners: claims, release, the inactivity timeout, authentication and the admission gate."""

from __future__ import annotations

import httpx
import pytest
import trio
import trio_websocket

from supervisor.base.levels import StreamState
from supervisor.core.config import AdmissionSettings, ServerSettings, Settings
from supervisor.simulator.http.trouble import Trouble

from .conftest import Harness


async def test_claim_hands_out_an_idle_runner_and_orders_a_replacement(harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=2, networkAccess=True, exposedPorts=[8080, 443])
    await harness.wait_for(lambda: harness.idle(10) == 2)
    response = await harness.http.post(
        "/runners", json={"executionEnvironmentId": 10, "inactivityTimeout": 60}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["runnerId"].startswith("10-")
    assert sorted(p["exposedPort"] for p in body["mappedPorts"]) == [443, 8080]
    assert all(":" in p["hostAddress"] for p in body["mappedPorts"])
    assert harness.idle(10) == 1, "handed out at once"
    await harness.wait_for(lambda: harness.idle(10) == 2)
    job = (await harness.nomad.get_job(body["runnerId"])).value
    await harness.wait_for(lambda: harness.claim_meta(body["runnerId"])["used"] == "true")
    assert job.id == body["runnerId"], "the runner ID is the Nomad job ID"
    meta = harness.claim_meta(body["runnerId"])
    assert meta["timeout"] == "60", "a restarted daemon knows the claim and its timeout"
    assert job.meta == {"environment": "10", "forcePull": "true"}, (
        "the job's own meta never changes: a change would replace its task"
    )


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({}, 400, "executionEnvironmentId is required"),
        ({"executionEnvironmentId": "10"}, 400, "executionEnvironmentId must be an integer from 0 to"),
        ({"executionEnvironmentId": 10, "inactivityTimeout": -1}, 400, "inactivityTimeout"),
        ({"executionEnvironmentId": 10, "extra": 1}, 400, "unknown field 'extra'"),
        ({"executionEnvironmentId": 99}, 404, "execution environment 99 does not exist"),
    ],
)
async def test_bad_claims(harness: Harness, body: dict[str, object], status: int, message: str) -> None:
    await harness.environment(10)
    response = await harness.http.post("/runners", json=body)
    assert response.status_code == status
    assert message in response.json()["message"]


async def test_no_idle_runner_is_nomad_overload(harness: Harness) -> None:
    await harness.environment(11, prewarmingPoolSize=1)
    for node_id in list(harness.cluster.state.nodes):
        await harness.nomad.set_eligibility(node_id, eligible=False)
    await harness.runner(11)
    response = await harness.http.post("/runners", json={"executionEnvironmentId": 11})
    assert response.status_code == 500
    assert response.json() == {"message": "no runners available", "errorCode": "NOMAD_OVERLOAD"}


async def test_delete_is_204_then_410_and_the_job_is_purged(harness: Harness) -> None:
    await harness.environment(10)
    runner_id = await harness.runner(10)
    assert (await harness.http.delete(f"/runners/{runner_id}")).status_code == 204
    gone = await harness.http.delete(f"/runners/{runner_id}")
    assert gone.status_code == 410
    assert "no runner found" in gone.json()["message"]
    assert (await harness.http.delete("/runners/10-00000000-0000-0000-0000-000000000000")).status_code == 410
    await harness.wait_for(lambda: ("default", runner_id) not in harness.cluster.state.jobs)
    for path in ("/files", "/files/raw?path=x"):
        assert (await harness.http.get(f"/runners/{runner_id}{path}")).status_code == 410
    assert (
        await harness.http.post(f"/runners/{runner_id}/execute", json={"command": "true"})
    ).status_code == 410


async def test_inactivity_timeout_destroys_the_runner(harness: Harness) -> None:
    await harness.environment(10)
    runner_id = await harness.runner(10, inactivity_timeout=1)
    assert (await harness.http.patch(f"/runners/{runner_id}/files", json={"copy": []})).status_code == 204
    start = trio.current_time()
    await harness.wait_for(lambda: harness.service.pool.used_runner(runner_id) is None, within=5)
    assert trio.current_time() - start >= 0.9
    assert (await harness.http.get(f"/runners/{runner_id}/files")).status_code == 410
    await harness.wait_for(lambda: ("default", runner_id) not in harness.cluster.state.jobs)


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), admission=AdmissionSettings(wait_timeout=0.3))]
)
async def test_admission_waits_for_the_stream_then_says_nomad_unreachable(
    harness: Harness, settings: Settings
) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) > 0)
    harness.service.gate.report(StreamState.DOWN)
    start = trio.current_time()
    response = await harness.http.post("/runners", json={"executionEnvironmentId": 10})
    assert trio.current_time() - start >= 0.3
    assert response.status_code == 500
    assert response.json()["errorCode"] == "NOMAD_UNREACHABLE"
    assert response.headers["Retry-After"] == "5"

    async def recover() -> None:
        await trio.sleep(0.1)
        harness.service.gate.report(StreamState.UP)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(recover)
        admitted = await harness.http.post("/runners", json={"executionEnvironmentId": 10})
    assert admitted.status_code == 200, "a claim waits for the stream to come back"


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), admission=AdmissionSettings(wait_timeout=0.3))]
)
async def test_a_claim_whose_used_mark_does_not_reach_nomad_is_refused_and_its_runner_goes(
    harness: Harness, settings: Settings
) -> None:
    """A claim is answered once Nomad holds the runner's 'used' mark, so that a daemon taking over
    never lists it as idle. With every write answered 500 (the wait shortened, as the test is about
    it), the claim is NOMAD_UNREACHABLE and its runner never handed out; once Nomad answers again,
    its job is purged."""
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    idle = set(harness.service.pool.runners)
    trouble = Trouble(duration=5.0, errors=1.0, slow=0.0, max_delay=0.0, applied=0.0, seed=1)
    harness.cluster.config.trouble.begin(trouble)
    refused = await harness.http.post("/runners", json={"executionEnvironmentId": 10})
    assert refused.status_code == 500, refused.text
    assert refused.json()["errorCode"] == "NOMAD_UNREACHABLE"
    gone = idle - set(harness.service.pool.runners)
    assert len(gone) == 1, "the runner the claim took is no longer the pool's"
    (runner_id,) = gone
    await harness.wait_for(lambda: ("default", runner_id) not in harness.cluster.state.jobs)
    assert (await harness.http.post("/runners", json={"executionEnvironmentId": 10})).status_code == 200


@pytest.mark.parametrize("settings", [Settings(server=ServerSettings(port=0, token="s3cret"))])
async def test_token_is_required_but_for_health_and_version(harness: Harness, settings: Settings) -> None:
    base = str(harness.http.base_url)
    async with httpx.AsyncClient(base_url=base) as anonymous:
        for method, path in [
            ("GET", "/statistics/execution-environments"),
            ("POST", "/runners"),
            ("GET", "/execution-environments"),
            ("DELETE", "/runners/x"),
        ]:
            response = await anonymous.request(method, path)
            assert response.status_code == 401, path
        wrong = await anonymous.get("/execution-environments", headers={"Poseidon-Token": "nope"})
        assert wrong.status_code == 401
        assert (await anonymous.get("/version")).status_code == 200
        assert (await anonymous.get("/health")).status_code in (204, 503)
    assert (await harness.http.get("/execution-environments")).status_code == 200
    ws_url = base.replace("http", "ws") + "/runners/x/websocket?executionID=y"
    with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
        async with trio_websocket.open_websocket_url(ws_url):
            pass  # pragma: no cover
    assert rejected.value.status_code == 401
