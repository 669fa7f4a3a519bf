"""The status codes of swagger.yaml that the other API tests do not reach."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio_websocket

from supervisor.base.levels import StreamState
from supervisor.core.config import AdmissionSettings, ServerSettings, Settings

from .conftest import ENVIRONMENT, Harness

RUNNER = "10-00000000-0000-0000-0000-000000000000"
ROUTES = [
    ("GET", "/statistics/execution-environments"),
    ("GET", "/health/details"),
    ("POST", "/runners"),
    ("DELETE", f"/runners/{RUNNER}"),
    ("GET", f"/runners/{RUNNER}/files"),
    ("PATCH", f"/runners/{RUNNER}/files"),
    ("GET", f"/runners/{RUNNER}/files/raw?path=x"),
    ("POST", f"/runners/{RUNNER}/execute"),
    ("GET", "/execution-environments"),
    ("GET", "/execution-environments/10"),
    ("PUT", "/execution-environments/10"),
    ("DELETE", "/execution-environments/10"),
]


@pytest.mark.parametrize("settings", [Settings(server=ServerSettings(port=0, token="s3cret"))])
async def test_every_route_but_health_and_version_needs_the_token(
    harness: Harness, settings: Settings
) -> None:
    async with httpx.AsyncClient(base_url=str(harness.http.base_url)) as anonymous:
        for method, path in ROUTES:
            response = await anonymous.request(method, path.lstrip("/"))
            assert response.status_code == 401, (method, path)
            assert response.content == b"", "Poseidon answers 401 without a body"


@pytest.mark.parametrize(
    "path",
    [
        "/execution-environments/x",
        "/execution-environments/-1",
        "/execution-environments/²",
        "/execution-environments/18446744073709551616",
    ],
)
@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_environment_ids_must_be_integers(harness: Harness, method: str, path: str) -> None:
    response = await harness.http.request(method, path.lstrip("/"), json=ENVIRONMENT)
    assert response.status_code == 400
    assert "executionEnvironmentId must be an integer from 0" in response.json()["message"]


async def test_a_released_runner_is_gone_for_every_route(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    pending = await harness.http.post(f"/runners/{runner}/execute", json={"command": "true"})
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204
    patch = await harness.http.patch(f"/runners/{runner}/files", json={"delete": ["./*"]})
    assert (patch.status_code, patch.json()) == (410, {"message": "no runner found with this id"})
    with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
        async with trio_websocket.open_websocket_url(pending.json()["websocketUrl"]):
            pass  # pragma: no cover
    assert rejected.value.status_code == 404, "a released runner takes its pending executions with it"


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), admission=AdmissionSettings(wait_timeout=0.2))]
)
async def test_new_executions_wait_at_the_admission_gate(harness: Harness, settings: Settings) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    harness.service.gate.report(StreamState.DOWN)
    refused = await harness.http.post(f"/runners/{runner}/execute", json={"command": "true"})
    assert refused.status_code == 500
    assert refused.json()["errorCode"] == "NOMAD_UNREACHABLE"
    assert refused.headers["Retry-After"]
    harness.service.gate.report(StreamState.UP)
    with trio.fail_after(10):
        assert (
            await harness.http.post(f"/runners/{runner}/execute", json={"command": "true"})
        ).status_code == 200


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), admission=AdmissionSettings(wait_timeout=0.2))]
)
async def test_an_execution_url_handed_out_before_a_stream_loss_waits_at_the_gate(
    harness: Harness, settings: Settings
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    prepared = await harness.http.post(f"/runners/{runner}/execute", json={"command": "echo ran"})
    assert prepared.status_code == 200
    harness.service.gate.report(StreamState.DOWN)
    with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
        async with trio_websocket.open_websocket_url(prepared.json()["websocketUrl"]):
            pass  # pragma: no cover
    assert rejected.value.status_code == 500
    assert b"NOMAD_UNREACHABLE" in (rejected.value.body or b"")
    assert harness.service.executions.running_count == 0, "nothing started while the stream was down"
    harness.service.gate.report(StreamState.UP)
    async with trio_websocket.open_websocket_url(prepared.json()["websocketUrl"]) as ws:
        assert json.loads(await ws.get_message()) == {"type": "start"}, "the same URL works after Retry-After"
