"""Two daemons with ``[ha]`` against one cluster, behind a load balancer: a refill, then the active
killed, partitioned, stopped.

    python scenarios/ha_failover.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Two ``supervisor run`` processes at their defaults but ``SUPERVISOR_HA_ENABLED=true`` (the setting
under test), each reaching Nomad through a TCP proxy of its own (the partition: every connection cut,
new ones refused), under CodeOcean-like load (claim, copy, execute, release; on 410 claim again)
sent through a simulated load balancer configured as ``scripts/haproxy.cfg``: it checks each
daemon's ``GET /api/v1/health/ready`` (every 1 s while up, 250 ms while going down, 500 ms while
down; down after 2 failed checks, up after 1), sends each request to a daemon it has up, and sends
a request again to another (3 times at most) when its connection was refused or a daemon answered
it 503. Two runners stay claimed throughout.

0. Refill: a burst of claims takes the active's whole pool and a new environment starts empty, so
   that ``/health`` says 503 ``PREWARMING_POOL_DEPLETING``; ``/health/ready`` stays 204 throughout
   and the balancer keeps the active up.
1. SIGKILL the active, a moment after it was asked for runners while Nomad had no leader (every
   request answered 500 for 3 s: no claim's ``used`` mark could land; ``unmarked_claims.py``). The
   standby is active within the lock's worst case, 2 x TTL + LockDelay (Nomad's leader lets a lock
   lapse twice its TTL after the last renewal), + 2 s, and the balancer has it up within its pick-up
   bound after that; the killed daemon's claims are adopted and their next request works; every idle
   runner of the new active is claimed (and given back); claims resume; the killed daemon comes back
   as the standby.
2. Partition the active from Nomad. It steps down before its TTL has run out since its last renewal,
   and the other takes over only after it stepped down (never two active at once, from their logs).
3. SIGTERM the active: it releases the lock, and the balancer has the other up within 2 s plus its
   pick-up bound.

Invariants besides: no runner ID was handed out twice in the whole run (a claim answered before
its mark was in Nomad is a runner the new active takes for an idle one); no request the balancer
routed was answered by a standby, but by a deposed active in the moments before the balancer saw it
(its mark-down bound after it stopped being ready); the balancer marked a daemon down only once it
had stopped being ready, and only across a failover; a daemon that turned ready was up at the
balancer within the pick-up bound. At the end Nomad's runner jobs are the active's pool, all idle
and as many as its size (nothing leaked, nothing lost, not doubled); every load cycle that ran ended
in exit 0. The load claims with an inactivity timeout of 10 s, as CodeOcean does, so that a claim
whose answer was lost with a killed daemon ends by itself. The report gives the time without an
active daemon for each case.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from pathlib import Path

import httpx
import trio
import trio_websocket
from balancer import MARK_DOWN_BOUND, PICK_UP_BOUND, Balancer, Readiness
from harness import (
    ENVIRONMENT,
    ENVIRONMENT_ID,
    Scenario,
    daemon_logs,
    parse_arguments,
    run,
    start_daemon,
)
from unmarked_claims import claim_every_idle_runner, claims_while_nomad_has_no_leader, handed_out_once

from supervisor.core.config import HaSettings
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.simulator import SimConfig, SimulatedCluster

HA: dict[str, str] = {"SUPERVISOR_HA_ENABLED": "true"}
TTL, LOCK_DELAY = HaSettings().ttl, HaSettings().lock_delay
WORST_LAPSE = 2 * TTL + LOCK_DELAY
TOOK, STEPPED_DOWN = "took the HA lock", "stepping down:"
# A load cycle's claim, as CodeOcean's: with an inactivity timeout, so that a claim whose answer
# was lost with its daemon (killed between the claim and its answer) ends by itself.
LOAD_CLAIM = {"executionEnvironmentId": ENVIRONMENT_ID, "inactivityTimeout": 10}
# The environment the refill creates beside the scenario's (and deletes once refilled).
REFILLED_ID = ENVIRONMENT_ID + 1
# A WebSocket's close code when its connection was lost without a close frame.
_CONNECTION_LOST = 1006
# A load cycle with no answer for this long is cut short, and says at which step.
_CYCLE_PATIENCE = 15.0


class Partition:
    """A TCP proxy in front of every server of the cluster, for one daemon; ``cut`` partitions."""

    def __init__(self, targets: list[str]) -> None:
        self.targets = targets
        self.addresses: list[str] = []
        self.cut = False
        self._links: set[trio.CancelScope] = set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for target in self.targets:
                host, port = target.removeprefix("http://").rsplit(":", 1)
                link = self._link_to(host, int(port))
                listeners = await nursery.start(partial(trio.serve_tcp, link, 0, host="127.0.0.1"))
                self.addresses.append(f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}")
            task_status.started()

    def partition(self) -> None:
        self.cut = True
        for link in self._links:
            link.cancel()

    def _link_to(self, host: str, port: int) -> Callable[[trio.SocketStream], Awaitable[None]]:
        async def link(client: trio.SocketStream) -> None:
            if self.cut:
                await client.aclose()
                return
            with trio.CancelScope() as scope:
                self._links.add(scope)
                try:
                    server = await trio.open_tcp_stream(host, port)
                    async with client, server, trio.open_nursery() as pumps:
                        pumps.start_soon(_pump, client, server, pumps.cancel_scope)
                        pumps.start_soon(_pump, server, client, pumps.cancel_scope)
                except OSError:
                    pass
                finally:
                    self._links.discard(scope)

        return link


async def _pump(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    done.cancel()


class Daemons:
    """The two daemons, each behind its partition, and the balancer in front of them."""

    def __init__(self, cluster: SimulatedCluster, logs: Path, balancer: Balancer) -> None:
        self.cluster = cluster
        self.logs = logs
        self.balancer = balancer
        self.processes: dict[str, trio.Process] = {}
        self.apis: dict[str, str] = {}
        self.partitions: dict[str, Partition] = {}
        self.starts = 0

    async def start(self, name: str, nursery: trio.Nursery) -> None:
        partition = self.partitions[name] = Partition(list(self.cluster.addresses))
        await nursery.start(partition.run)
        self.starts += 1
        log = self.logs / f"{name}-{self.starts}.log"
        process, api = await start_daemon(self.cluster, log, HA, addresses=partition.addresses)
        self.processes[name], self.apis[name] = process, api
        self.balancer.add(name, api)

    def forget(self, name: str) -> None:
        """The daemon is gone for good: the balancer no longer knows its address."""
        del self.apis[name]
        self.balancer.remove(name)

    def log_times(self, marker: str) -> list[tuple[float, str]]:
        """(Unix time, daemon) of every log line with ``marker``, from every log so far."""
        found = []
        for log in self.logs.glob("*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if marker in line:
                    at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
                    found.append((at, log.stem.split("-")[0]))
        return sorted(found)


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    with daemon_logs("ha-failover-") as kept:
        kept.ok = await failover(config, kept.path, args)
    return kept.ok


async def failover(config: SimConfig, logs: Path, args: argparse.Namespace) -> bool:
    async with trio.open_nursery() as nursery:
        cluster = await nursery.start(SimulatedCluster(config).run)
        async with (
            httpx.AsyncClient(timeout=30) as http,
            NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as nomad,
        ):
            balancer = Balancer(http, nursery)
            daemons = Daemons(cluster, logs, balancer)
            await daemons.start("a", nursery)
            with trio.fail_after(30):
                while not balancer.is_up("a"):
                    await trio.sleep(0.1)
            claimed = await warm_up(http, daemons.apis["a"], args.runners)
            await daemons.start("b", nursery)
            scenario = Scenario("ha_failover", args.seed, cluster, None, http, nomad)
            scenario.event("a active, b standby", setting="ha.enabled = true (under test)")
            ok = await play(scenario, daemons, nursery, claimed, args)
            for process in daemons.processes.values():
                process.send_signal(signal.SIGKILL)
        nursery.cancel_scope.cancel("scenario over")
    return ok


async def warm_up(http: httpx.AsyncClient, api: str, runners: int) -> list[str]:
    """The environment at the active daemon, its pool warm, and two runners claimed for good."""
    environment = {**ENVIRONMENT, "prewarmingPoolSize": runners}
    (await http.put(f"{api}/execution-environments/{ENVIRONMENT_ID}", json=environment)).raise_for_status()
    with trio.fail_after(30):
        while await pool_counts(http, api) != (runners, 0):
            await trio.sleep(0.1)
    claimed = []
    for _ in range(2):
        response = await http.post(f"{api}/runners", json={"executionEnvironmentId": ENVIRONMENT_ID})
        response.raise_for_status()
        claimed.append(response.json()["runnerId"])
    return claimed


async def play(
    scenario: Scenario, daemons: Daemons, nursery: trio.Nursery, claimed: list[str], args: argparse.Namespace
) -> bool:
    http, balancer = scenario.http, daemons.balancer
    outcomes: list[str] = []
    load = Load(balancer, outcomes)
    load.handed_out.update(claimed)
    truth = Readiness(lambda: daemons.apis, http)
    failovers: list[tuple[float, float]] = []  # (from, to): when a daemon may stop being ready
    async with trio.open_nursery() as loading:
        loading.start_soon(truth.run)
        loading.start_soon(load.run)
        await trio.sleep(3)
        await refill_case(scenario, daemons, truth, load, args.runners)
        await sigkill_case(scenario, daemons, nursery, claimed, load, failovers, args.runners)
        await partition_case(scenario, daemons, nursery, load, failovers)
        await graceful_case(scenario, daemons, load, failovers)
        loading.cancel_scope.cancel()
    failed = [o for o in outcomes if o != "exit 0"]
    value = failed[:3] or len(outcomes)
    scenario.check("load_cycles_exit_0", bool(outcomes) and not failed, value, "all exit 0")
    stray = [f"+{a - scenario.started:.1f}s" for a, b in load.cut if not any(a <= k <= b for k in load.kills)]
    value = stray[:3] or len(load.cut)
    scenario.check("executions_lost_only_to_a_sigkill", not stray, value, "each across a SIGKILL")
    scenario.check("no_runner_handed_out_twice", *handed_out_once(load.handed_out), "each once")
    balancer_checks(scenario, balancer, truth, failovers)
    await pool_checks(scenario, daemons, [*claimed, *load.held], args.runners)
    return scenario.report(args.report, args.plot)


class Load:
    """CodeOcean's cycle through the balancer, over and over; the time of each success."""

    def __init__(self, balancer: Balancer, outcomes: list[str]) -> None:
        self.balancer, self.outcomes = balancer, outcomes
        self.last_success = 0.0
        # Runners claimed and not yet given back (a cycle cut short leaves one).
        self.held: set[str] = set()
        # Why cycles came to nothing, with when: what a check that waited in vain reports.
        self.refusals: list[tuple[float, str]] = []
        # The step of the cycle under way.
        self.step = ""
        # (from, to) of each execution whose WebSocket was lost without a terminal message, and
        # when a daemon was killed (which explains such a loss).
        self.cut: list[tuple[float, float]] = []
        self.kills: list[float] = []
        # Every runner ID any daemon handed out, to anyone, with how often.
        self.handed_out: Counter[str] = Counter()

    async def run(self) -> None:
        while True:
            with trio.move_on_after(_CYCLE_PATIENCE) as waited:
                outcome = await self.cycle()
            if waited.cancelled_caught:
                outcome = None
                self.refusals.append((time.monotonic(), f"{self.step}: no answer in {_CYCLE_PATIENCE} s"))
            if outcome is not None:
                self.outcomes.append(outcome)
                self.last_success = time.monotonic() if outcome == "exit 0" else self.last_success
            await trio.sleep(0.2)

    async def cycle(self) -> str | None:
        """One claim, copy, execute, release; None if the daemon refused or vanished before anything
        ran, else "exit 0" or what ended the execution."""
        send = self.balancer.request
        try:
            self.step = "claim"
            claim = await send("POST", "/runners", json=LOAD_CLAIM)
            if claim.status_code != 200:
                return self.refused("claim", claim)
            runner = claim.json()["runnerId"]
            self.handed_out[runner] += 1
            self.held.add(runner)
            copy = {"delete": ["./*"], "copy": [{"path": "main.py", "content": "cHJpbnQoMSk="}]}
            self.step = "files"
            if (files := await send("PATCH", f"/runners/{runner}/files", json=copy)).status_code != 204:
                return self.refused("files", files)
            self.step = "execute"
            started = await send("POST", f"/runners/{runner}/execute", json={"command": "cat main.py"})
            if started.status_code != 200:
                return self.refused("execute", started)
            self.step = "the execution's WebSocket"
            connected = time.monotonic()
            got = await read_messages(started.json()["websocketUrl"])
            if got is None:
                self.refusals.append((time.monotonic(), "the execution's WebSocket was refused"))
                return None
            messages, code = got
            ends = [m for m in messages if m["type"] in ("exit", "error", "timeout")]
            if not ends and code == _CONNECTION_LOST:
                # Its daemon was killed under it: no one was left to say how it ended. Its claim
                # is adopted by the next active, and given back at the end.
                self.cut.append((connected, time.monotonic()))
                return None
            self.step = "release"
            await send("DELETE", f"/runners/{runner}")
            self.held.discard(runner)
        except (httpx.HTTPError, OSError) as exc:
            self.refusals.append((time.monotonic(), f"{type(exc).__name__}: {exc}"))
            return None
        return "exit 0" if ends == [{"type": "exit", "data": 0}] else str(ends)

    def refused(self, what: str, response: httpx.Response) -> str | None:
        """Record why the daemon refused a step of the cycle; None: the cycle came to nothing."""
        self.refusals.append((time.monotonic(), f"{what}: {response.status_code} {response.text[:120]}"))
        return None


