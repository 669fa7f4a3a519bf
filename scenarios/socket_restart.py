"""The daemon restarts under CodeOcean-like load on a socket systemd passed: nothing is refused.

    python scenarios/socket_restart.py [--runners N] [--clients C] [--seed S] [--report FILE]

The scenario plays systemd's part: it binds the API's listening socket itself and starts
``supervisor run`` (at its defaults) as socket activation does, the socket as descriptor 3 with
``LISTEN_FDS=1`` and ``LISTEN_PID`` the daemon's pid, against the simulated cluster, which outlives
the daemon. ``--clients`` clients claim a runner, copy a file into it, run a command that reads it,
and give the runner back, over and over, each request on a connection of its own. Two executions
that end within the graceful stop and two that would run for a minute are running when the daemon
gets SIGTERM; once it has exited, a new one starts on the same socket, and the load goes on.

Invariants: no connection is refused; every request sent while no daemon served is answered once
the new one does (the figure: how many); the short executions exit 0; the long ones end as the
graceful stop ends them (the client reads ``{"type":"error","data":"the supervisor is shutting
down"}`` and the WebSocket closes with 1001); an execution URL handed out before the stop and
connected to after it is answered (it names an execution the new daemon never knew: the client
asks for another); the load goes on after the restart, and no runner job leaks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio_websocket
from harness import ENVIRONMENT, ENVIRONMENT_ID, EXIT_0, Scenario, daemon_logs, parse_arguments, run

from supervisor.nomad import NomadClient, NomadSettings
from supervisor.simulator import SimConfig, SimulatedCluster

_SERVING = "serving the API on "
# systemd's part once it has forked: the socket as descriptor 3, LISTEN_PID the pid that execs.
_SHIM = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if fd != 3:\n"
    "    os.dup2(fd, 3)\n"
    "    os.close(fd)\n"
    "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1', LISTEN_FDNAMES='supervisor.socket')\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'supervisor', 'run'])\n"
)
# Answers a client tries again after Retry-After, as CodeOcean's client is told to.
_TRY_AGAIN = {"NOMAD_OVERLOAD", "NOMAD_UNREACHABLE"}
SHUTTING_DOWN = [{"type": "error", "data": "the supervisor is shutting down"}]


@attrs.define
class Sent:
    """One request, or one WebSocket's opening: when it was sent, and its answer or failure."""

    what: str
    sent: float
    answered: float | None = None
    status: int | None = None
    failure: str = ""


@attrs.define
class Load:
    """Every request the clients sent, and the restart's moments (monotonic seconds)."""

    base: str
    requests: list[Sent] = attrs.field(factory=list)
    cycles_before: int = 0
    cycles_after: int = 0
    sigterm: float = 0.0
    exited: float = 0.0
    serving_again: float = 0.0
    stale_urls: list[int] = attrs.field(factory=list)
    done: bool = False

    async def request(self, method: str, path: str, **options: Any) -> httpx.Response | None:
        """``method path`` on a connection of its own; None when it failed (noted)."""
        entry = Sent(f"{method} {path.split('/')[1]}", time.monotonic())
        self.requests.append(entry)
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=self.base, timeout=60, limits=limits) as http:
            try:
                response = await http.request(method, path, **options)
            except httpx.ConnectError as error:
                entry.failure = f"refused: {error}"  # ECONNREFUSED, or no connection in time
                return None
            except httpx.HTTPError as error:
                entry.failure = f"dropped: {type(error).__name__}"
                return None
        entry.answered, entry.status = time.monotonic(), response.status_code
        return response

    async def answered(self, method: str, path: str, **options: Any) -> httpx.Response | None:
        """As a client: a 500 that says try again is tried again after its Retry-After."""
        while True:
            response = await self.request(method, path, **options)
            if response is None or response.status_code != 500:
                return response
            if response.json().get("errorCode") not in _TRY_AGAIN:
                return response
            await trio.sleep(float(response.headers.get("retry-after", "1")))

    async def execution(
        self, runner: str, command: str, output: trio.Event | None = None
    ) -> list[dict[str, Any]] | None:
        """Run ``command``: its messages, or None when its URL named an execution the daemon does
        not know (handed out by the daemon before); ``output`` set at its first output."""
        response = await self.answered("POST", f"/runners/{runner}/execute", json={"command": command})
        if response is None or response.status_code != 200:
            return None
        return await self.connect(response.json()["websocketUrl"], output)

    async def connect(self, url: str, output: trio.Event | None = None) -> list[dict[str, Any]] | None:
        """The messages of the execution at ``url``; None when it was refused."""
        entry = Sent("WebSocket", time.monotonic())
        self.requests.append(entry)
        messages: list[dict[str, Any]] = []
        try:
            async with trio_websocket.open_websocket_url(url) as ws:
                entry.answered, entry.status = time.monotonic(), 101
                try:
                    while True:
                        messages.append(json.loads(await ws.get_message()))
                        if output is not None and messages[-1]["type"] == "stdout":
                            output.set()
                except trio_websocket.ConnectionClosed as closed:
                    code = closed.reason.code if closed.reason else None
                    messages.append({"type": "closed", "data": code})
        except trio_websocket.ConnectionRejected as rejected:
            entry.answered, entry.status = time.monotonic(), rejected.status_code
            self.stale_urls.append(rejected.status_code or 0)
            return None
        except ConnectionRefusedError as error:
            entry.failure = f"refused: {error}"
            return None
        except (OSError, trio_websocket.HandshakeError) as error:
            entry.failure = f"dropped: {type(error).__name__} {error}"
            return None
        return messages

    async def connect_then_release(self, url: str, runner: str) -> None:
        """Connect to ``url``, then give its runner back."""
        await self.connect(url)
        await self.answered("DELETE", f"/runners/{runner}")

    async def probe(self) -> None:
        """What the clients' own requests do not: a request every 0.1 s whatever the answers, as
        many clients would send, until the new daemon serves and a while after."""
        async with trio.open_nursery() as nursery:
            while not self.serving_again or time.monotonic() < self.serving_again + 1:
                nursery.start_soon(partial(self.request, "GET", f"/execution-environments/{ENVIRONMENT_ID}"))
                await trio.sleep(0.1)

    async def client(self) -> None:
        """Claim, copy, execute, give back, until the scenario is over."""
        copy = {"copy": [{"path": "main.py", "content": "cHJpbnQoIm9rIik="}]}  # print("ok")
        while not self.done:
            claimed = await self.answered("POST", "/runners", json={"executionEnvironmentId": ENVIRONMENT_ID})
            if claimed is None or claimed.status_code != 200:
                await trio.sleep(0.1)
                continue
            runner = claimed.json()["runnerId"]
            await self.answered("PATCH", f"/runners/{runner}/files", json=copy)
            messages = await self.execution(runner, "cat main.py; sleep 0.2")
            await self.answered("DELETE", f"/runners/{runner}")
            if messages is not None and [m for m in messages if m["type"] == "exit"] == EXIT_0:
                if self.sigterm and time.monotonic() > self.serving_again > 0:
                    self.cycles_after += 1
                elif not self.sigterm:
                    self.cycles_before += 1


