"""Before its first listing of Nomad, the daemon does not know which runners a previous run
claimed: a request for a runner it does not know yet waits at the gate, and is never a 410."""

from __future__ import annotations

import httpx
import trio

from supervisor.api.app import create_app
from supervisor.base.levels import StreamState
from supervisor.core.config import AdmissionSettings, Settings
from supervisor.core.environments import environment_from_dict
from supervisor.core.orders import SetEnvironment
from supervisor.desk.service import RunnerService

from .nomad_double import NomadDouble


async def test_an_unknown_runner_before_the_first_listing_is_not_gone(nursery: trio.Nursery) -> None:
    settings = Settings(admission=AdmissionSettings(wait_timeout=0.2))
    service = RunnerService(NomadDouble(), settings, execution_nursery=nursery)
    app = create_app(service, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        patch = await http.patch("/api/v1/runners/10-x/files", json={"delete": ["a"]})
        release = await http.delete("/api/v1/runners/10-x")
        service.informer.synced.set()
        after = await http.delete("/api/v1/runners/10-x")
    for early in (patch, release):
        assert early.status_code == 500, early.text
        assert early.json()["errorCode"] == "NOMAD_UNREACHABLE"
        assert "Retry-After" in early.headers
    assert after.status_code == 410, "once the listing is in, an unknown runner is gone"


async def test_the_environments_asked_for_before_the_first_listing_are_those_it_brings(
    nursery: trio.Nursery,
) -> None:
    # A client asks as soon as the port answers: the list waits for the daemon's first listing of
    # Nomad rather than answering what the pool knows so far (nothing, after a restart or a switch).
    settings = Settings()
    service = RunnerService(NomadDouble(), settings, execution_nursery=nursery)
    app = create_app(service, settings)
    environment = environment_from_dict(
        {
            "id": 10,
            "image": "python:3.12-slim",
            "prewarmingPoolSize": 0,
            "cpuLimit": 20,
            "memoryLimit": 256,
            "networkAccess": False,
            "exposedPorts": [],
        }
    )
    answers: dict[str, httpx.Response] = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:

        async def ask(path: str) -> None:
            answers[path] = await http.get(path)

        async with trio.open_nursery() as asking:
            for path in ("/api/v1/execution-environments", "/api/v1/execution-environments/10"):
                asking.start_soon(ask, path)
            await trio.sleep(settings.admission.wait_timeout / 2)
            assert answers == {}, "answered before the first listing"
            service.effects.tell(SetEnvironment(environment))  # what the first listing brings
            service.informer.synced.set()
            service.gate.report(StreamState.UP)
    listed = answers["/api/v1/execution-environments"]
    one = answers["/api/v1/execution-environments/10"]
    assert listed.status_code == 200
    assert listed.json() == {"executionEnvironments": [environment.to_api()]}
    assert one.status_code == 200
    assert one.json() == environment.to_api()