async def read_messages(url: str) -> tuple[list[dict[str, object]], int | None] | None:
    """An execution's messages and its WebSocket's close code; None if it was refused at the
    upgrade (nothing ran)."""
    messages: list[dict[str, object]] = []
    code = None
    try:
        async with trio_websocket.open_websocket_url(url) as ws:
            try:
                while True:
                    messages.append(json.loads(await ws.get_message()))
            except trio_websocket.ConnectionClosed as closed:
                code = closed.reason.code if closed.reason is not None else None
    except (trio_websocket.HandshakeError, OSError):
        return None  # refused at the upgrade: nothing ran
    return messages, code


async def wait_for_active(balancer: Balancer, name: str, within: float) -> float | None:
    """Seconds until the balancer has ``name`` up, or None."""
    started = time.monotonic()
    with trio.move_on_after(within):
        while not balancer.is_up(name):
            await trio.sleep(0.05)
        return round(time.monotonic() - started, 3)
    return None


async def claims_resume(load: Load, within: float) -> float | str:
    """Seconds until a load cycle succeeds again; else the last refusals, for the report."""
    started = time.monotonic()
    with trio.move_on_after(within):
        while load.last_success < started:
            await trio.sleep(0.1)
        return round(load.last_success - started, 3)
    refusals = [f"+{at - started:.1f}s {why}" for at, why in load.refusals if at >= started]
    return f"none in {within:g}s; {len(refusals)} refused, the last: {refusals[-3:]}"


