"""The chaos soak: CodeOcean-like load while a random fault hits the cluster every few seconds.

    python scripts/soak.py [--minutes 10] [--rate 20] [--fault-every 5] [--seed 1]
                           [--faults KIND,...] [--report FILE.json] [--plot FILE.png]

A simulated cluster (3 servers, 5 nodes) in this process; the daemon, ``supervisor run`` at its
defaults (or with ``--setting`` changes, for comparison), in a process of its own; three
environments of 30 runners. The load, ``--rate`` executions a second from at most 100 clients at
once, does what CodeOcean does: claim (with an inactivity timeout of 60 s); list the workspace (it
must be empty); PATCH ``delete: ["./*"]`` and a copy of a file with a fresh token; run ``cat`` of
it and a sleep of 0.1 to 3 s; check the output; release. On 410 it claims again and retries, on
500 it waits a little and retries. Every ``--fault-every`` seconds one fault of the simulator's
kinds: a server or the leader restarts, an agent restarts, all agents restart losing jobs, a node
drains (and is made eligible again later), the streams are cut, an allocation fails, a node goes
down past its heartbeat grace.

Invariants, checked from outside: every execution ends with exactly one terminal message; one that
ends in error, or with a non-zero exit code (its command killed under it, as the task of a
replaced allocation is), overlapped a fault that can cut it; no output is lost (a killed command's
output is what it printed before: a prefix of the whole); no runner ID is handed out
twice, and every claimed workspace is empty; no runner job leaks at the end; every pool is back to
strength (its idle runners) within 10 s of each fault, each pool judged on its own (the time each
took is reported, with the median, 90th percentile and slowest over the run); the daemon's
trio tasks, open descriptors and RSS drift less than 10% between minute 2 and the end of the load.
The same seed gives the same kinds of fault in the same order; ``--faults`` plays the kinds it
lists instead, in its order (``none``: a turn without a fault), and none after them, to replay one
window of a run (the same kinds; their targets are drawn anew, and in a run of a few minutes the
drift checks have too few samples to mean anything).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
from harness import start_daemon
from picture import draw_soak
from soak_figures import (
    RECOVERY_WITHIN,
    by_kind,
    drift,
    execution_rates,
    metric,
    outages,
    outside_outages,
    recovery_time,
    refill,
)

from supervisor.core.config import FactorySettings
from supervisor.simulator import SimConfig, SimulatedCluster

ENVIRONMENTS: Final = (10, 11, 12)
# As CodeOcean claims: a runner whose client vanished (or lost the claim's answer) expires.
INACTIVITY_TIMEOUT: Final = 60
STRENGTH_EVERY: Final = 0.25
POOL: Final = 30
FAULTS: Final = ("server", "leader", "agent", "all_agents", "drain", "streams", "allocation", "node_down")
AGENT_DOWNTIME: Final = 2.0
DRAIN_DEADLINE: Final = 3.0
HEARTBEAT_GRACE: Final = SimConfig().heartbeat_grace
# A node down: its agent away past the heartbeat grace, so that Nomad marks it down.
NODE_DOWNTIME: Final = HEARTBEAT_GRACE + 3
# From a node down's start, the faults that Nomad's blindness to the away agent reaches: it places
# new allocations there until the grace ends.
BLIND_WINDOW: Final = NODE_DOWNTIME + 2
# How long after it each fault can end an execution (a stream cut cannot): its own duration, then
# 10 s for what follows (an election, an agent's registration, a task's restart).
# Faults that reach every execution: a server's restart cuts each exec that goes through it.
EVERYWHERE: Final = frozenset({"server", "leader", "all_agents"})
# After the load: the last fault's reach and 10 s to refill, so that it is judged like the others.
SETTLE: Final = NODE_DOWNTIME + 10 + 5
REACH: Final = {
    "server": 12.0,
    "leader": 12.0,
    "agent": AGENT_DOWNTIME + 10,
    "all_agents": AGENT_DOWNTIME + 10,
    "drain": DRAIN_DEADLINE + 10,
    "allocation": 30.0,
    "node_down": NODE_DOWNTIME + 10,
}


class Soak:
    """What the load and the faults saw."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lives: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.handed_out: set[str] = set()
        # Every execution that ended in error, with the fault it is attributed to (None: none).
        self.errors: list[dict[str, Any]] = []
        self.violations: dict[str, list[Any]] = {
            "terminal_messages": [],
            "unexplained_errors": [],
            "lost_output": [],
            "handed_out_twice": [],
            "workspace_not_empty": [],
        }
        # (t, each environment's idle runners), four times a second.
        self.looks: list[tuple[float, dict[int, int]]] = []
        self.retries = 0
        self.client_errors = 0
        self.shed = 0
        self.load_ended = float("inf")
        self.sampled = threading.Event()
        # The daemon's runner starts, from its /metrics: bucket bound -> starts at or below it.
        self.start_seconds: dict[str, float] = {}
        # The daemon's factory.max_starting (its default, unless --setting changes it).
        self.max_starting = FactorySettings().max_starting

    def now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def culprit(self, start: float, end: float, node: str, runner: str) -> dict[str, Any] | None:
        """The fault that can have ended an execution on ``runner`` (on ``node``) between
        ``start`` and ``end``: one that reached it then, and hit its node, its job, or everything."""
        fault: dict[str, Any]
        for fault in reversed(self.faults):
            if fault["kind"] not in REACH or not fault["t"] - 1 <= end:
                continue
            if start > fault["t"] + REACH[fault["kind"]]:
                continue
            if fault["kind"] in EVERYWHERE or fault["target"] in (node, runner):
                return fault
        return None


