"""``/api/v1/health/ready`` of whole daemons: an environment Nomad refuses leaves ``/health`` and
``/health/ready`` at 204 while the probe says CRITICAL (on purpose: see ``docs/api.md``); a stop
turns ready to 503 ``STOPPING`` at once; of an HA pair, the standby is 503 ``STANDBY`` and the
one that takes over turns 204 once its first listing is in."""

from __future__ import annotations

from functools import partial

import attrs
import httpx
import trio

from supervisor.base.faults import FaultKind
from supervisor.core.config import HaSettings, ServerSettings, Settings
from supervisor.ops.probe import probe
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from ..waiting import wait_until
from .conftest import Harness

READY = "/api/v1/health/ready"


async def in_memory(daemon: Daemon, path: str) -> httpx.Response:
    """What the daemon's API answers now, asked past its listener (closed once the stop began)."""
    transport = httpx.ASGITransport(app=daemon.switch)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return await http.get(path)


async def test_an_environment_nomad_refuses_is_critical_to_the_probe_and_no_503(harness: Harness) -> None:
    """The factory's fault: Nomad refuses the runner jobs of an environment it took before (its
    refills, here), while the pool still holds its idle runners."""
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    harness.service.faults.report(
        FaultKind.ENVIRONMENT_REFUSED,
        "10",
        "Nomad refuses the runner jobs of execution environment 10: a quota",
        "change the environment (PUT execution-environments/10) so that Nomad takes its job",
    )
    assert (await harness.http.get("/health")).status_code == 204, "Poseidon's /health: pools and stream"
    assert (await harness.http.get("/health/ready")).status_code == 204
    url = harness.daemon.addresses[0]
    code, text = await trio.to_thread.run_sync(partial(probe, url, token="", timeout=5, as_json=False))
    assert code == 2
    assert text.startswith("CRITICAL: Nomad refuses the runner jobs of execution environment 10: a quota; ")


async def test_a_stopping_daemon_is_not_ready_from_the_moment_its_stop_begins(harness: Harness) -> None:
    await harness.wait_for(harness.service.informer.is_synced)
    assert (await harness.http.get("/health/ready")).status_code == 204
    harness.daemon.stop()
    stopping = await in_memory(harness.daemon, READY)
    assert (stopping.status_code, stopping.json()["errorCode"]) == (503, "STOPPING")


async def test_the_standby_is_not_ready_and_the_one_that_takes_over_is(
    nursery: trio.Nursery, sim_config: SimConfig
) -> None:
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    environ = {"NOMAD_ADDR": ",".join(cluster.addresses)}
    ha = Settings(server=ServerSettings(port=0), ha=HaSettings(enabled=True))
    first, second = Daemon(ha, environ=environ), Daemon(attrs.evolve(ha), environ=environ)
    await nursery.start(first.run)
    await wait_until(lambda: first.service is not None and first.service.informer.is_synced(), within=10)
    await nursery.start(second.run)
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(first.addresses[0] + READY)).status_code == 204
        standby = await http.get(second.addresses[0] + READY)
        assert (standby.status_code, standby.json()["errorCode"]) == (503, "STANDBY")
        first.stop()
        stopping = await in_memory(first, READY)
        assert (stopping.status_code, stopping.json()["errorCode"]) == (503, "STOPPING")
        await wait_until(lambda: second.service is not None and second.service.informer.is_synced(), within=5)
        assert (await http.get(second.addresses[0] + READY)).status_code == 204
    second.stop()