async def stale_url(load: Load) -> tuple[str, str]:
    """An execution URL handed out now, to be connected to after the stop has begun, and its runner."""
    claimed = await load.answered("POST", "/runners", json={"executionEnvironmentId": ENVIRONMENT_ID})
    assert claimed is not None
    runner = claimed.json()["runnerId"]
    response = await load.answered("POST", f"/runners/{runner}/execute", json={"command": "true"})
    assert response is not None
    return str(response.json()["websocketUrl"]), runner


async def start_activated(held: socket.socket, log: Path) -> trio.Process:
    """``supervisor run`` as systemd starts a socket-activated service; returned once it serves."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISOR_", "LISTEN_"))}
    argv = [sys.executable, "-c", _SHIM, str(held.fileno())]
    sink = await trio.open_file(log, "wb")
    process = await trio.lowlevel.open_process(
        argv, stdout=sink.wrapped, stderr=subprocess.STDOUT, env=env, pass_fds=(held.fileno(),)
    )
    await sink.aclose()
    with trio.fail_after(30):
        while _SERVING not in await trio.Path(log).read_text(errors="replace"):
            await trio.sleep(0.02)
    return process


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    held = socket.create_server(("127.0.0.1", 0), backlog=1024)
    port = held.getsockname()[1]
    with daemon_logs("socket-restart-") as kept:
        async with trio.open_nursery() as nursery:
            cluster = await nursery.start(SimulatedCluster(config).run)
            os.environ["NOMAD_ADDR"] = ",".join(cluster.addresses)
            base = f"http://127.0.0.1:{port}/api/v1"
            daemon = await start_activated(held, kept.path / "first.log")
            async with (
                httpx.AsyncClient(base_url=base, timeout=30) as http,
                NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as nomad,
            ):
                scenario = Scenario("socket_restart", args.seed, cluster, None, http, nomad)
                kept.ok = await play(scenario, Load(base), held, daemon, kept.path, args)
            nursery.cancel_scope.cancel("scenario over")
    held.close()
    return kept.ok


async def play(
    scenario: Scenario,
    load: Load,
    held: socket.socket,
    daemon: trio.Process,
    logs: Path,
    args: argparse.Namespace,
) -> bool:
    environment = {**ENVIRONMENT, "prewarmingPoolSize": args.runners}
    (
        await scenario.http.put(f"/execution-environments/{ENVIRONMENT_ID}", json=environment)
    ).raise_for_status()
    await scenario.wait_for(lambda: runner_jobs(scenario.cluster) >= args.runners, within=60)
    await trio.sleep(1)
    scenario.event("pool warm", runners=args.runners)
    at_restart: dict[str, list[dict[str, Any]] | None] = {}

    async def run_at_restart(name: str, command: str, started: trio.Event) -> None:
        claimed = await load.answered("POST", "/runners", json={"executionEnvironmentId": ENVIRONMENT_ID})
        assert claimed is not None
        runner = claimed.json()["runnerId"]
        messages = await load.execution(runner, command, started)
        at_restart[name] = messages
        await load.answered("DELETE", f"/runners/{runner}")

    async with trio.open_nursery() as nursery:
        for _ in range(args.clients):
            nursery.start_soon(load.client)
        # Every client has been through a cycle.
        await scenario.wait_for(lambda: load.cycles_before >= args.clients, within=60)
        running = []
        for name, command in [
            ("short 1", "echo started; sleep 2; echo done"),
            ("short 2", "echo started; sleep 3; echo done"),
            ("long 1", "echo started; sleep 60"),
            ("long 2", "echo started; sleep 60"),
        ]:
            running.append(started := trio.Event())
            nursery.start_soon(run_at_restart, name, command, started)
        stale = await stale_url(load)
        with trio.fail_after(30):
            for started in running:
                await started.wait()
        load.sigterm = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        scenario.event("SIGTERM", running=scenario.cluster.execs.count)
        nursery.start_soon(load.connect_then_release, *stale)
        nursery.start_soon(load.probe)
        exit_code = await daemon.wait()
        load.exited = time.monotonic()
        scenario.event("the daemon exited", code=exit_code)
        daemon = await start_activated(held, logs / "second.log")
        load.serving_again = time.monotonic()
        scenario.event("a new daemon serves the same socket")
        await trio.sleep(6)
        load.done = True
    scenario.event("load over")
    scenario.check("first_daemon_exits_0", exit_code == 0, exit_code, 0)
    judge(scenario, load, at_restart)
    await scenario.wait_for(lambda: runner_jobs(scenario.cluster) == args.runners, within=30)
    jobs = runner_jobs(scenario.cluster)
    scenario.check("leaked_runner_jobs", jobs == args.runners, jobs - args.runners, 0)
    daemon.send_signal(signal.SIGTERM)
    await daemon.wait()
    return scenario.report(args.report, args.plot)


def judge(scenario: Scenario, load: Load, at_restart: dict[str, list[dict[str, Any]] | None]) -> None:
    refused = [r for r in load.requests if r.failure.startswith("refused")]
    dropped = [r for r in load.requests if r.failure.startswith("dropped")]
    for failed in refused + dropped:
        at = round(failed.sent - load.sigterm, 3)
        scenario.event("a request failed", what=failed.what, after_sigterm_s=at, failure=failed.failure)
    scenario.check("connections_refused", not refused, len(refused), 0)
    scenario.check("requests_dropped", not dropped, len(dropped), 0)
    waited = [r for r in load.requests if load.sigterm < r.sent < load.serving_again]
    answered = [r for r in waited if r.answered is not None and r.answered >= load.exited]
    statuses = Counter(f"{r.what} {r.status}" for r in waited)
    scenario.check(
        "sent_during_restart_answered_after",
        bool(waited) and len(answered) == len(waited),
        len(answered),
        f"all {len(waited)} sent while no daemon served",
    )
    # A 4xx only for an execution URL the stopped daemon handed out: the new one never knew it.
    wrong = [
        r
        for r in waited
        if r.status is None or r.status >= 500 or (r.status >= 400 and r.what != "WebSocket")
    ]
    scenario.check(
        "their_answers", not wrong, dict(sorted(statuses.items())), "no 5xx; 4xx only for stale URLs"
    )
    ends = {name: ends_of(messages) for name, messages in sorted(at_restart.items())}
    short = [ends.get(name) for name in ("short 1", "short 2")]
    scenario.check(
        "short_executions_finish", all(e == [*EXIT_0, "close 1000"] for e in short), short, "exit 0"
    )
    long = [ends.get(name) for name in ("long 1", "long 2")]
    told = [*SHUTTING_DOWN, "close 1001"]
    scenario.check("long_executions_told_and_closed", all(e == told for e in long), long, told)
    stale = Counter(str(status) for status in load.stale_urls)
    scenario.check(
        "stale_execution_urls_answered",
        bool(stale) and all(400 <= s < 500 for s in load.stale_urls),
        dict(stale),
        "4xx",
    )
    scenario.check("cycles_before_restart", load.cycles_before > 0, load.cycles_before, "> 0")
    scenario.check("cycles_after_restart", load.cycles_after > 0, load.cycles_after, "> 0")
    scenario.event(
        "figures", restart_s=round(load.serving_again - load.sigterm, 3), requests=len(load.requests)
    )


def ends_of(messages: list[dict[str, Any]] | None) -> list[Any] | None:
    """An execution's terminal message and its WebSocket's close code."""
    if messages is None:
        return None
    ends: list[Any] = [m for m in messages if m["type"] in ("exit", "timeout", "error")]
    return ends + [f"close {m['data']}" for m in messages if m["type"] == "closed"]


def runner_jobs(cluster: SimulatedCluster) -> int:
    return sum(
        1 for (_, j), job in cluster.state.jobs.items() if j.startswith(f"{ENVIRONMENT_ID}-") and not job.stop
    )


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=4, help="clients claiming, copying, executing")


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=6, extra=_options))
