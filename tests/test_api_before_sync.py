"""Before its first listing of Nomad, the daemon does not know which runners a previous run
claimed: a request for a runner it does not know yet waits at the gate, and is never a 410."""

from __future__ import annotations

import httpx
import trio

from supervisor.api.app import create_app
from supervisor.core.config import AdmissionSettings, Settings
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
