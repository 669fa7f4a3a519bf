"""The daemon at scale: memory per runner, claims at a fixed rate, a thousand long executions.

    python scripts/bench_scale.py [--quick] [--runners 10000] [--base-runners 1000] [--claim-rate 200]
        [--claim-seconds 30] [--executions 1000] [--per-runner 10] [--lines 30] [--ramp 20]

Starts ``supervisor simulate`` and ``supervisor run`` as separate processes; the daemon runs at its
default settings (none is changed). The runner jobs are registered in the simulated cluster before
the daemon starts (environment 1's template job and its runner jobs, as a previous run leaves them),
so that the daemon adopts them at startup: created at the default ``factory.registrations_per_second``
of 100, 10,000 runners would take almost 2 minutes. Requests go through a lean client
(``load_client.py``) with at most 100 at a time, as a client's connection pool bounds them.

1. Memory: the daemon's RSS (``VmRSS``) with ``--base-runners`` idle runners, then a second daemon's
   with ``--runners`` (more runner jobs registered in between): each the median of 7 samples a
   second apart, from 5 s after the pool is full. The slope is what a runner costs. Target: at most
   4 KB (4,096 bytes) per runner.
2. Executions, on the second daemon: ``--executions`` of a command printing a line a second for
   ``--lines`` seconds, ``--per-runner`` on each claimed runner (the daemon runs several at once on
   a runner), started evenly over ``--ramp`` seconds (50 a second: at 100, a listen backlog of 100,
   the default of the daemon's first HTTP server, overflowed here and some starts were reset; the
   daemon's is 2048 now). Targets: every
   execution gets every line, in order, and ``exit`` 0; the daemon under one core (CPU seconds over
   wall seconds, from /proc) while at least 90% of them run. The simulator's CPU (its own, and its
   commands') and this client's are shown beside it.
3. Claims: ``--claim-rate`` claims a second for ``--claim-seconds``, open-loop (each sent at its due
   time, answered or not; its latency counts from then), with as many ``GET /api/v1/version``
   between them from the same client: the baseline through the same stack (first 5 s of them alone).
   Claimed runners are not given back (no DELETE), so only claims are measured; the pool holds them
   all while each claim's replacement is registered at 100 a second. A claim is answered once its
   runner's ``used`` mark is in Nomad (a job update), so the floor of a claim is a version's round
   trip plus that update's: right after the claims, while their replacements are still registered,
   the same update (each claimed runner's job, as the daemon writes it) is sent straight to the
   simulated cluster at the claim rate for ``UPDATE_S`` seconds. Targets: claim p99 at most 1.5x the
   version p99 plus that bare update's p99; every claim answered 200; at least 95% of the rate
   sustained. Executions run first, so that the refill after the claims does not run under them.

``--quick``: 3,000 runners (500 for the base), 10 s of claims, 200 executions of 10 lines over 5 s.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import orjson
import trio
from bench_exec import cpu_seconds, percentile, start
from bench_relist import rss_kib
from load_client import HttpPool, websocket_messages

from supervisor.base.entropy import Entropy
from supervisor.core.environments import ExecutionEnvironment, new_runner_id, runner_job, template_job

# Nodes that take 10,000 runners whatever each books: placement is not what is measured.
LARGE_NODES: Final = ("--node-cpu", "1000000", "--node-memory", "1000000", "--node-disk", "1000000")
ENVIRONMENT_ID: Final = 1
FULL: Final = dict(runners=10_000, base_runners=1_000, claim_seconds=30, executions=1_000, lines=30, ramp=20)
QUICK: Final = dict(runners=3_000, base_runners=500, claim_seconds=10, executions=200, lines=10, ramp=5)
TERMINAL: Final = ("exit", "error", "timeout")
REGISTER_WORKERS: Final = 16
RSS_SAMPLES: Final = 7
SETTLE_S: Final = 5.0
BASELINE_S: Final = 5.0
UPDATE_S: Final = 5.0
CLAIM_TARGET: Final = 1.5
ANSWER_WITHIN_S: Final = 30.0
API: Final = "/api/v1"
# The client's connection pool (httpx's default size); each WebSocket is a connection besides.
CONNECTIONS: Final = 100


class Api:
    """The daemon's API, at most ``CONNECTIONS`` requests at a time (a request waits for a connection)."""

    def __init__(self, address: str) -> None:
        self.pool = HttpPool(address)
        self.connections = trio.Semaphore(CONNECTIONS)

    async def post(self, target: str, body: Any) -> tuple[int, Any]:
        async with self.connections:
            return await self.pool.post_json(f"{API}{target}", body)

    async def get(self, target: str) -> tuple[int, Any]:
        async with self.connections:
            return await self.pool.get_json(f"{API}{target}")


