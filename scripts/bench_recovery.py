"""How fast the daemon recovers from a lost event stream, against Poseidon's per-runner pattern.

    python scripts/bench_recovery.py [--runners 10000] [--quick] [--cuts 3]

Starts ``supervisor simulate`` and registers ``--runners`` runner jobs (``--quick``: 1,000) in 20
environments as the daemon writes them (template jobs as its PUT does, runner jobs as its factory
does), then ``supervisor run`` at its default settings, which adopts them at startup (its factory
would take almost 2 minutes to fill 10,000). No environment is PUT again: any PUT rolls its runners
out, as Poseidon's does.

1. Baseline, before the daemon starts so that nothing else loads the simulator: Poseidon's
   recovery (``NomadRunnerManager.Load``), one request at a time as it makes them: per environment
   its runner jobs by prefix, then ``GET /v1/job/:id`` for each, then ``GET /v1/job/:id/allocations``
   for each (Poseidon also GETs each allocation then; left out, so the baseline is if anything fast).
2. ``--cuts`` times ``POST /sim/v1/streams/cut``: from the daemon's loss detection (its WARNING
   "event stream lost ... reconnecting in Xs") to its INFO "event stream up" line, written once the
   relist is reconciled and the new stream open. Less the backoff the WARNING line names, that is
   the daemon's own work (connect, list, decode, reconcile); the line gives the backoff to the
   millisecond. Daemon and simulator CPU of each recovery from /proc.
3. The informer's own periodic relist, ``watcher.resync_interval`` after the last recovery: the
   daemon's and the simulator's CPU over it, less their idle rates; its end is the DEBUG line
   "relisted ... (periodic)", so the daemon logs at DEBUG (one line per relist, nothing else here);
   and the bytes a relist reads. On a shared machine the wall-clock figures follow its load, so the
   same comparisons are printed in CPU time too, and the baseline against the simulator's CPU alone.

Targets: recovery work (median) under 1 s; at least 12x faster than the per-runner pattern, whose
requests are as quick as the simulator answers them on loopback (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import orjson
import trio
from attrs import frozen
from bench_exec import ENVIRONMENT, cpu_seconds, start
from load_client import HttpPool
from targets import target

from supervisor.base.entropy import Entropy
from supervisor.core.config import WatcherSettings
from supervisor.core.environments import (
    TEMPLATE_PREFIX,
    ExecutionEnvironment,
    environment_from_dict,
    new_runner_id,
    runner_job,
    runner_prefix,
    template_job,
)
from supervisor.informer.informer import LIVE_ALLOCATIONS, STREAM_HEALTHY_AFTER
from supervisor.nomad import NomadClient, NomadSettings

ENVIRONMENTS = 20
WORK_TARGET_S = 1.0
RATIO_TARGET = 12.0
# The WARNING line writes the backoff as "{:.1f}s": the true one is within this of it.
RESYNC_INTERVAL = WatcherSettings().resync_interval
# Parseable timestamps, and the relists' ends.
LOGGING = ("--log-format", "json", "--log-level", "DEBUG")

# Nodes that take 10,000 runners whatever each books: placement is not what is measured.
LARGE_NODES = ("--node-cpu", "1000000", "--node-memory", "1000000", "--node-disk", "1000000")


@frozen
class Baseline:
    seconds: float
    requests: int
    simulator_cpu: float
    client_cpu: float


@frozen
class Recovery:
    detected_after: float  # the cut's request to the daemon's WARNING line
    backoff: float  # as the WARNING line(s) write it
    down: float  # the WARNING line to the "up" line
    relisted_to_up: float  # the relist's end (DEBUG line) to "up": opening the new stream
    daemon_cpu: float
    simulator_cpu: float

    @property
    def work(self) -> float:
        return self.down - self.backoff


class DaemonLog:
    """The daemon's JSON log lines (loguru's ``serialize``) as they are written: (time, message)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.rest = b""
        self.pending: list[tuple[float, str]] = []

    def read(self) -> list[tuple[float, str]]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = self.rest + log.read()
        self.offset += len(data) - len(self.rest)
        *lines, self.rest = data.split(b"\n")
        records, self.pending = self.pending, []
        for line in lines:
            try:
                record = orjson.loads(line)
                records.append((datetime.fromisoformat(record["time"]).timestamp(), str(record["message"])))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # not one of the daemon's lines
        return records

    async def wait_for(self, prefix: str) -> list[tuple[float, str]]:
        """Every line until the first whose message starts with ``prefix``, that one included."""
        seen: list[tuple[float, str]] = []
        with trio.fail_after(120):
            while True:
                entries = self.read()
                for number, entry in enumerate(entries):
                    if entry[1].startswith(prefix):
                        self.pending = entries[number + 1 :]
                        return seen + entries[: number + 1]
                seen += entries
                await trio.sleep(0.005)