async def refill_case(
    scenario: Scenario, daemons: Daemons, truth: Readiness, load: Load, runners: int
) -> None:
    """A burst of claims empties the active's pool and a new environment starts empty: /health is
    503 while /health/ready stays 204 and the balancer keeps the active up."""
    balancer, send = daemons.balancer, daemons.balancer.request
    truth.health_of, started = "a", time.monotonic()
    scenario.event("refill: a burst of claims and a new environment")
    claims: list[str | None] = [None] * runners

    async def claim(n: int) -> None:
        claims[n] = (await send("POST", "/runners", json=LOAD_CLAIM)).json().get("runnerId")
        load.handed_out.update(filter(None, [claims[n]]))

    async with trio.open_nursery() as burst:
        for n in range(runners):
            burst.start_soon(claim, n)
    fresh = {**ENVIRONMENT, "prewarmingPoolSize": runners}
    (await send("PUT", f"/execution-environments/{REFILLED_ID}", json=fresh)).raise_for_status()
    # At once, while the new pool is empty: both answers of the active at the same moment.
    api = daemons.apis["a"]
    health, ready = [
        (await scenario.http.get(f"{api}/{path}")).status_code for path in ("health", "health/ready")
    ]
    truth.health_503 += health == 503
    truth.unready += ready != 204
    for runner in filter(None, claims):
        await send("DELETE", f"/runners/{runner}")
    with trio.move_on_after(60):
        while (await scenario.http.get(f"{api}/health")).status_code != 204:
            await trio.sleep(0.2)
    refilled = round(time.monotonic() - started, 3)
    (await send("DELETE", f"/execution-environments/{REFILLED_ID}")).raise_for_status()
    truth.health_of = None
    downs = [mark for mark in balancer.marks if mark[0] >= started and mark[2] == "down"]
    value = {"health_503": truth.health_503, "ready_not_204": truth.unready, "marked_down": len(downs)}
    ok = truth.health_503 > 0 and truth.unready == 0 and not downs
    scenario.check("refill_health_503_ready_204", ok, value, "health 503 > 0, ready always 204, kept up")
    scenario.event("refilled", seconds=refilled)


