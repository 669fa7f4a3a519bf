"""What every scenario shares: a simulated cluster and a daemon in one trio run, a client of the
daemon's API, invariants, and the report of DESIGN.md §4.5 (a table, and JSON with ``--report``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio
import trio_websocket

from supervisor.core.config import ServerSettings, Settings
from supervisor.desk.service import RunnerService
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

ENVIRONMENT_ID = 10
# The scenarios' environment; its pool size is each scenario's own.
ENVIRONMENT: Final = {
    "image": "python:3.12-slim",
    "prewarmingPoolSize": 4,
    "cpuLimit": 100,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}
_SERVING: Final = "serving the API on "
EXIT_0: Final = [{"type": "exit", "data": 0}]


def terminal_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages that end an execution (there must be exactly one)."""
    return [m for m in messages if m["type"] in ("exit", "timeout", "error")]


def parse_arguments(
    description: str, default_runners: int, extra: Callable[[argparse.ArgumentParser], None] = lambda p: None
) -> argparse.Namespace:
    """Every scenario's options (``--runners``, ``--seed``, ``--report``, ``--plot``), and ``extra``'s."""
    parser = argparse.ArgumentParser(description=description)
    extra(parser)
    parser.add_argument("--runners", type=int, default=default_runners, help="prewarming pool size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--plot", type=Path, help="draw what happened here (PNG, or SVG by the suffix)")
    return parser.parse_args()


