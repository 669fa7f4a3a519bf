"""Prometheus itself over a live daemon: alerts.yml's rules fire and resolve as the daemon's figures
move, and every panel of grafana-dashboard.json finds data.

A real ``prometheus`` (Debian's package; ``scripts/check.py`` installs it as root) scrapes, every
second, a daemon on a simulated cluster, both in this test's trio run and serving on 127.0.0.1 as
tests/daemon's do, and evaluates a copy of alerts.yml whose every ``for:`` is 2 s and whose stream
grace is 3 s instead of 30 s (the daemon gets ``health.stream_down_grace = 3`` to match): the
thresholds stay the shipped ones, only the waits shrink, so that the run takes seconds. The pool
depletes because the cluster's one node holds exactly the pool and the environment's template job:
each claimed runner's replacement finds no room until runners are released. The stream goes down
when the cluster's one server restarts through the simulator's fault-injection API.

Real clock, as in tests/daemon: Prometheus is another process, whose state is polled through its
HTTP API (``/api/v1/alerts``, ``/api/v1/query``). The module runs in one xdist group, so that one
worker holds its Prometheus.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
import trio_websocket

from supervisor.core.config import HealthSettings, ServerSettings, Settings
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from ..waiting import wait_until
from .prometheus import JOB, STREAM_GRACE, PrometheusApi, running_prometheus, write_config

pytestmark = pytest.mark.xdist_group("prometheus")

DASHBOARD: Final = Path(__file__).resolve().parents[2] / "scripts" / "monitoring" / "grafana-dashboard.json"
ENVIRONMENT: Final = 10
POOL: Final = 4
ENVIRONMENT_BODY: Final = {
    "image": "python:3.12-slim",
    "prewarmingPoolSize": POOL,
    "cpuLimit": 100,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}
# Rules that stay quiet all along the run, the daemon active and on Nomad throughout.
QUIET: Final = (
    "SupervisorNoActiveDaemon",
    "SupervisorSeveralActiveDaemons",
    "SupervisorTargetDown",
    "SupervisorPermanentFault",
    "SupervisorExecutionErrors",
    "SupervisorOnSimulatedCluster",
)
# One server (its restart takes the stream down), one node with room for the pool and the
# environment's template job (it runs one container, as Poseidon's does) and no more.
SIM: Final = SimConfig(
    seed=7,
    servers=1,
    nodes=1,
    node_capacity=POOL + 1,
    alloc_start_delay=0.01,
    task_kill_delay=0.01,
    eval_delay=0.001,
)
SETTINGS: Final = Settings(
    server=ServerSettings(port=0), health=HealthSettings(stream_down_grace=STREAM_GRACE)
)


def panel_queries() -> list[tuple[str, str]]:
    """Every panel's title and query in the dashboard, rows' nested panels included."""
    queries: list[tuple[str, str]] = []
    pending: list[dict[str, Any]] = list(json.loads(DASHBOARD.read_text())["panels"])
    while pending:
        panel = pending.pop(0)
        pending.extend(panel.get("panels", []))
        queries.extend((panel["title"], target["expr"]) for target in panel.get("targets", []))
    return queries


def concrete(expr: str, window: str) -> str:
    """``expr`` with Grafana's variables as Grafana would fill them here: the job, one environment,
    and ``window`` for the rate interval and the dashboard's range."""
    for variable, value in (
        ("$__rate_interval", window),
        ("$__range", window),
        ("$job", JOB),
        ("$environment", str(ENVIRONMENT)),
    ):
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


async def claim(api: httpx.AsyncClient, environment_id: int = ENVIRONMENT) -> httpx.Response:
    return await api.post("/runners", json={"executionEnvironmentId": environment_id, "inactivityTimeout": 0})


async def execute(api: httpx.AsyncClient, runner: str, command: str) -> list[dict[str, Any]]:
    """Run ``command`` to its end; its messages."""
    response = await api.post(f"/runners/{runner}/execute", json={"command": command})
    assert response.status_code == 200, response.text
    messages = []
    async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
        with pytest.raises(trio_websocket.ConnectionClosed):
            while True:
                messages.append(json.loads(await ws.get_message()))
    return messages