async def sigkill_case(
    scenario: Scenario,
    daemons: Daemons,
    nursery: trio.Nursery,
    claimed: list[str],
    load: Load,
    failovers: list[tuple[float, float]],
    runners: int,
) -> None:
    api = daemons.apis["a"]
    answered = await claims_while_nomad_has_no_leader(
        scenario.cluster, scenario.http, api, LOAD_CLAIM, load.handed_out
    )
    scenario.event("claims while Nomad has no leader", answered=answered)
    killed = time.monotonic()
    load.kills.append(killed)
    daemons.processes["a"].send_signal(signal.SIGKILL)
    await daemons.processes["a"].wait()
    failovers.append((killed, time.monotonic() + 1))
    scenario.event("SIGKILL a (active)")
    limit = WORST_LAPSE + 2 + PICK_UP_BOUND
    took = await wait_for_active(daemons.balancer, "b", within=limit + 10)
    scenario.check("sigkill_no_active_s", took is not None and took <= limit, took, limit)
    api = daemons.apis["b"]
    patch = {"copy": [{"path": "kept.txt", "content": ""}]}
    answers = [
        (await scenario.http.patch(f"{api}/runners/{runner}/files", json=patch)).status_code
        for runner in claimed
    ]
    scenario.check("killed_daemons_claims_adopted", answers == [204, 204], answers, [204, 204])
    swept = await claim_every_idle_runner(daemons.balancer.request, runners, LOAD_CLAIM, load.handed_out)
    scenario.event("every idle runner of the new active claimed", claimed=len(swept))
    for runner in swept:
        await daemons.balancer.request("DELETE", f"/runners/{runner}")
    resumed = await claims_resume(load, within=30)
    scenario.check("sigkill_claims_resume_s", isinstance(resumed, float), resumed, 30)
    daemons.forget("a")
    await daemons.start("a", nursery)
    scenario.event("a back, as the standby")