Request = Callable[[], Awaitable[tuple[int, Any]]]


def claim_requests(api: Api, claimed: list[str]) -> dict[str, Request]:
    """A claim (noting the runner it got in ``claimed``) and a ``GET /version``, through the API."""

    async def claim() -> tuple[int, Any]:
        status, answer = await api.post("/runners", {"executionEnvironmentId": ENVIRONMENT_ID})
        if status == 200:
            claimed.append(answer["runnerId"])
        return status, answer

    async def version() -> tuple[int, Any]:
        return await api.get("/version")

    return {"claim": claim, "version": version}


def bare_update(nomad: HttpPool, runners: list[str]) -> Request:
    """The job update a claim waits for (its runner's ``used`` mark, as the daemon writes it), sent
    straight to the simulated cluster, each to the next of ``runners`` (claimed: already marked, so
    the daemon sees nothing change)."""
    environment = ExecutionEnvironment(ENVIRONMENT_ID, "python:3.12-slim", 1, 100.0, 256, False, ())
    connections = trio.Semaphore(CONNECTIONS)
    turn = itertools.cycle(runners)

    async def update() -> tuple[int, Any]:
        job = runner_job(environment, next(turn), used=True)
        async with connections:
            return await nomad.post_json("/v1/jobs", {"Job": job})

    return update


def children_cpu(pid: int) -> float:
    """CPU seconds of a process's children that it has reaped (Linux /proc: cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def waited(pid: int) -> float:
    """Seconds a process's main thread has waited for a CPU while it could run (Linux schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float]:
    snapshot = {who: cpu_seconds(pid) for who, pid in pids.items()}
    snapshot["simulator's commands"] = children_cpu(pids["simulator"])
    for who in ("daemon", "simulator"):
        snapshot[f"{who} waiting for a CPU"] = waited(pids[who])
    snapshot["wall"] = trio.current_time()
    return snapshot