def environments(per_environment: int) -> list[ExecutionEnvironment]:
    body = {**ENVIRONMENT, "prewarmingPoolSize": per_environment}
    return [environment_from_dict(body, environment_id=i) for i in range(1, ENVIRONMENTS + 1)]


async def populate(nomad: str, envs: list[ExecutionEnvironment], concurrency: int = 8) -> None:
    """Register every environment's template job and its pool's runner jobs; wait until every
    runner's allocation runs."""
    jobs = [template_job(e) for e in envs]
    entropy = Entropy()
    jobs += [
        runner_job(e, new_runner_id(e.id, entropy.uuid()))
        for e in envs
        for _ in range(e.prewarming_pool_size)
    ]
    pool = HttpPool(nomad)

    async def register() -> None:
        while jobs:
            status, body = await pool.post_json("/v1/jobs", {"Job": jobs.pop()})
            assert status == 200, (status, body)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(register)
    runners = sum(e.prewarming_pool_size for e in envs)
    with trio.fail_after(600):
        while True:
            _, state = await pool.get_json("/sim/v1/state")
            if state["allocations"]["by_client_status"].get("running", 0) >= runners:
                break
            await trio.sleep(0.2)
    await pool.aclose()


async def per_runner_pattern(nomad: str, envs: list[ExecutionEnvironment], simulator: int) -> Baseline:
    """Poseidon's ``Load``: per environment the runner jobs by prefix, then each job, then each
    job's allocations, one request at a time, on one keep-alive connection."""
    pool = HttpPool(nomad)
    requests = 1
    cpu_before, client_before = cpu_seconds(simulator), time.process_time()
    began = time.perf_counter()
    await pool.get_json(f"/v1/jobs?prefix={TEMPLATE_PREFIX}")
    for environment in envs:
        _, stubs = await pool.get_json(f"/v1/jobs?prefix={runner_prefix(environment.id)}")
        ids = [stub["ID"] for stub in stubs if stub["Status"] != "dead"]
        for job_id in ids:
            status, _ = await pool.get_json(f"/v1/job/{job_id}")
            assert status == 200, status
        for job_id in ids:
            status, allocs = await pool.get_json(f"/v1/job/{job_id}/allocations")
            assert status == 200, status
            assert allocs, job_id
        requests += 1 + 2 * len(ids)
    seconds = time.perf_counter() - began
    baseline = Baseline(
        seconds, requests, cpu_seconds(simulator) - cpu_before, time.process_time() - client_before
    )
    await pool.aclose()
    return baseline


async def wait_ready(api: str, envs: list[ExecutionEnvironment], log: DaemonLog) -> float:
    """Wait for the stream to be up and every pool full. Returns the seconds the daemon took to
    adopt everything."""
    began = time.perf_counter()
    await log.wait_for("event stream up from index")
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        with trio.fail_after(300):
            while True:
                if await pools_full(http, envs):
                    break
                await trio.sleep(0.1)
    return time.perf_counter() - began


async def pools_full(http: httpx.AsyncClient, envs: list[ExecutionEnvironment]) -> bool:
    stats = (await http.get("/statistics/execution-environments")).json()
    return all(
        stats.get(str(e.id), {}).get("idleRunners") == e.prewarming_pool_size
        and stats[str(e.id)]["usedRunners"] == 0
        for e in envs
    )


async def cut_once(nomad: str, log: DaemonLog, pids: dict[str, int]) -> tuple[Recovery, float]:
    """Cut every stream; wait for the daemon's "up" line. Returns the recovery and its "up" time."""
    log.read()  # skip what came before the cut
    before = {who: cpu_seconds(pid) for who, pid in pids.items()}
    async with httpx.AsyncClient(timeout=30) as http:
        cut_at = time.time()
        (await http.post(f"{nomad}/sim/v1/streams/cut")).raise_for_status()
    lines = await log.wait_for("event stream up from index")
    after = {who: cpu_seconds(pid) for who, pid in pids.items()}
    lost = [(t, m) for t, m in lines if m.startswith("event stream lost")]
    relisted = [t for t, m in lines if m.startswith("relisted at index") and "connect" in m]
    if not lost or not relisted:
        raise SystemExit(f"the daemon's log does not show the loss and the relist: {lines}")
    delays = [re.search(r"reconnecting in ([0-9.]+)s", m) for _, m in lost]
    up_at = lines[-1][0]
    recovery = Recovery(
        detected_after=lost[0][0] - cut_at,
        backoff=sum(float(d.group(1)) for d in delays if d),
        down=up_at - lost[0][0],
        relisted_to_up=up_at - relisted[-1],
        daemon_cpu=after["daemon"] - before["daemon"],
        simulator_cpu=after["simulator"] - before["simulator"],
    )
    return recovery, up_at