@attrs.define
class Scenario:
    name: str
    seed: int
    cluster: SimulatedCluster
    # None when the daemon runs as a process of its own (``daemon_restart``).
    daemon: Daemon | None
    http: httpx.AsyncClient
    # The operator's own client of the cluster, for what an operator does beside the daemon.
    nomad: NomadClient
    started: float = attrs.field(factory=time.monotonic)
    invariants: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    timeline: list[dict[str, Any]] = attrs.field(factory=list)
    # For the picture: the pool and the stream every 0.2 s, and each execution's start, end, outcome.
    samples: list[dict[str, Any]] = attrs.field(factory=list)
    lives: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def service(self) -> RunnerService:
        assert self.daemon is not None
        assert self.daemon.service is not None
        return self.daemon.service

    def event(self, event: str, **details: Any) -> None:
        self.timeline.append({"t": round(time.monotonic() - self.started, 3), "event": event, **details})

    def check(self, name: str, ok: bool, value: Any, limit: Any) -> None:
        self.invariants[name] = {"ok": bool(ok), "value": value, "limit": limit}

    async def wait_for(self, condition: Callable[[], bool], within: float) -> float | None:
        """Seconds until ``condition`` held, or None if it did not within ``within``."""
        start = time.monotonic()
        with trio.move_on_after(within):
            while not condition():
                await trio.sleep(0.05)
            return round(time.monotonic() - start, 3)
        return None

    async def create_environment(self, pool_size: int) -> float | None:
        """Create the scenario's environment; seconds until its pool was warm (None: not in 60 s)."""
        environment = {**ENVIRONMENT, "prewarmingPoolSize": pool_size}
        response = await self.http.put(f"/execution-environments/{ENVIRONMENT_ID}", json=environment)
        response.raise_for_status()
        return await self.wait_for(lambda: self.idle() == pool_size, within=60)

    async def warm_with_claims(self, pool_size: int, claims: int) -> list[str]:
        """Create the environment, claim ``claims`` runners, and wait for the pool to be warm again."""
        await self.create_environment(pool_size)
        claimed = [await self.claim() for _ in range(max(1, claims))]
        await self.wait_for(lambda: self.idle() == pool_size, within=60)
        self.event("pool warm, runners claimed", claimed=len(claimed))
        return claimed

    async def check_no_leaked_jobs(self) -> None:
        """Every runner job left in Nomad belongs to a runner the daemon knows."""

        def runner_jobs() -> set[str]:
            return {
                job_id
                for (_, job_id), job in self.cluster.state.jobs.items()
                if job_id.startswith(f"{ENVIRONMENT_ID}-") and not job.stop
            }

        await self.wait_for(lambda: runner_jobs() == set(self.service.pool.runners), within=30)
        leaked = sorted(runner_jobs() - set(self.service.pool.runners))
        self.check("leaked_runner_jobs", not leaked, len(leaked), 0)

    def idle(self) -> int:
        stats = self.service.pool.stats().get(ENVIRONMENT_ID)
        return stats.idle if stats else 0

    async def claim(self) -> str:
        response = await self.http.post("/runners", json={"executionEnvironmentId": ENVIRONMENT_ID})
        response.raise_for_status()
        return str(response.json()["runnerId"])

    async def claim_run_release(
        self, command: str = "echo ok", *, within: float = 30.0, claimed: Callable[[str], None] | None = None
    ) -> str:
        """Claim a runner as CodeOcean does (500 NOMAD_OVERLOAD: try again shortly; 410 on the
        execution: the runner is gone, claim another), run ``command`` in it and give it back;
        returns "exit 0", or what ended it otherwise. ``claimed`` is told each runner handed out."""
        with trio.move_on_after(within):
            while True:
                response = await self.http.post("/runners", json={"executionEnvironmentId": ENVIRONMENT_ID})
                if response.status_code == 500 and response.json().get("errorCode") == "NOMAD_OVERLOAD":
                    await trio.sleep(0.1)
                    continue
                if response.status_code != 200:
                    return json.dumps({"claim": response.status_code, "message": response.text[:200]})
                runner = response.json()["runnerId"]
                if claimed is not None:
                    claimed(runner)
                started = await self.http.post(f"/runners/{runner}/execute", json={"command": command})
                if started.status_code == 410:
                    continue
                started.raise_for_status()
                try:
                    ends = terminal_messages(await self.read_execution(started.json()["websocketUrl"]))
                except trio_websocket.ConnectionRejected as refused:
                    if refused.status_code != 410:
                        return json.dumps({"rejected": refused.status_code})
                    continue  # the runner went between the URL and the connection: nothing ran
                released = await self.http.delete(f"/runners/{runner}")
                if released.status_code != 410:
                    released.raise_for_status()
                return "exit 0" if ends == EXIT_0 else json.dumps(ends)
        return f"no runner within {within:g} s"

    async def execute(self, runner_id: str, command: str) -> list[dict[str, Any]]:
        """Every message of one execution, up to the WebSocket's close."""
        response = await self.http.post(f"/runners/{runner_id}/execute", json={"command": command})
        response.raise_for_status()
        return await self.read_execution(response.json()["websocketUrl"])

    async def read_execution(
        self,
        url: str,
        *,
        first_line: Callable[[], None] = lambda: None,
        opened: Callable[[], None] = lambda: None,
    ) -> list[dict[str, Any]]:
        """Every message of the execution at ``url``; ``opened()`` once its WebSocket's upgrade was
        accepted, ``first_line()`` once its first output came."""
        messages: list[dict[str, Any]] = []
        start = round(time.monotonic() - self.started, 3)
        async with trio_websocket.open_websocket_url(url) as ws:
            opened()
            try:
                while True:
                    messages.append(json.loads(await ws.get_message()))
                    if messages[-1]["type"] == "stdout" and sum(m["type"] == "stdout" for m in messages) == 1:
                        first_line()
            except trio_websocket.ConnectionClosed:
                pass
        ends = terminal_messages(messages)
        outcome = ends[-1]["type"] if ends else "closed"
        self.lives.append(
            {"start": start, "end": round(time.monotonic() - self.started, 3), "outcome": outcome}
        )
        return messages

    def plot(self, path: Path) -> None:
        """The picture of what happened (``picture.py``): pool, stream, events and executions."""
        from picture import draw  # matplotlib is loaded only for a picture

        draw(
            path,
            title=f"{self.name} (seed {self.seed})",
            samples=self.samples,
            timeline=self.timeline,
            lives=self.lives,
            invariants=self.invariants,
        )

    def sample(self) -> None:
        """Note the pool's fill and the stream's state now (for the picture)."""
        if self.daemon is None or self.daemon.service is None:
            return
        service = self.daemon.service
        stats = service.pool.stats().values()
        self.samples.append(
            {
                "t": round(time.monotonic() - self.started, 3),
                "idle": sum(s.idle for s in stats),
                "used": sum(s.used for s in stats),
                "stream": service.gate.state.value,
            }
        )

    def report(self, path: Path | None, plot: Path | None = None) -> bool:
        ok = all(entry["ok"] for entry in self.invariants.values())
        width = max(len(name) for name in self.invariants)
        print(f"scenario {self.name} (seed {self.seed})")
        print(f"  {'invariant':<{width}}  {'ok':<4}  {'value':<28}  limit")
        for name, entry in self.invariants.items():
            mark = "yes" if entry["ok"] else "NO"
            value, limit = json.dumps(entry["value"]), json.dumps(entry["limit"])
            print(f"  {name:<{width}}  {mark:<4}  {value:<28}  {limit}")
        print("PASS" if ok else "FAIL")
        if path is not None:
            document = {
                "scenario": self.name,
                "seed": self.seed,
                "ok": ok,
                "invariants": self.invariants,
                "timeline": self.timeline,
            }
            path.write_text(json.dumps(document, indent=2) + "\n")
        if plot is not None:
            self.plot(plot)
        return ok