def node_of(cluster: SimulatedCluster, runner: str) -> str:
    """The node the runner's live allocation is on ("" if none is)."""
    allocs = cluster.state.allocs_by_job.get(("default", runner), {}).values()
    return next((a.node_name for a in allocs if not a.client_terminal), "")


async def one_execution(
    http: httpx.AsyncClient, cluster: SimulatedCluster, soak: Soak, rng: random.Random
) -> None:
    """Claim, check the workspace, copy, run, check the output, release; again on 410."""
    for _ in range(20):
        environment = rng.choice(ENVIRONMENTS)
        claim = await http.post(
            "/runners", json={"executionEnvironmentId": environment, "inactivityTimeout": INACTIVITY_TIMEOUT}
        )
        if claim.status_code != 200:
            soak.retries += 1
            await trio.sleep(0.2)
            continue
        runner = claim.json()["runnerId"]
        if runner in soak.handed_out:
            soak.violations["handed_out_twice"].append(runner)
        soak.handed_out.add(runner)
        try:
            if await run_in(http, cluster, soak, rng, runner):
                return
        finally:
            await http.delete(f"/runners/{runner}")
        soak.retries += 1


async def run_in(
    http: httpx.AsyncClient, cluster: SimulatedCluster, soak: Soak, rng: random.Random, runner: str
) -> bool:
    """False when the runner was gone (410) before the execution started: claim another."""
    files = f"/runners/{runner}/files"
    listing = await http.get(files)
    if listing.status_code == 410:
        return False
    if listing.status_code == 200 and listing.json()["files"]:
        soak.violations["workspace_not_empty"].append(runner)
    token = uuid.uuid4().hex
    patch = {
        "delete": ["./*"],
        "copy": [{"path": "f.txt", "content": base64.b64encode(token.encode()).decode()}],
    }
    copied = await http.patch(files, json=patch)
    if copied.status_code != 204:
        return copied.status_code != 410
    pause = round(rng.uniform(0.1, 3.0), 2)
    prepared = await http.post(
        f"/runners/{runner}/execute", json={"command": f"cat f.txt; sleep {pause}; echo ."}
    )
    if prepared.status_code != 200:
        return prepared.status_code != 410
    start, messages, node = soak.now(), [], node_of(cluster, runner)
    try:
        with trio.move_on_after(120):
            async with trio_websocket.open_websocket_url(prepared.json()["websocketUrl"]) as ws:
                try:
                    while True:
                        messages.append(json.loads(await ws.get_message()))
                except trio_websocket.ConnectionClosed:
                    pass
    except trio_websocket.ConnectionRejected:
        return False  # the runner went before the execution started: nothing ran, claim another
    ends = [m for m in messages if m["type"] in ("exit", "timeout", "error")]
    outcome = ends[-1]["type"] if ends else "none"
    soak.lives.append({"start": start, "end": soak.now(), "outcome": outcome})
    if len(ends) != 1:
        soak.violations["terminal_messages"].append({"runner": runner, "ends": ends})
    else:
        output = "".join(m["data"] for m in messages if m["type"] == "stdout")
        whole = f"{token}.\n"
        clean = outcome == "exit" and ends[-1]["data"] == 0
        # A command killed under its execution printed a part of its output, all of it there.
        lost = (output != whole) if clean else (outcome == "exit" and not whole.startswith(output))
        if lost:
            soak.violations["lost_output"].append({"runner": runner, "output": output[:80]})
        if clean:
            return True
        fault = soak.culprit(start, soak.now(), node, runner)
        error = {"runner": runner, "node": node, "at": start, "end": ends[-1], "fault": fault}
        soak.errors.append(error)
        if fault is None:
            soak.violations["unexplained_errors"].append(error)
    return True