async def partition_case(
    scenario: Scenario,
    daemons: Daemons,
    nursery: trio.Nursery,
    load: Load,
    failovers: list[tuple[float, float]],
) -> None:
    partitioned, cut = time.time(), time.monotonic()
    daemons.partitions["b"].partition()
    failovers.append((cut, cut + TTL))
    scenario.event("b (active) partitioned from Nomad")
    took = await wait_for_active(daemons.balancer, "a", within=WORST_LAPSE + 20)
    limit = WORST_LAPSE + 2 + PICK_UP_BOUND
    scenario.check("partition_no_active_s", took is not None and took <= limit, took, limit)
    downs = [t for t, who in daemons.log_times(STEPPED_DOWN) if who == "b" and t >= partitioned]
    takes = [t for t, who in daemons.log_times(TOOK) if who == "a" and t >= partitioned]
    stepped = round(downs[0] - partitioned, 3) if downs else None
    scenario.check("partitioned_steps_down_within_ttl_s", stepped is not None and stepped < TTL, stepped, TTL)
    gap = round(takes[0] - downs[0], 3) if downs and takes else None
    scenario.check("never_two_active_s", gap is not None and gap > 0, gap, "> 0")
    resumed = await claims_resume(load, within=30)
    scenario.check("partition_claims_resume_s", isinstance(resumed, float), resumed, 30)
    load.kills.append(time.monotonic())
    daemons.processes["b"].send_signal(signal.SIGKILL)
    await daemons.processes["b"].wait()
    daemons.forget("b")
    await daemons.start("b", nursery)
    scenario.event("b restarted as the standby, unpartitioned")