async def periodic_relist(log: DaemonLog, pids: dict[str, int], up_at: float) -> tuple[float, float, float]:
    """The daemon's and the simulator's CPU seconds for the periodic relist due ``RESYNC_INTERVAL``
    after ``up_at``, less their idle rates over the 10 s before it; and its length in seconds."""
    due = up_at + RESYNC_INTERVAL
    samples: list[tuple[float, float, float]] = []
    await trio.sleep(max(0.0, due - 10 - time.time()))
    log.read()
    end = None
    with trio.fail_after(RESYNC_INTERVAL + 60):
        while end is None or time.time() < end + 0.5:
            samples.append((time.time(), cpu_seconds(pids["daemon"]), cpu_seconds(pids["simulator"])))
            for at, message in log.read():
                if message.startswith("relisted at index") and "periodic" in message:
                    end = at
            await trio.sleep(0.02)
    idle = [s for s in samples if s[0] <= due - 0.1]  # in time order
    first, last = idle[-1], next(s for s in samples if s[0] >= end + 0.05)
    rates = [(idle[-1][i] - idle[0][i]) / (idle[-1][0] - idle[0][0]) for i in (1, 2)]
    daemon, simulator = (last[i] - first[i] - rates[i - 1] * (last[0] - first[0]) for i in (1, 2))
    return daemon, simulator, end - due


async def relist_bytes(nomad: str, envs: list[ExecutionEnvironment]) -> int:
    """Bytes of the answers to one relist's requests, made as the daemon's relist makes them."""
    received: list[int] = []

    async def count(response: httpx.Response) -> None:
        await response.aread()
        received.append(len(response.content))

    async with NomadClient(NomadSettings(addresses=(nomad,))) as client:
        client.http.event_hooks["response"].append(count)
        await client.list_nodes()
        await client.list_jobs(TEMPLATE_PREFIX, meta=True)
        for environment in envs:
            await client.list_jobs(runner_prefix(environment.id), meta=True)
        await client.list_allocations(filter=LIVE_ALLOCATIONS, resources=True, task_states=False)
    return sum(received)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