async def post(cluster: SimulatedCluster, control: httpx.AsyncClient, path: str, json: Any) -> None:
    """A control or operator request, to the first server that answers (one may be restarting):
    tried again every second until one does."""
    while True:
        for address in cluster.addresses:
            try:
                await control.post(address + path, json=json)
                return
            except httpx.TransportError:
                continue
        await trio.sleep(1)


async def inject(
    cluster: SimulatedCluster,
    control: httpx.AsyncClient,
    soak: Soak,
    kind: str,
    rng: random.Random,
    nursery: trio.Nursery,
) -> None:
    """One fault of the kind (an undrain later, in ``nursery``)."""
    at = soak.now()
    nodes = sorted(cluster.state.nodes.values(), key=lambda n: n.name)
    up = [n for n in nodes if n.agent_up]
    if kind in ("agent", "node_down") and not up:
        kind = "streams"  # every agent is away: nothing to restart
    target = ""
    if kind in ("server", "leader"):
        serving = [s for s in cluster.servers if s.up]
        server = (
            next((s for s in serving if s.name == cluster.leader), None)
            if kind == "leader"
            else rng.choice(serving)
        )
        if server is not None:
            cluster.restart_server(server.name, downtime=2.0)
            target = server.name
    elif kind == "agent":
        node = rng.choice(up)
        await post(
            cluster, control, f"/sim/v1/nodes/{node.name}/restart", json={"downtime_s": AGENT_DOWNTIME}
        )
        target = node.name
    elif kind == "all_agents":
        await post(
            cluster,
            control,
            "/sim/v1/nodes/restart-all",
            json={"downtime_s": AGENT_DOWNTIME, "lose_fraction": 0.3},
        )
    elif kind == "drain":
        node = rng.choice(nodes)
        await post(
            cluster,
            control,
            f"/v1/node/{node.id}/drain",
            json={"DrainSpec": {"Deadline": round(DRAIN_DEADLINE * 1e9)}, "Meta": {}},
        )
        target = node.name

        async def undrain() -> None:
            await trio.sleep(10)
            body: dict[str, Any] = {"DrainSpec": None, "MarkEligible": True, "Meta": {}}
            await post(cluster, control, f"/v1/node/{node.id}/drain", json=body)

        nursery.start_soon(undrain)
    elif kind == "streams":
        cluster.cut_streams()
    elif kind == "allocation":
        live = [a for a in cluster.state.allocs.values() if a.client_status == "running"]
        if live:
            alloc = rng.choice(live)
            await post(
                cluster,
                control,
                f"/sim/v1/allocations/{alloc.id}/fail",
                json={"reason": rng.choice(["oom", "crash"])},
            )
            target = alloc.job_id
    elif kind == "node_down":
        node = rng.choice(up)
        downtime = NODE_DOWNTIME
        await post(cluster, control, f"/sim/v1/nodes/{node.name}/restart", json={"downtime_s": downtime})
        target = node.name
    soak.faults.append({"t": at, "kind": kind, "target": target})