async def graceful_case(
    scenario: Scenario, daemons: Daemons, load: Load, failovers: list[tuple[float, float]]
) -> None:
    await trio.sleep(2)
    stopped = time.monotonic()
    daemons.processes["a"].send_signal(signal.SIGTERM)
    failovers.append((stopped, stopped + 1))
    scenario.event("SIGTERM a (active)")
    limit = 2 + PICK_UP_BOUND
    took = await wait_for_active(daemons.balancer, "b", within=30)
    scenario.check("graceful_no_active_s", took is not None and took <= limit, took, limit)
    code = await daemons.processes["a"].wait()
    scenario.check("graceful_exit_0", code == 0, code, 0)
    daemons.forget("a")
    resumed = await claims_resume(load, within=30)
    scenario.check("graceful_claims_resume_s", isinstance(resumed, float), resumed, 30)


def balancer_checks(
    scenario: Scenario, balancer: Balancer, truth: Readiness, failovers: list[tuple[float, float]]
) -> None:
    """What the balancer did, held to what the daemons' readiness said (read every 50 ms)."""
    unexplained = []
    for at, name, mark, said in balancer.marks:
        if mark != "down":
            continue
        unready = truth.last_change(name, False, at)
        in_failover = any(start <= at <= end + MARK_DOWN_BOUND for start, end in failovers)
        if unready is None or at - unready > MARK_DOWN_BOUND or not in_failover:
            unexplained.append(f"{name} at +{at - scenario.started:.1f}s ({said})")
    downs = sum(mark == "down" for _, _, mark, _ in balancer.marks)
    value = unexplained[:3] or downs
    scenario.check("active_marked_down_only_across_failovers", not unexplained, value, "each in a failover")
    strays = []
    for at, name in balancer.standby_answers:
        unready = truth.last_change(name, False, at)
        if unready is None or at - unready > MARK_DOWN_BOUND:
            strays.append(f"{name} at +{at - scenario.started:.1f}s")
    value = strays[:3] or len(balancer.standby_answers)
    limit = f"only a deposed active, within {MARK_DOWN_BOUND:g} s"
    scenario.check("no_request_routed_to_a_standby", not strays, value, limit)
    pick_ups = []
    for at, name, mark, _ in balancer.marks:
        ready = truth.last_change(name, True, at)
        if mark == "up" and ready is not None:
            pick_ups.append(round(max(0.0, at - ready), 3))
    slowest = max(pick_ups, default=None)
    ok = slowest is not None and slowest <= PICK_UP_BOUND
    scenario.check("failover_picked_up_s", ok, slowest, PICK_UP_BOUND)
    for at, name, mark, said in balancer.marks:
        scenario.timeline.append(
            {"t": round(at - scenario.started, 3), "event": f"balancer: {name} {mark}", "check": said}
        )
    scenario.timeline.sort(key=lambda entry: float(entry["t"]))
    scenario.event("balancer", marks=len(balancer.marks), no_server=balancer.no_server)


async def pool_counts(http: httpx.AsyncClient, api: str) -> tuple[int, int]:
    """The environment's idle and used runners, as a daemon's statistics say."""
    stats = (await http.get(f"{api}/statistics/execution-environments")).json()
    entry = stats.get(str(ENVIRONMENT_ID), {})
    return int(entry.get("idleRunners", 0)), int(entry.get("usedRunners", 0))


async def pool_checks(scenario: Scenario, daemons: Daemons, claimed: list[str], runners: int) -> None:
    api = daemons.apis["b"]
    for runner in claimed:
        await scenario.http.delete(f"{api}/runners/{runner}")

    def runner_jobs() -> set[str]:
        return {
            job_id
            for (_, job_id), job in scenario.cluster.state.jobs.items()
            if job_id.startswith(f"{ENVIRONMENT_ID}-") and not job.stop
        }

    settled: tuple[int, int, int] | None = None
    with trio.move_on_after(30):  # a lost claim's inactivity timeout (10 s) included
        while True:
            idle, used = await pool_counts(scenario.http, api)
            settled = (len(runner_jobs()), idle, used)
            if settled == (runners, runners, 0):
                break
            await trio.sleep(0.2)
    ok = settled == (runners, runners, 0)
    scenario.check("pool_not_doubled_and_nothing_leaked", ok, settled, [runners, runners, 0])


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=4))
