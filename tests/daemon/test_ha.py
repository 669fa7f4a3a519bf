"""Two daemons with ``[ha]`` against one simulated cluster, in the test's trio run: one serves, the
other answers 503 ``STANDBY`` everywhere but ``/metrics``, which says its role; a graceful stop of
the active hands over at once."""

from __future__ import annotations

from functools import partial

import attrs
import httpx
import trio

from supervisor.core.config import HaSettings, ServerSettings, Settings
from supervisor.ops.probe import probe
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from ..test_observability import convention_violations, role_of
from ..waiting import wait_until

HA_ON = Settings(server=ServerSettings(port=0), ha=HaSettings(enabled=True))


async def _health(http: httpx.AsyncClient, daemon: Daemon) -> httpx.Response:
    return await http.get(f"{daemon.addresses[0]}/api/v1/health")


async def _metrics(http: httpx.AsyncClient, daemon: Daemon) -> str:
    response = await http.get(f"{daemon.addresses[0]}/metrics")
    assert response.status_code == 200
    return response.text


async def test_one_daemon_acts_the_other_stands_by_and_a_stop_hands_over(
    nursery: trio.Nursery, sim_config: SimConfig
) -> None:
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    environ = {"NOMAD_ADDR": ",".join(cluster.addresses)}
    first = Daemon(HA_ON, environ=environ)
    await nursery.start(first.run)
    await wait_until(lambda: first.service is not None and first.service.informer.is_synced(), within=10)
    second = Daemon(attrs.evolve(HA_ON), environ=environ)
    await nursery.start(second.run)
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await _health(http, first)).status_code == 204
        standby = await _health(http, second)
        assert standby.status_code == 503
        assert standby.json()["errorCode"] == "STANDBY"
        assert "retry-after" in standby.headers
        claim = await http.post(f"{second.addresses[0]}/api/v1/runners", json={"executionEnvironmentId": 1})
        assert claim.status_code == 503, "the standby takes no claim"
        code, text = await trio.to_thread.run_sync(
            partial(probe, second.addresses[0], token="", timeout=5, as_json=False)
        )
        assert (code, text.split(":")[0]) == (0, "OK"), "a standby is healthy as a standby"
        assert "standby" in text
        standby_metrics = await _metrics(http, second)
        assert convention_violations(standby_metrics) == []
        assert role_of(standby_metrics) == "standby"
        assert "supervisor_runners" not in standby_metrics, "a standby has no pools to tell"
        assert 'route="/api/v1/health",status="503"' not in standby_metrics, "no route but /metrics"
        assert 'method="GET",route="unmatched",status="503"' in standby_metrics
        assert role_of(await _metrics(http, first)) == "active"
        first.stop()
        with trio.fail_after(5):
            await first.ended.wait()
        await wait_until(lambda: second.service is not None and second.service.informer.is_synced(), within=2)
        assert (await _health(http, second)).status_code == 204
        assert role_of(await _metrics(http, second)) == "active"
    second.stop()