@asynccontextmanager
async def open_scenario(
    name: str,
    seed: int,
    config: SimConfig,
    settings: Settings | None = None,
    *,
    first_server: int = 0,
    before_start: Callable[[NomadClient], Awaitable[None]] | None = None,
) -> AsyncIterator[Scenario]:
    """A cluster and a daemon at ``settings`` (default: the defaults), whose Nomad address lists every
    server, ``first_server`` first (the one its name resolves to); ``before_start`` prepares the
    cluster, through Nomad's API, before the daemon starts."""
    async with trio.open_nursery() as nursery:
        cluster = await nursery.start(SimulatedCluster(config).run)
        if before_start is not None:
            async with NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as prepare:
                await before_start(prepare)
        addresses = cluster.addresses[first_server:] + cluster.addresses[:first_server]
        environ = {"NOMAD_ADDR": ",".join(addresses)}
        daemon = Daemon(settings or Settings(server=ServerSettings(port=0)), environ=environ)
        await nursery.start(daemon.run)
        async with (
            httpx.AsyncClient(base_url=daemon.addresses[0] + "/api/v1", timeout=30) as http,
            NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as nomad,
        ):
            scenario = Scenario(name, seed, cluster, daemon, http, nomad)

            async def sample() -> None:
                while True:
                    scenario.sample()
                    await trio.sleep(0.2)

            nursery.start_soon(sample)
            yield scenario
        daemon.stop()
        nursery.cancel_scope.cancel("scenario over")


async def start_daemon(
    cluster: SimulatedCluster,
    log: Path,
    settings: dict[str, str] | None = None,
    *,
    addresses: list[str] | None = None,
) -> tuple[trio.Process, str]:
    """``supervisor run`` against the cluster (at ``addresses`` if given: a proxy's), at its
    defaults but for ``settings`` (``SUPERVISOR_<SECTION>_<KEY>`` variables); the process and its
    API's base URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    env.update(settings or {})
    env["NOMAD_ADDR"] = ",".join(addresses or cluster.addresses)
    argv = [sys.executable, "-m", "supervisor", "run", "--listen", "127.0.0.1:0"]
    sink = await trio.open_file(log, "wb")
    daemon = await trio.lowlevel.open_process(argv, stdout=sink.wrapped, stderr=subprocess.STDOUT, env=env)
    await sink.aclose()
    with trio.fail_after(30):
        while True:
            for line in (await trio.Path(log).read_text(errors="replace")).splitlines():
                if _SERVING in line:
                    return daemon, line.split(_SERVING, 1)[1].split(",")[0].strip() + "/api/v1"
            await trio.sleep(0.05)


@attrs.define
class DaemonLogs:
    """A directory for the logs of a scenario's daemons, kept only if the scenario fails."""

    path: Path
    ok: bool = False


@contextmanager
def daemon_logs(prefix: str) -> Iterator[DaemonLogs]:
    """The daemons' logs in a directory of their own: removed once the scenario holds its
    invariants (``ok`` set), kept and named on stderr when it does not or when it raises."""
    logs = DaemonLogs(Path(tempfile.mkdtemp(prefix=prefix)))
    try:
        yield logs
    finally:
        if logs.ok:
            shutil.rmtree(logs.path, ignore_errors=True)
        else:
            print(f"daemon logs kept in {logs.path}", file=sys.stderr)


def run(main: Callable[[argparse.Namespace], Awaitable[bool]], args: argparse.Namespace) -> None:
    sys.exit(0 if trio.run(main, args) else 1)