async def test_alerts_fire_and_resolve_and_panels_find_data(nursery: trio.Nursery, tmp_path: Path) -> None:
    cluster = await nursery.start(SimulatedCluster(SIM).run)
    daemon = Daemon(SETTINGS, environ={"NOMAD_ADDR": ",".join(cluster.addresses)})
    await nursery.start(daemon.run)
    write_config(tmp_path, daemon.addresses[0].removeprefix("http://"))

    def idle() -> int:
        assert daemon.service is not None
        stats = daemon.service.pool.stats().get(ENVIRONMENT)
        return stats.idle if stats else 0

    async def pool_full() -> None:
        try:
            await wait_until(lambda: idle() == POOL, within=10)
        except trio.TooSlowError:
            pytest.fail(f"{idle()} of {POOL} idle: the node's room is for the pool and the template job only")

    async with (
        running_prometheus(tmp_path) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as prometheus_http,
        httpx.AsyncClient(base_url=daemon.addresses[0] + "/api/v1", timeout=30) as api,
    ):
        prometheus = PrometheusApi(prometheus_http)
        started = trio.current_time()
        # Prometheus applies its targets on a 5 s tick, so its first scrape may come seconds after
        # its start: until then the rules on absent series hold, and with for: at 2 s they fire.
        # The quiet rules are watched from the first scrape on.
        await prometheus.wait_scraped(f'up{{job="{JOB}"}} == 1')
        scraped = trio.current_time()
        response = await api.put(f"/execution-environments/{ENVIRONMENT}", json=ENVIRONMENT_BODY)
        assert response.status_code == 201, response.text
        await pool_full()

        # The environment's series, each at 0, reach Prometheus before any work: counted from 0, the
        # work shows in rates and increases (a series first seen at 1 would not).
        await prometheus.wait_scraped(f'supervisor_claims_total{{environment="{ENVIRONMENT}"}}')

        # Work of every kind the dashboard shows: claims, a file each way, an execution.
        first = (await claim(api)).json()["runnerId"]
        content = base64.b64encode(b"Hello, runner!\n").decode()
        copy = {"copy": [{"path": "hello.txt", "content": content}]}
        patched = await api.patch(f"/runners/{first}/files", json=copy)
        assert patched.status_code == 204, patched.text
        raw = await api.get(f"/runners/{first}/files/raw", params={"path": "hello.txt"})
        assert raw.content == b"Hello, runner!\n"
        messages = await execute(api, first, "cat hello.txt")
        assert messages[-1] == {"type": "exit", "data": 0}
        assert (await claim(api, 99)).status_code == 404

        # Claims take runners that the full node cannot replace: 1 idle of 4 is under half.
        claimed = [first] + [(await claim(api)).json()["runnerId"] for _ in range(2)]
        assert idle() == 1
        (depleting,) = await prometheus.wait_firing("PrewarmingPoolDepleting")
        assert depleting["labels"]["environment"] == str(ENVIRONMENT)
        assert depleting["labels"]["severity"] == "warning"
        assert float(depleting["value"]) == 1
        for runner in claimed:
            assert (await api.delete(f"/runners/{runner}")).status_code == 204
        await prometheus.wait_resolved("PrewarmingPoolDepleting")
        await pool_full()

        # The one server restarts: the stream is down past the grace, then followed again.
        async with httpx.AsyncClient(base_url=cluster.addresses[0]) as sim:
            restart = f"/sim/v1/servers/{cluster.leader}/restart"
            restarted = await sim.post(restart, json={"downtime_s": 2 * STREAM_GRACE})
            assert restarted.status_code == 200, restarted.text
        (down,) = await prometheus.wait_firing("SupervisorEventStreamDown")
        assert down["labels"]["severity"] == "critical"
        assert float(down["value"]) > STREAM_GRACE
        await prometheus.wait_resolved("SupervisorEventStreamDown")
        (up,) = await prometheus.query(f'supervisor_event_stream_up{{job="{JOB}"}}')
        assert up["value"][1] == "1"

        # Every panel's query over the whole run, as Grafana would send it.
        window = f"{math.ceil(trio.current_time() - started) + 5}s"
        empty = []
        for title, expr in panel_queries():
            values = [float(sample["value"][1]) for sample in await prometheus.query(concrete(expr, window))]
            if not any(not math.isnan(value) for value in values):
                empty.append(f"{title}: {expr}")
        assert not empty, "panels without data:\n" + "\n".join(empty)

        # The rules that read the job's labels find the daemon as it is: active, scraped, on Nomad.
        # Prometheus' ALERTS series holds every pending or firing alert of the run. (SupervisorMemory-
        # Growing is left out: this process's memory over seconds, with its for: at 2 s, is no trend.)
        quiet, since = "|".join(QUIET), f"{math.floor(trio.current_time() - scraped - 1)}s"
        depleting_seen = f'count_over_time(ALERTS{{alertname="PrewarmingPoolDepleting"}}[{since}])'
        assert await prometheus.query(depleting_seen)
        assert not await prometheus.query(f'count_over_time(ALERTS{{alertname=~"{quiet}"}}[{since}])')
    daemon.stop()