def watch_strength(api: str, soak: Soak, stop: threading.Event) -> None:
    """Which pools are at strength, four times a second, from a thread of its own: this process
    also runs the cluster and the load, whose bursts would stretch the looks of a task of its loop
    to seconds apart. A pool under load is below strength for the moment each refill takes, so a
    slow look would miss the moments it is whole."""
    with httpx.Client(base_url=api, timeout=5) as http:
        while not stop.wait(STRENGTH_EVERY):
            try:
                stats = http.get("/statistics/execution-environments").json()
            except (httpx.HTTPError, ValueError):
                continue
            idle = {e: stats.get(str(e), {}).get("idleRunners", 0) for e in ENVIRONMENTS}
            soak.looks.append((soak.now(), idle))


@contextlib.asynccontextmanager
async def watching(soak: Soak, api: str, daemon_pid: int) -> AsyncIterator[None]:
    """``watch_strength`` and ``sample``, each in a thread of its own, for the time of the block;
    one that failed fails the soak once they are stopped, as a task of its loop would."""
    stop = threading.Event()
    metrics_url = api.removesuffix("/api/v1") + "/metrics"
    failed: list[BaseException] = []

    def guarded(watch: Callable[..., None], *args: Any) -> None:
        try:
            watch(*args, stop)
        except BaseException as exc:
            failed.append(exc)

    threads = [
        threading.Thread(target=guarded, args=(watch_strength, api, soak), daemon=True),
        threading.Thread(target=guarded, args=(sample, api, metrics_url, daemon_pid, soak), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        # The first sample before the load: the "idle before" figure.
        await trio.to_thread.run_sync(soak.sampled.wait, 10)
        yield
    finally:
        stop.set()
        with trio.CancelScope(shield=True):
            for thread in threads:
                await trio.to_thread.run_sync(thread.join)
    if failed:
        raise RuntimeError(f"a watcher of the daemon failed: {failed[0]!r}") from failed[0]


def sample(api: str, metrics_url: str, daemon_pid: int, soak: Soak, stop: threading.Event) -> None:
    """The pools, the stream and the daemon's resources, about once a second (from a thread, as
    ``watch_strength``)."""
    with httpx.Client(base_url=api, timeout=5) as http:
        first = True
        while not stop.wait(0 if first else 1):  # the first at once, before the load
            first = False
            try:
                stats = http.get("/statistics/execution-environments").json()
                details = http.get("/health/details").json()["checks"]
                metrics = http.get(metrics_url).text
            except (httpx.HTTPError, KeyError, ValueError):
                continue
            tasks, backlog, suspect, factory_starting, stops = (
                metric(metrics, name)
                for name in (
                    "supervisor_trio_tasks",
                    "supervisor_factory_backlog",
                    "supervisor_runners_suspect",
                    "supervisor_factory_starting",
                    "supervisor_command_stops_waiting",
                )
            )
            soak.start_seconds = {
                line.split('"')[1]: float(line.split()[-1])
                for line in metrics.splitlines()
                if line.startswith("supervisor_runner_start_seconds_bucket{")
            }
            starting = sum(
                float(line.split()[-1])
                for line in metrics.splitlines()
                if line.startswith("supervisor_runners{") and 'state="starting"' in line
            )
            status = Path(f"/proc/{daemon_pid}/status").read_text().splitlines()
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
            soak.samples.append(
                {
                    "t": soak.now(),
                    "idle": sum(s["idleRunners"] for s in stats.values()),
                    "used": sum(s["usedRunners"] for s in stats.values()),
                    "stream": details["event_stream"]["state"],
                    "tasks": tasks,
                    # Why a pool is below strength: writes waiting, runners starting or not yet proven.
                    "factory_backlog": backlog,
                    "starting": starting,
                    # Of them, those that hold back registrations (factory.max_starting).
                    "factory_starting": factory_starting,
                    "suspect": suspect,
                    # Each a task of the daemon's, for as long as a fault keeps its command out of reach.
                    "stops_waiting": stops,
                    "fds": len(list(Path(f"/proc/{daemon_pid}/fd").iterdir())),
                    "rss_kib": rss,
                }
            )
            soak.sampled.set()


async def main(args: argparse.Namespace) -> bool:
    # The kinds of fault draw from a generator of their own: the same seed gives the same kinds in
    # the same order, whatever the load's timing and whatever is live when a target is chosen.
    rng, kinds, targets = (random.Random(f"{use} {args.seed}") for use in ("load", "kinds", "targets"))
    soak = Soak()
    config = SimConfig(seed=args.seed, servers=3, nodes=5, alloc_start_delay=0.05)
    logs = Path(tempfile.mkdtemp(prefix="soak-"))
    async with trio.open_nursery() as root:
        cluster = await root.start(SimulatedCluster(config).run)
        settings = dict(item.split("=", 1) for item in args.setting)
        soak.max_starting = int(settings.get("SUPERVISOR_FACTORY_MAX_STARTING", soak.max_starting))
        daemon, api = await start_daemon(cluster, logs / "daemon.log", settings)
        try:
            # As httpx keeps by default: at most 20 idle connections (no bound would leave the API
            # holding every connection a burst opened, for its keep-alive of 75 s).
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=20)
            async with (
                httpx.AsyncClient(base_url=api, timeout=60, limits=limits) as http,
                httpx.AsyncClient(base_url=cluster.addresses[0], timeout=30) as control,
            ):
                for environment in ENVIRONMENTS:
                    body = {
                        "image": "python:3.12-slim",
                        "prewarmingPoolSize": POOL,
                        "cpuLimit": 100,
                        "memoryLimit": 256,
                        "networkAccess": False,
                        "exposedPorts": [],
                    }
                    (await http.put(f"/execution-environments/{environment}", json=body)).raise_for_status()
                await trio.sleep(3)
                deadline = trio.current_time() + args.minutes * 60
                async with trio.open_nursery() as nursery, watching(soak, api, daemon.pid):

                    async def faults() -> None:
                        listed = iter(args.faults or ())
                        while trio.current_time() + args.fault_every < deadline:
                            await trio.sleep(args.fault_every)
                            kind = next(listed, "none") if args.faults else kinds.choice(FAULTS)
                            if kind != "none":
                                await inject(cluster, control, soak, kind, targets, nursery)

                    nursery.start_soon(faults)
                    limiter = trio.CapacityLimiter(100)

                    async def limited(client: object) -> None:
                        try:
                            await one_execution(http, cluster, soak, rng)
                        except httpx.TransportError:
                            soak.client_errors += 1  # a kept-alive connection the daemon closed
                        finally:
                            limiter.release_on_behalf_of(client)

                    async with trio.open_nursery() as load:
                        while trio.current_time() < deadline:
                            try:  # at most 100 clients at once: past that, the load is shed, not queued
                                client = object()
                                limiter.acquire_on_behalf_of_nowait(client)
                                load.start_soon(limited, client)
                            except trio.WouldBlock:
                                soak.shed += 1
                            await trio.sleep(1 / args.rate)
                    soak.load_ended = soak.now()
                    await trio.sleep(SETTLE)  # the last faults' effects settle, the pools refill
                    nursery.cancel_scope.cancel("soak over")
                leaked, leak = await leaks(cluster, http)
        finally:  # whatever happened, the daemon goes too
            daemon.terminate()
            with trio.CancelScope(shield=True):
                await daemon.wait()
        root.cancel_scope.cancel("soak over")
    return report(soak, leaked, leak, args, logs)


async def leaks(cluster: SimulatedCluster, http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    """Runner jobs in Nomad beyond the pools, once every claim is given back; and, when there are
    any, what Nomad and the daemon say of each environment's runners."""

    def runner_jobs() -> list[str]:
        return sorted(
            j for (_, j), job in cluster.state.jobs.items() if j[:3] in ("10-", "11-", "12-") and not job.stop
        )

    with trio.move_on_after(60):
        while len(runner_jobs()) != POOL * len(ENVIRONMENTS):
            await cluster.wait_for_write()
    extra = len(runner_jobs()) - POOL * len(ENVIRONMENTS)
    if not extra:
        return 0, {}
    jobs = {
        job_id: [
            f"{a.id[:8]} {a.client_status}/{a.desired_status} on {a.node_name}"
            for a in cluster.state.allocs_by_job.get(("default", job_id), {}).values()
        ]
        for job_id in runner_jobs()
    }
    statistics = (await http.get("/statistics/execution-environments")).json()
    return extra, {"jobs": jobs, "statistics": statistics}


def report(soak: Soak, leaked: int, leak: dict[str, Any], args: argparse.Namespace, logs: Path) -> bool:
    samples = soak.samples
    unrecovered = []
    times: list[float | None] = []
    stretches = outages(soak.faults, AGENT_DOWNTIME + SimConfig().agent_ready_delay)
    beside: list[float] = []  # each fault's slowest pool, less the time no agent could start one
    marks: list[dict[str, Any]] = []
    # (t, the environments whose pool is at strength) at each look.
    strength = [(t, frozenset(e for e, count in idle.items() if count >= POOL)) for t, idle in soak.looks]
    for fault in soak.faults:
        # A node that goes down does so for Nomad only after the heartbeat grace: then it is replaced.
        hits = fault["t"] + (HEARTBEAT_GRACE if fault["kind"] == "node_down" else 0)
        # Each pool on its own: under load each is short for the moment a claim's replacement
        # takes to start, so three at once is a coincidence of the load, not a recovery.
        recovery = {e: recovery_time(e, hits, strength) for e in ENVIRONMENTS}
        fault["recovery_s"] = {e: None if t is None else round(t, 3) for e, t in recovery.items()}
        times += [t for t in recovery.values() if t != 0.0]
        slowest = max(math.inf if t is None else t for t in recovery.values())
        beside.append(outside_outages(hits, slowest, stretches))
        short = [e for e, t in recovery.items() if t is None or t > RECOVERY_WITHIN]
        # For the picture: when the fault's 10 s began, and whether a pool was short after them.
        marks.append({"t": fault["t"], "kind": fault["kind"], "from": hits, "short": bool(short)})
        if short:
            looks = sum(hits < t <= hits + RECOVERY_WITHIN for t, _ in strength)
            unrecovered.append({**fault, "pools_short": short, "looks": looks})
    refill(soak.samples, soak.load_ended, soak.start_seconds, soak.max_starting)
    by_kind(soak.faults, BLIND_WINDOW)
    back = sorted(t for t in times if t is not None)
    if back:
        print(
            f"  pools hit by a fault: {len(times)}, back to strength after a median "
            f"{back[len(back) // 2]:.1f} s, 90% within {back[int(len(back) * 0.9)]:.1f} s, "
            f"the slowest {back[-1]:.1f} s; never back: {len(times) - len(back)}"
        )
    if beside:
        print(
            "  for comparison, less the seconds in which every agent was restarting (no agent could "
            f"start a runner): the slowest {max(beside):.1f} s, "
            f"{sum(t > RECOVERY_WITHIN for t in beside)} faults with a pool short after 10 s"
        )
    checks: dict[str, tuple[bool, float]] = {
        name: (not found, len(found)) for name, found in soak.violations.items()
    }
    idle_by_environment = {str(e): [(t, idle[e]) for t, idle in soak.looks] for e in ENVIRONMENTS}
    checks["leaked_runner_jobs"] = (leaked == 0, leaked)
    checks["pools_at_strength_within_10_s"] = (not unrecovered, len(unrecovered))
    for key in ("tasks", "fds", "rss_kib"):
        change = drift(samples, key, 120, soak.load_ended)
        checks[f"{key}_drift_under_10_percent"] = (abs(change) < 0.1, round(change, 3))
        median = drift(samples, key, 120, soak.load_ended, robust=True)
        print(f"  {key} drift, median regression (for comparison): {median:+.3f}")
    stops = drift(samples, "tasks", 120, soak.load_ended, load=("used", "stops_waiting"))
    print(f"  tasks drift at equal runners in use and stops waiting (for comparison): {stops:+.3f}")
    idle = [s for s in samples if s["t"] > soak.load_ended and s["used"] == 0]
    if samples and samples[0]["used"] == 0 and idle:  # both idle: what the load left behind
        print(
            "  idle before the load and after it: "
            + ", ".join(f"{k} {samples[0][k]} -> {idle[-1][k]}" for k in ("tasks", "fds", "rss_kib"))
        )
    print(f"soak: {args.minutes} min, {len(soak.lives)} executions, {len(soak.faults)} faults")
    print(f"  {soak.retries} retries (410 or 500 on a claim or call)")
    print(f"  {soak.client_errors} client transport errors (a kept-alive connection closed)")
    print(f"  {soak.shed} executions not started: 100 clients were busy")
    outcomes: dict[str, int] = {}
    for life in soak.lives:
        outcomes[life["outcome"]] = outcomes.get(life["outcome"], 0) + 1
    kinds: dict[str, int] = {}
    for fault in soak.faults:
        kinds[fault["kind"]] = kinds.get(fault["kind"], 0) + 1
    print(f"  outcomes {outcomes}; faults {kinds}; daemon log {logs / 'daemon.log'}")
    for name, (ok, value) in checks.items():
        print(f"  {name:<36} {'PASS' if ok else 'FAIL'}  {value}")
    invariants = {name: {"ok": ok, "value": value, "limit": 0} for name, (ok, value) in checks.items()}
    if args.report:
        document = {
            "scenario": "soak",
            "seed": args.seed,
            "ok": all(ok for ok, _ in checks.values()),
            "invariants": invariants,
            "faults": soak.faults,
            "outcomes": outcomes,
            "violations": soak.violations,
            "errors": soak.errors,
            "leak": leak,
            "unrecovered": unrecovered,
            "samples": samples,
            # Every look at the pools: (t, the environments whole then), to judge them again.
            "strength": [(t, sorted(whole)) for t, whole in strength],
            # Each environment's idle runners at the same looks: (t, count).
            "idle": idle_by_environment,
        }
        args.report.write_text(json.dumps(document, indent=2) + "\n")
    if args.plot:
        draw_soak(
            args.plot,
            title=f"soak, {args.minutes} min (seed {args.seed})",
            samples=samples,
            pools=idle_by_environment,
            strength=POOL,
            faults=marks,
            kinds=FAULTS,
            rates=execution_rates(soak.lives),
            invariants=invariants,
        )
    return all(ok for ok, _ in checks.values())


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="executions started a second")
    parser.add_argument("--fault-every", type=float, default=5.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="SUPERVISOR_SECTION_KEY=VALUE",
        help="run the daemon with this setting changed (to compare with its defaults)",
    )
    parser.add_argument(
        "--faults",
        type=fault_kinds,
        metavar="KIND,...",
        help=f"these kinds of fault in this order, then none ({', '.join(FAULTS)}, or none)",
    )
    parser.add_argument("--report", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    turns = math.ceil(args.minutes * 60 / args.fault_every) - 1
    if args.faults and len(args.faults) > turns:
        parser.error(f"--faults: {len(args.faults)} kinds, but {args.minutes:g} minutes hold {turns} turns")
    return args


def fault_kinds(text: str) -> list[str]:
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    if not kinds:
        raise argparse.ArgumentTypeError("no kind of fault given")
    unknown = sorted(set(kinds) - {*FAULTS, "none"})
    if unknown:
        raise argparse.ArgumentTypeError(f"no such kind of fault: {', '.join(unknown)}")
    return kinds


if __name__ == "__main__":
    sys.exit(0 if trio.run(main, parse()) else 1)