async def measure(args: argparse.Namespace, logs: Path) -> int:
    envs = environments(args.runners // ENVIRONMENTS)
    runners = sum(e.prewarming_pool_size for e in envs)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    python = sys.executable
    simulate, exports = start(
        [python, "-m", "supervisor", "simulate", "--listen", "127.0.0.1:0", *LARGE_NODES],
        env,
        "export NOMAD_ADDR=",
        logs / "simulate.log",
    )
    processes = [simulate]
    try:
        nomad = exports.split(",")[0]
        began = time.perf_counter()
        await populate(nomad, envs)
        populated = time.perf_counter() - began
        print(f"cluster: {runners:,} runners in {len(envs)} environments, registered in {populated:.1f} s")
        print(f"logs in {logs}", flush=True)
        baseline = await per_runner_pattern(nomad, envs, simulate.pid)

        daemon, listening = start(
            [python, "-m", "supervisor", "run", "--listen", "127.0.0.1:0", *LOGGING],
            {**env, "NOMAD_ADDR": exports},
            "serving the API on ",
            logs / "daemon.log",
        )
        processes.append(daemon)
        address = re.match(r"http://[^\s\"\\]+", listening)
        assert address is not None, listening
        log = DaemonLog(logs / "daemon.log")
        api = address.group(0) + "/api/v1"
        adopted = await wait_ready(api, envs, log)
        print(f"daemon: adopted every runner, pools full, {adopted:.1f} s after it served", flush=True)

        pids = {"daemon": daemon.pid, "simulator": simulate.pid}
        recoveries: list[Recovery] = []
        up_at = 0.0
        for _ in range(args.cuts):
            # Past the healthy stretch, each cut is a first failure: a backoff in [0, 0.5) s.
            await trio.sleep(STREAM_HEALTHY_AFTER + 1)
            recovery, up_at = await cut_once(nomad, log, pids)
            recoveries.append(recovery)
        async with httpx.AsyncClient(base_url=api, timeout=30) as http:
            if not await pools_full(http, envs):
                raise SystemExit("a pool is not full after the cuts: the recoveries lost runners")
        print(f"waiting for the periodic relist, {RESYNC_INTERVAL:.0f} s after the last recovery", flush=True)
        relist = await periodic_relist(log, pids, up_at)
        debug_lines = sum(b'"DEBUG"' in line for line in (logs / "daemon.log").read_bytes().splitlines())
        size = await relist_bytes(nomad, envs)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
    return report(args, runners, baseline, recoveries, (*relist, size), debug_lines)


def report(
    args: argparse.Namespace,
    runners: int,
    baseline: Baseline,
    recoveries: list[Recovery],
    relist: tuple[float, float, float, int],
    debug_lines: int,
) -> int:
    print(f"{args.cuts} stream cuts at {runners:,} runners, daemon at its default settings:")
    header = ("cut", "detected", "backoff", "down", "work", "stream open", "daemon CPU", "simulator CPU")
    print("".join(f"{h:>14}" for h in header))
    for number, r in enumerate(recoveries, 1):
        row = [str(number), ms(r.detected_after), f"{r.backoff:.3f} s", ms(r.down)]
        row += [ms(r.work), ms(r.relisted_to_up), ms(r.daemon_cpu), ms(r.simulator_cpu)]
        print("".join(f"{cell:>14}" for cell in row))
    works = [r.work for r in recoveries]
    work = statistics.median(works)
    print(
        f"recovery work: median {ms(work)}, worst {ms(max(works))}; "
        f"backoff median {statistics.median(r.backoff for r in recoveries):.3f} s"
    )
    print(
        f"per-runner pattern (Poseidon's Load, one request at a time, before the daemon started): "
        f"{baseline.requests:,} requests in {baseline.seconds:.2f} s "
        f"({baseline.seconds / baseline.requests * 1000:.2f} ms each); simulator CPU "
        f"{baseline.simulator_cpu:.2f} s, this client's CPU {baseline.client_cpu:.2f} s"
    )
    ratio = baseline.seconds / work
    print(
        f"per-runner pattern / recovery work: {ratio:.1f}x; against the simulator's CPU alone for that "
        f"pattern (a client that costs nothing): {baseline.simulator_cpu / work:.1f}x"
    )
    recovery_cpu = statistics.median(r.daemon_cpu + r.simulator_cpu for r in recoveries)
    baseline_cpu = baseline.simulator_cpu + baseline.client_cpu
    print(
        f"in CPU time, which the machine's other load does not inflate: a recovery costs the daemon and "
        f"the simulator {ms(recovery_cpu)} (median), the per-runner pattern costs the simulator and "
        f"this client {baseline_cpu:.2f} s: {baseline_cpu / recovery_cpu:.1f}x"
    )
    daemon_cpu, simulator_cpu, length, size = relist
    print(
        f"one periodic relist at {runners:,} runners: {size / 2**20:.1f} MiB read, {ms(length)} long; "
        f"daemon CPU {ms(daemon_cpu)}, simulator CPU {ms(simulator_cpu)} (less idle rates); every "
        f"{RESYNC_INTERVAL:.0f} s (watcher.resync_interval) that is {daemon_cpu / RESYNC_INTERVAL:.2%} of "
        f"a core for the daemon, {simulator_cpu / RESYNC_INTERVAL:.2%} for Nomad"
    )
    print(f"log: --log-level DEBUG and json; {debug_lines} DEBUG lines in the daemon's whole log (relists)")
    met = [
        target("recovery work", work < WORK_TARGET_S, f"{work:.2f} s", f"< {WORK_TARGET_S:g} s"),
        target(
            "recovery vs per-runner pattern", ratio >= RATIO_TARGET, f"{ratio:.1f}x", f">= {RATIO_TARGET:g}x"
        ),
    ]
    return 0 if all(met) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=10_000, help="in 20 environments [%(default)s]")
    parser.add_argument("--quick", action="store_true", help="1,000 runners")
    parser.add_argument("--cuts", type=int, default=3, help="stream cuts [%(default)s]")
    args = parser.parse_args(argv)
    if args.quick:
        args.runners = 1_000
    if args.runners < ENVIRONMENTS or args.cuts < 1:
        parser.error(f"--runners must be at least {ENVIRONMENTS} and --cuts at least 1")
    return trio.run(measure, args, Path(tempfile.mkdtemp(prefix="bench-recovery-")))


if __name__ == "__main__":
    sys.exit(main())
