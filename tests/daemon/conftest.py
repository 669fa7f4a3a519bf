"""A daemon on 127.0.0.1 port 0 against a simulated cluster, both in the test's own trio run.

These tests run on the real clock, unlike the rest of the suite: the simulated cluster's exec runs
real processes (``sleep 2`` takes two real seconds), and an autojump clock would jump to the next
deadline, a request's or a test's own timeout among them, while such a process runs. Where a test's
load always keeps a harmless deadline nearest (the churn test's clients sleeping between cycles),
it runs on trio's MockClock with a small autojump threshold instead (``test_churn.py``). Either way a
test waits for a condition on the daemon's or the cluster's state with ``Harness.wait_for``, which
wakes on the task step that makes it true (``tests/waiting.py``), never by polling.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import jsonschema
import pytest
import trio
import trio_websocket
from loguru import logger

from supervisor.core.config import ServerSettings, Settings
from supervisor.core.environments import claim_meta
from supervisor.desk.service import RunnerService
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import TREE, Daemon
from supervisor.tree.spec import Tree

from ..waiting import wait_until

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "websocket.schema.json").read_text())
# The schema names no draft jsonschema knows ("http://json-schema.org/schema#"); it is draft 7 in form.
MESSAGES = jsonschema.Draft7Validator(SCHEMA)
ENVIRONMENT = {
    "image": "python:3.12-slim",
    "prewarmingPoolSize": 2,
    "cpuLimit": 100,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}


@attrs.define
class Harness:
    cluster: SimulatedCluster
    daemon: Daemon
    http: httpx.AsyncClient
    # The operator's own client of the cluster, for what an operator does beside the daemon.
    nomad: NomadClient

    @property
    def service(self) -> RunnerService:
        assert self.daemon.service is not None
        return self.daemon.service

    async def wait_for(self, condition: Callable[[], bool], *, within: float = 20.0) -> None:
        await wait_until(condition, within=within)

    async def restart_leader(self, downtime: float) -> None:
        """Through the simulator's fault-injection API, as an operator's restart would come."""
        async with httpx.AsyncClient() as http:
            url = f"{self.cluster.addresses[0]}/sim/v1/servers/{self.cluster.leader}/restart"
            await http.post(url, json={"downtime_s": downtime})

    async def firewall_agents(self) -> None:
        """Every client agent's port stops answering, as in a deployment where the clients are
        firewalled off from the daemon: exec goes through the servers."""
        for endpoint in self.cluster.endpoints.values():
            await self.cluster.set_agent_reachable(endpoint.name, False)

    async def environment(self, environment_id: int = 10, **fields: Any) -> None:
        response = await self.http.put(
            f"/execution-environments/{environment_id}", json={**ENVIRONMENT, **fields}
        )
        assert response.status_code in (201, 204), response.text
        size = fields.get("prewarmingPoolSize", ENVIRONMENT["prewarmingPoolSize"])
        await self.wait_for(lambda: self.idle(environment_id) >= min(size, 1))

    def claim_meta(self, runner: str) -> dict[str, str]:
        """The claim Nomad holds for the runner: its job's claim group's meta."""
        return claim_meta(self.cluster.state.jobs[("default", runner)].spec)

    def idle(self, environment_id: int) -> int:
        stats = self.service.pool.stats().get(environment_id)
        return stats.idle if stats else 0

    async def runner(self, environment_id: int = 10, inactivity_timeout: int = 0) -> str:
        await self.wait_for(lambda: self.idle(environment_id) > 0)
        response = await self.http.post(
            "/runners",
            json={"executionEnvironmentId": environment_id, "inactivityTimeout": inactivity_timeout},
        )
        assert response.status_code == 200, response.text
        return str(response.json()["runnerId"])

    async def execute(
        self, runner_id: str, stdin: list[str] | None = None, **body: Any
    ) -> list[dict[str, Any]]:
        """Run an execution to its end; every message is checked against websocket.schema.json."""
        response = await self.http.post(f"/runners/{runner_id}/execute", json=body)
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = []
        async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
            for line in stdin or []:
                await ws.send_message(line)
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                while True:
                    message = json.loads(await ws.get_message())
                    MESSAGES.validate(message)
                    messages.append(message)
        assert closed.value.reason is not None
        assert closed.value.reason.code == 1000, closed.value.reason
        return messages

    async def run_until_end(
        self, runner_id: str, command: str, during: Callable[[], Awaitable[object]]
    ) -> list[dict[str, Any]]:
        """Start ``command``, call ``during()`` once two messages (start and the first output) came,
        and read to the end; every message is checked against the schema."""
        response = await self.http.post(f"/runners/{runner_id}/execute", json={"command": command})
        messages: list[dict[str, Any]] = []
        async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
            messages.append(json.loads(await ws.get_message()))
            messages.append(json.loads(await ws.get_message()))
            await during()
            with trio.fail_after(20), pytest.raises(trio_websocket.ConnectionClosed):
                while True:
                    messages.append(json.loads(await ws.get_message()))
        for message in messages:
            MESSAGES.validate(message)
        return messages


def output(messages: list[dict[str, Any]], stream: str = "stdout") -> str:
    return "".join(m["data"] for m in messages if m["type"] == stream)


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(seed=11, nodes=2, alloc_start_delay=0.01, task_kill_delay=0.01, eval_delay=0.001)


@pytest.fixture
def settings() -> Settings:
    return Settings(server=ServerSettings(port=0))


@pytest.fixture
def tree() -> Tree:
    """The daemon's tree (a test may give it one whose child misbehaves)."""
    return TREE


@pytest.fixture
async def harness(
    nursery: trio.Nursery, sim_config: SimConfig, settings: Settings, tree: Tree
) -> AsyncIterator[Harness]:
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    async with daemon_on(cluster, nursery, settings, tree) as harness:
        yield harness


@contextlib.asynccontextmanager
async def daemon_on(
    cluster: SimulatedCluster, nursery: trio.Nursery, settings: Settings, tree: Tree = TREE
) -> AsyncIterator[Harness]:
    """The daemon started on a running cluster (one a test has written to first), with its
    clients; stopped at the end."""
    daemon = Daemon(settings, environ={"NOMAD_ADDR": ",".join(cluster.addresses)}, tree=tree)
    await nursery.start(daemon.run)
    base = daemon.addresses[0] + "/api/v1"
    headers = {"Poseidon-Token": settings.server.token} if settings.server.token else {}
    async with (
        httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http,
        NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as nomad,
    ):
        yield Harness(cluster, daemon, http, nomad)
    daemon.stop()


@pytest.fixture
def info_lines() -> Iterator[list[str]]:
    """The messages the daemon logs at INFO and above while the test runs."""
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO")
    yield lines
    logger.remove(sink)