def cores(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Cores used by each process between two snapshots (CPU seconds / wall seconds)."""
    wall = after["wall"] - before["wall"]
    return {who: (after[who] - before[who]) / wall for who in before if who != "wall"}


async def register_runners(nomad: HttpPool, pool_size: int, count: int) -> None:
    """Environment 1's template job with a pool of ``pool_size``, and ``count`` more runner jobs of it;
    returns once ``pool_size`` allocations run."""
    environment = ExecutionEnvironment(ENVIRONMENT_ID, "python:3.12-slim", pool_size, 100.0, 256, False, ())
    status, body = await nomad.post_json("/v1/jobs", {"Job": template_job(environment)})
    assert status == 200, (status, body)
    pending = iter([new_runner_id(ENVIRONMENT_ID, Entropy().uuid()) for _ in range(count)])

    async def worker() -> None:
        for runner_id in pending:
            status, body = await nomad.post_json("/v1/jobs", {"Job": runner_job(environment, runner_id)})
            assert status == 200, (status, body)

    async with trio.open_nursery() as nursery:
        for _ in range(REGISTER_WORKERS):
            nursery.start_soon(worker)
    with trio.fail_after(120):
        while True:
            status, state = await nomad.get_json("/sim/v1/state")
            if state["allocations"]["by_client_status"].get("running", 0) >= pool_size:
                return
            await trio.sleep(0.5)


async def wait_idle(api: Api, size: int, within: float) -> float:
    """Wait until the environment has ``size`` idle runners; the seconds it took."""
    began = trio.current_time()
    with trio.fail_after(within):
        while True:
            status, stats = await api.get("/statistics/execution-environments")
            if status == 200 and stats.get(str(ENVIRONMENT_ID), {}).get("idleRunners") == size:
                return trio.current_time() - began
            await trio.sleep(0.5)


async def daemon_rss(api: Api, pid: int, size: int) -> tuple[float, list[int]]:
    """Seconds until the daemon's pool of ``size`` is full, and its RSS samples (KiB) after."""
    took = await wait_idle(api, size, within=300)
    await trio.sleep(SETTLE_S)
    samples = []
    for _ in range(RSS_SAMPLES):
        samples.append(rss_kib(pid))
        await trio.sleep(1)
    return took, samples


def busy_cores(samples: list[dict[str, float]], running: list[int], least: int) -> dict[str, float]:
    """Cores used over the intervals between samples with at least ``least`` executions running
    throughout, and the seconds they cover."""
    spent = dict.fromkeys(samples[0], 0.0)
    for (before, after), count in zip(itertools.pairwise(samples), running, strict=True):
        if count >= least:
            for who in spent:
                spent[who] += after[who] - before[who]
    wall = spent.pop("wall")
    return {**{who: seconds / max(wall, 1e-9) for who, seconds in spent.items()}, "wall": wall}


async def run_executions(api: Api, args: argparse.Namespace, pids: dict[str, int]) -> dict[str, Any]:
    runners = []
    for _ in range(-(-args.executions // args.per_runner)):
        status, body = await api.post("/runners", {"executionEnvironmentId": ENVIRONMENT_ID})
        assert status == 200, (status, body)
        runners.append(body["runnerId"])
    await wait_idle(api, args.runners, within=120)  # their replacements, at 100 a second
    command = f"for i in $(seq {args.lines}); do echo line $i; sleep 1; done"
    expected = [f"line {i}" for i in range(1, args.lines + 1)]
    # Each execution's stdout lines, terminal message, and when its first line came and it ended.
    outcomes: list[tuple[list[str], str, float, float]] = []

    async def execute(index: int, due: float) -> None:
        await trio.sleep_until(due)
        stdout: list[str] = []
        outcome = ["never started: closed without a message"]
        first = [float("inf")]

        def receive(text: str) -> bool:
            message = orjson.loads(text)
            kind = message["type"]
            if kind == "start":
                outcome[0] = "closed without a terminal message"
            elif kind == "stdout":
                first[0] = min(first[0], trio.current_time())
                stdout.append(message["data"])
            elif kind in TERMINAL:
                outcome[0] = f"{kind} {message.get('data', '')}".strip()
            return kind in TERMINAL

        runner = runners[index % len(runners)]
        try:
            status, body = await api.post(f"/runners/{runner}/execute", {"command": command})
            assert status == 200, (status, body)
            await websocket_messages(body["websocketUrl"], receive)
        except Exception as exc:
            outcome[0] = f"{'never started: ' * outcome[0].startswith('never')}failed: {exc!r}"
        outcomes.append(("".join(stdout).splitlines(), outcome[0], first[0], trio.current_time()))

    samples: list[dict[str, float]] = []

    async def sample_cpu() -> None:
        while True:
            samples.append(cpu_snapshot(pids))
            await trio.sleep(0.5)

    async with trio.open_nursery() as sampling:
        sampling.start_soon(sample_cpu)
        await trio.sleep(0.1)
        began = trio.current_time()
        with trio.fail_after(args.ramp + args.lines + 120):
            async with trio.open_nursery() as nursery:
                for index in range(args.executions):
                    nursery.start_soon(execute, index, began + index * args.ramp / args.executions)
        await trio.sleep(0.5)
        sampling.cancel_scope.cancel("the executions ended")

    # Executions running throughout each interval between samples (from their first line to their end).
    running = [
        sum(first <= before["wall"] and after["wall"] <= ended for *_, first, ended in outcomes)
        for before, after in itertools.pairwise(samples)
    ]
    most = max(running, default=0)
    return {
        "runners": len(runners),
        "complete": sum(o[0] == expected and o[1] == "exit 0" for o in outcomes),
        "lost": sum(len(set(expected) - set(lines)) for lines, *_ in outcomes),
        "never started": sum(outcome.startswith("never") for _, outcome, *_ in outcomes),
        "others": sorted({outcome for _, outcome, *_ in outcomes if outcome != "exit 0"}),
        "most running": most,
        "whole": busy_cores(samples, running, 0),
        "steady": busy_cores(samples, running, max(1, int(0.9 * most))),
        "busiest second": max(cores(a, b)["daemon"] for a, b in zip(samples, samples[2:], strict=False)),
    }


async def open_loop(
    requests: dict[str, Request], rate: float, seconds: float, pids: dict[str, int]
) -> dict[str, Any]:
    """Send each kind of ``requests`` ``rate`` times a second for ``seconds``, each at its due time
    (spread evenly between the kinds), whether or not the earlier ones were answered."""
    kinds = tuple(requests)
    latencies: dict[str, list[float]] = {kind: [] for kind in kinds}
    failures: dict[str, list[str]] = {kind: [] for kind in kinds}
    figures = {"late": 0.0, "in flight": 0, "most in flight": 0, "first answer": 0.0, "last answer": 0.0}

    async def send(kind: str, due: float) -> None:
        figures["late"] = max(figures["late"], trio.current_time() - due)
        figures["in flight"] += 1
        figures["most in flight"] = max(figures["most in flight"], figures["in flight"])
        try:
            status, answer = await requests[kind]()
        except (trio.BrokenResourceError, OSError) as exc:
            failures[kind].append(str(exc).split(": ")[-1])
            return
        finally:
            figures["in flight"] -= 1
        figures["last answer"] = trio.current_time()
        figures["first answer"] = figures["first answer"] or figures["last answer"]
        latencies[kind].append(figures["last answer"] - due)
        if status != 200:
            failures[kind].append(f"{status} {answer}")

    count = int(rate * seconds)
    before = cpu_snapshot(pids)
    began = before["wall"] + 0.1
    async with trio.open_nursery() as nursery:
        for i in range(count):
            for offset, kind in enumerate(kinds):
                due = began + (i + offset / len(kinds)) / rate
                await trio.sleep_until(due)
                nursery.start_soon(send, kind, due)
        nursery.cancel_scope.deadline = trio.current_time() + ANSWER_WITHIN_S
    after = cpu_snapshot(pids)
    for kind in kinds:
        unanswered = count - len(latencies[kind]) - len(failures[kind])
        failures[kind] += [f"no answer within {ANSWER_WITHIN_S:g} s of the last request"] * unanswered
    answered = count - len(failures[kinds[0]])
    return {
        **figures,
        "count": count,
        "latencies": latencies,
        "failures": failures,
        "cores": cores(before, after),
        "daemon ms": (after["daemon"] - before["daemon"]) * 1000,
        # Answered a second from the first answer to the last: below the rate when answers fall behind.
        "sustained": (answered - 1) / max(figures["last answer"] - figures["first answer"], 1e-9),
    }


async def run_claims(
    api: Api, nomad: HttpPool, args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, Any]:
    for _ in range(5):  # open the connections the load will reuse
        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(api.get, "/version")
                nursery.start_soon(nomad.get_json, "/v1/status/leader")
    claimed: list[str] = []
    requests = claim_requests(api, claimed)
    alone = await open_loop({"version": requests["version"]}, args.claim_rate, BASELINE_S, pids)
    mixed = await open_loop(requests, args.claim_rate, args.claim_seconds, pids)
    # The claims' floor, while their replacements are registered as they were during the claims.
    update = await open_loop({"update": bare_update(nomad, claimed)}, args.claim_rate, UPDATE_S, pids)
    # The daemon's CPU per claim answered: what the mixed load cost beyond its versions' cost alone.
    per_version = alone["daemon ms"] / max(1, len(alone["latencies"]["version"]))
    versions, answered = len(mixed["latencies"]["version"]), len(mixed["latencies"]["claim"])
    mixed["claim ms"] = (mixed["daemon ms"] - per_version * versions) / max(1, answered)
    mixed["version ms"] = per_version
    return {"alone": alone, "mixed": mixed, "update": update}


async def main_async(args: argparse.Namespace) -> int:
    logs = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    python = sys.executable
    processes = []
    try:
        simulator, addresses = start(
            [python, "-m", "supervisor", "simulate", "--listen", "127.0.0.1:0", *LARGE_NODES],
            env,
            "export NOMAD_ADDR=",
            logs / "simulate.log",
        )
        processes.append(simulator)
        print(f"logs in {logs}; the daemon runs at its default settings", flush=True)
        nomad = HttpPool(addresses.split(",")[0])
        rss: dict[int, tuple[float, list[int]]] = {}
        for size, added in (
            (args.base_runners, args.base_runners),
            (args.runners, args.runners - args.base_runners),
        ):
            began = trio.current_time()
            await register_runners(nomad, size, added)
            print(f"  {added:,} runner jobs registered in {trio.current_time() - began:.1f} s", flush=True)
            daemon, address = start(
                [python, "-m", "supervisor", "run", "--listen", "127.0.0.1:0"],
                {**env, "NOMAD_ADDR": addresses},
                "serving the API on ",
                logs / f"daemon-{size}.log",
            )
            processes.append(daemon)
            api = Api(address.split(",")[0].strip())
            rss[size] = await daemon_rss(api, daemon.pid, size)
            print(f"  {size:,} runners adopted in {rss[size][0]:.1f} s", flush=True)
            if size != args.runners:
                daemon.terminate()
                daemon.wait(timeout=30)
                await api.pool.aclose()
        pids = {"daemon": daemon.pid, "simulator": simulator.pid, "this client": os.getpid()}
        executions = await run_executions(api, args, pids)
        claims = await run_claims(api, nomad, args, pids)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    return report(args, rss, executions, claims)


def report(
    args: argparse.Namespace,
    rss: dict[int, tuple[float, list[int]]],
    executions: dict[str, Any],
    claims: dict[str, Any],
) -> int:
    print(f"\nmemory: the daemon's RSS, median of {RSS_SAMPLES} samples, idle runners adopted at startup")
    print(f"{'runners':>8} {'RSS MiB':>9} {'min':>8} {'max':>8}")
    medians = {size: statistics.median(samples) for size, (_, samples) in rss.items()}
    for size, (_, samples) in rss.items():
        print(
            f"{size:>8,} {medians[size] / 1024:>9.1f} {min(samples) / 1024:>8.1f} {max(samples) / 1024:>8.1f}"
        )
    per_runner = (medians[args.runners] - medians[args.base_runners]) / (args.runners - args.base_runners)

    lines = args.executions * args.lines
    print(
        f"\nexecutions: {args.executions:,} at once on {executions['runners']} runners, "
        f"{args.lines} lines each, one a second"
    )
    print(
        f"  complete (every line in order, exit 0): {executions['complete']:,}; never started: "
        f"{executions['never started']:,}; lines lost: {executions['lost']:,}"
    )
    for outcome in executions["others"][:4]:
        print(f"  other outcome: {outcome[:150]}")
    whole, steady, most = executions["whole"], executions["steady"], executions["most running"]
    least = max(1, int(0.9 * most))
    print(f"{'process':<28} {'cores, whole phase':>20} {f'cores, {least:,}+ running':>22}")
    for who in sorted(set(whole) - {"wall"}):
        during = f"{steady[who]:.2f}" if steady["wall"] and who != "simulator's commands" else "-"
        print(f"{who:<28} {whole[who]:>20.2f} {during:>22}")
    print(
        f"  whole phase {whole['wall']:.1f} s, the starts spread over {args.ramp:g} s; at most {most:,} ran "
        f"at once, {least:,} or more for {steady['wall']:.1f} s; the daemon's busiest second "
        f"{executions['busiest second']:.2f} cores; the commands' CPU counts as they end"
    )

    alone, mixed, update = claims["alone"], claims["mixed"], claims["update"]
    print(
        f"\nclaims: {args.claim_rate:g}/s open-loop for {args.claim_seconds:g} s, with as many GET /version "
        f"between them (first {BASELINE_S:g} s of GET /version alone; then {UPDATE_S:g} s of the claims' "
        "job update straight to Nomad); claimed runners are not given back"
    )
    print(
        f"{'request':<26} {'sent':>6} {'not 200':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'daemon':>7}"
    )
    rows = (("GET /version alone", alone, "version"), ("POST /runners", mixed, "claim"))
    bare = ("job update, bare", update, "update")
    for name, run, kind in (*rows, ("GET /version with claims", mixed, "version"), bare):
        values = run["latencies"][kind] or [float("inf")]
        print(
            f"{name:<26} {run['count']:>6} {len(run['failures'][kind]):>8} "
            f"{percentile(values, 0.5) * 1000:>8.1f} {percentile(values, 0.99) * 1000:>8.1f} "
            f"{max(values) * 1000:>8.1f} {run['cores']['daemon']:>6.2f}c"
        )
    for failure in sorted(set(mixed["failures"]["claim"]))[:3]:
        print(f"  claims failed: {mixed['failures']['claim'].count(failure)} x {failure}")
    used = mixed["cores"]
    print(
        f"  daemon CPU: {mixed['version ms']:.2f} ms per GET /version (alone), {mixed['claim ms']:.2f} ms "
        f"per claim (beyond its GET /version); claims answered 200 at {mixed['sustained']:.0f}/s"
    )
    print(
        f"  cores with claims: daemon {used['daemon']:.2f} (and {used['daemon waiting for a CPU']:.2f} "
        f"waiting for one), simulator {used['simulator']:.2f}, this client {used['this client']:.2f}; "
        f"latest send {mixed['late'] * 1000:.1f} ms late; at most {mixed['most in flight']} in flight"
    )
    claimed = mixed["latencies"]["claim"] or [float("inf")]
    version_p99 = percentile(mixed["latencies"]["version"] or [float("inf")], 0.99)
    update_p99 = percentile(update["latencies"]["update"] or [float("inf")], 0.99)
    ratio = percentile(claimed, 0.99) / (version_p99 + update_p99)
    print(
        f"  a claim's floor: version p99 {version_p99 * 1000:.1f} ms plus bare update p99 "
        f"{update_p99 * 1000:.1f} ms; bare updates not 200: {len(update['failures']['update'])}"
    )
    answered = mixed["count"] - len(mixed["failures"]["claim"])

    floor, rate, complete = 0.95 * args.claim_rate, mixed["sustained"], executions["complete"]
    busy = f"{steady['daemon']:.2f} cores with {least:,}+ running for {steady['wall']:.0f} s"
    busy_ok, needed = steady["daemon"] < 1 and most >= 0.9 * args.executions, 0.9 * args.executions
    targets = [
        ("RSS per runner", f"{per_runner:.1f} KB", "<= 4 KB", per_runner <= 4),
        (
            "claim p99 / (version p99 + bare update p99)",
            f"{ratio:.2f}x",
            f"<= {CLAIM_TARGET:g}x",
            ratio <= CLAIM_TARGET and not update["failures"]["update"],
        ),
        ("claims answered 200", f"{answered:,} of {mixed['count']:,}", "all", answered == mixed["count"]),
        ("claim rate sustained", f"{rate:.0f}/s", f">= {floor:g}/s", rate >= floor),
        ("execution lines lost", f"{executions['lost']:,} of {lines:,}", "0", executions["lost"] == 0),
        ("executions complete", f"{complete:,} of {args.executions:,}", "all", complete == args.executions),
        ("daemon CPU with the executions running", busy, f"< 1 core, {needed:,.0f}+ running", busy_ok),
    ]
    print()
    for name, figure, limit, ok in targets:
        print(f"TARGET {name}: {figure} (target {limit}): {'PASS' if ok else 'FAIL'}")
    return 0 if all(ok for *_, ok in targets) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the quick sizes, unless an option says")
    parser.add_argument("--runners", type=int, help="idle runners of the second daemon [10,000]")
    parser.add_argument("--base-runners", type=int, help="idle runners of the first daemon [1,000]")
    parser.add_argument("--claim-rate", type=float, default=200.0, help="claims a second [%(default)s]")
    parser.add_argument("--claim-seconds", type=float, help="seconds of claims [30]")
    parser.add_argument("--executions", type=int, help="executions at once [1,000]")
    parser.add_argument("--per-runner", type=int, default=10, help="executions per runner [%(default)s]")
    parser.add_argument("--lines", type=int, help="lines of each execution, one a second [30]")
    parser.add_argument("--ramp", type=float, help="seconds over which the executions start [20]")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not 0 < args.base_runners < args.runners:
        parser.error("--base-runners must be positive and fewer than --runners")
    return trio.run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
