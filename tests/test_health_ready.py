"""``GET /api/v1/health/ready``, the load balancer's check, in each state of a daemon: 204 while it
acts and serves claims, whatever its pools and faults; 503 with its own errorCode while it starts,
stops, or stands by. The app is called in memory (httpx's ASGI transport); no time passes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from supervisor.api.app import create_app
from supervisor.api.standby import RoleSwitch
from supervisor.base.faults import FaultKind
from supervisor.base.levels import StreamState
from supervisor.core.config import ServerSettings, Settings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.orders import SetEnvironment
from supervisor.desk.service import RunnerService
from supervisor.ops.metrics import DaemonMetrics

from .nomad_double import NomadDouble

READY = "/api/v1/health/ready"
HEALTH = "/api/v1/health"
ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 4, 100.0, 256, False, ())


class NomadWithLeader(NomadDouble):
    """Answers the health details' one call."""

    async def leader(self, *, attempts: int | None = None, http_timeout: float | None = None) -> str:
        await trio.lowlevel.checkpoint()
        return "127.0.0.1:4647"


@pytest.fixture
def service(nursery: trio.Nursery) -> RunnerService:
    return RunnerService(NomadWithLeader(), Settings(), execution_nursery=nursery)


@pytest.fixture
async def http(service: RunnerService) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(service, Settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def acting(service: RunnerService) -> None:
    """The first listing is in and the stream followed: the daemon serves claims."""
    service.informer.synced.set()
    service.gate.report(StreamState.UP)


def refusal(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["errorCode"]


async def test_ready_once_the_first_listing_is_reconciled(
    service: RunnerService, http: httpx.AsyncClient
) -> None:
    starting = await http.get(READY)
    assert refusal(starting) == (503, "STARTING")
    assert "first listing of Nomad" in starting.json()["message"]
    acting(service)
    ready = await http.get(READY)
    assert ready.status_code == 204
    assert ready.content == b""


async def test_not_ready_from_the_moment_the_stop_begins(
    service: RunnerService, http: httpx.AsyncClient
) -> None:
    acting(service)
    assert (await http.get(READY)).status_code == 204
    service.begin_stop()
    stopping = await http.get(READY)
    assert refusal(stopping) == (503, "STOPPING")
    assert "stopping" in stopping.json()["message"]


async def test_a_depleted_pool_makes_health_503_and_leaves_ready_204(
    service: RunnerService, http: httpx.AsyncClient
) -> None:
    acting(service)
    service.effects.tell(SetEnvironment(ENVIRONMENT))  # its pool of 4 starts empty: no factory runs
    assert service.pool.stats()[10].idle == 0
    assert refusal(await http.get(HEALTH)) == (503, "PREWARMING_POOL_DEPLETING")
    assert (await http.get(READY)).status_code == 204, "a refill is no reason to send traffic elsewhere"


async def test_a_refused_environment_is_critical_in_the_details_and_no_health_503(
    service: RunnerService, http: httpx.AsyncClient
) -> None:
    """Poseidon's /health (which CodeOcean's /ping reads) tells the pools and the stream only: an
    environment Nomad refuses is the operator's, told by the details and the probe."""
    acting(service)
    service.faults.report(FaultKind.ENVIRONMENT_REFUSED, "11", "Nomad refuses environment 11", "mend it")
    details = (await http.get("/api/v1/health/details")).json()
    assert details["status"] == "critical"
    assert details["checks"]["faults"]["faults"][0]["kind"] == "environment_refused"
    assert (await http.get(HEALTH)).status_code == 204
    assert (await http.get(READY)).status_code == 204


async def test_the_standby_is_not_ready_and_a_daemon_before_its_term_is_starting() -> None:
    metrics = DaemonMetrics(lambda: None)
    for ha, code in [(True, "STANDBY"), (False, "STARTING")]:
        switch = RoleSwitch(retry_after=3.3, metrics=metrics, ha=ha)
        transport = httpx.ASGITransport(app=switch)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            response = await http.get(READY)
            assert refusal(response) == (503, code), ha
            assert response.headers["retry-after"] == "3"
            assert refusal(await http.get(HEALTH)) == (503, "STANDBY"), "the other routes are unchanged"


async def test_the_route_is_open_and_described_like_the_other_health_routes(service: RunnerService) -> None:
    settings = Settings(server=ServerSettings(token="s3cret"))
    transport = httpx.ASGITransport(app=create_app(service, settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        assert refusal(await http.get(READY)) == (503, "STARTING"), "no token needed"
        document = (await http.get("/api/v1/openapi.json")).json()
    operation = document["paths"][READY]["get"]
    assert operation["operationId"] == "healthReady"
    assert "security" not in operation
    assert set(operation["responses"]) == {"204", "503"}
    codes = document["components"]["schemas"]["ServerError"]["properties"]["errorCode"]["enum"]
    assert {"STANDBY", "STARTING", "STOPPING"} <= set(codes)
