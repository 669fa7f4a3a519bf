"""What a relist reads, and the daemon's memory under claim-and-release churn.

    python scripts/bench_relist.py [--cycles 10000] [--history 50000] [--workers 8]

0. What one relist of 10,000 live runners costs the daemon (decode and reconcile, in this process):
   the figure behind the default ``watcher.resync_interval``. ``--cycles 0`` stops after it.
The simulated cluster runs in its own process, holding ``--history`` terminal allocations of purged
runner jobs, as a busy Nomad keeps them for hours. The daemon runs in another, at its default
settings, with one environment.

1. The relist: the requests the daemon's relist sends (nodes, template jobs, the environment's
   runner jobs by prefix, live allocations through a filter, without task states), decoded as the
   daemon decodes them, against the baseline of a relist that lists every job and every
   allocation. Median of 5 of each, time and bytes. Target: at least 10x less of both.
2. Memory: ``--cycles`` claim-and-release cycles (claim, then DELETE) from ``--workers`` clients.
   The daemon's RSS after 1,000 cycles and at the end. Target: within 10%. Each cycle registers
   one new runner job (the replacement; the claim's used flag is an in-place update, not paced),
   and the default ``factory.registrations_per_second`` is 100, so at most 100 cycles a second,
   with a periodic relist every minute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio
from bench_exec import ENVIRONMENT, start
from targets import target

from supervisor.core.environments import TEMPLATE_PREFIX, ExecutionEnvironment, runner_job, runner_prefix
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import Runner, RunnerState
from supervisor.informer.informer import LIVE_ALLOCATIONS, RELIST_PAGE
from supervisor.nomad import JobListStub, NomadClient, NomadSettings, structure_list
from supervisor.nomad.decode import structure_lean_alloc_stubs
from supervisor.simulator import SimConfig
from supervisor.simulator.state.encode import alloc_stub, empty_summary, job_stub
from supervisor.simulator.state.objects import SimAlloc, SimJob

ENVIRONMENT_ID = 1
POOL_SIZE = 20


def relist_cpu_at_scale(runners: int = 10_000, environments: int = 20) -> tuple[float, int]:
    """The daemon's own CPU seconds for one relist of ``runners`` live runners in ``environments``
    environments: decoding the job and live-allocation listings and reconciling them against a pool
    that knows every runner. Returns (seconds, bytes), the best of 3."""
    sim = SimConfig()
    pool = RunnerPool()
    jobs: list[bytes] = []
    allocs: list[bytes] = []
    for environment_id in range(1, environments + 1):
        environment = ExecutionEnvironment(
            environment_id, "python:3.12-slim", runners // environments, 100.0, 256, False, ()
        )
        pool.environments[environment_id] = environment
        for i in range(runners // environments):
            runner_id = f"{environment_id}-{uuid.UUID(int=environment_id * 1_000_000 + i)}"
            spec = runner_job(environment, runner_id)
            job = SimJob("default", runner_id, spec, status="running", create_index=10, modify_index=11)
            alloc = SimAlloc(
                id=str(uuid.UUID(int=i + 10**9 * environment_id)),
                namespace="default",
                eval_id="e",
                name=f"{runner_id}.default-group[0]",
                node_id="n1",
                node_name="worker-01",
                job_id=runner_id,
                job=spec,
                job_version=0,
                task_group="default-group",
                tasks=["default-task"],
                host_ip="10.0.1.10",
                client_status="running",
                create_index=12,
                modify_index=13,
            )
            jobs.append(orjson.dumps(job_stub(job, empty_summary(["default-group"]), meta=True)))
            allocs.append(orjson.dumps(alloc_stub(alloc, resources=True, task_states=False)))
            runner = Runner(
                runner_id, environment_id, RunnerState.IDLE, alloc_id=alloc.id, registered_index=10
            )
            pool.runners[runner_id] = runner
    del sim
    jobs_body, allocs_body = b"[" + b",".join(jobs) + b"]", b"[" + b",".join(allocs) + b"]"
    best = float("inf")
    for _ in range(3):
        began = time.process_time()
        listed_jobs = structure_list(orjson.loads(jobs_body), JobListStub)
        listed_allocs = structure_lean_alloc_stubs(orjson.loads(allocs_body))
        pool.reconcile(listed_jobs, listed_allocs, Moment(0.0), index=20)
        best = min(best, time.process_time() - began)
    return best, len(jobs_body) + len(allocs_body)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


async def measure_relists(nomad_address: str) -> dict[str, tuple[float, int]]:
    """Median seconds and bytes of each kind of relist, decoded as the daemon decodes them."""
    received: list[int] = []

    async def count(response: httpx.Response) -> None:
        await response.aread()
        received.append(len(response.content))

    client = NomadClient(NomadSettings(addresses=(nomad_address,)))
    client.http.event_hooks["response"].append(count)

    async def ours() -> None:
        await client.list_nodes()
        await client.list_jobs(TEMPLATE_PREFIX, meta=True)
        await client.list_jobs(runner_prefix(ENVIRONMENT_ID), meta=True, per_page=RELIST_PAGE)
        await client.list_allocations(
            filter=LIVE_ALLOCATIONS, resources=True, task_states=False, per_page=RELIST_PAGE, lean=True
        )

    async def everything() -> None:
        await client.list_nodes()
        await client.list_jobs(meta=True)
        await client.list_allocations(resources=True)

    results: dict[str, tuple[float, int]] = {}
    async with client:
        for name, relist in (("filtered relist", ours), ("relist of everything", everything)):
            seconds, sizes = [], []
            for _ in range(5):
                received.clear()
                began = time.perf_counter()
                await relist()
                seconds.append(time.perf_counter() - began)
                sizes.append(sum(received))
            results[name] = (statistics.median(seconds), int(statistics.median(sizes)))
    return results


async def churn(api: str, cycles: int, workers: int, daemon_pid: int) -> dict[str, Any]:
    done = 0
    overloaded = 0
    rss_at_1000 = 0
    handed_out: set[str] = set()
    twice = 0

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal done, overloaded, rss_at_1000, twice
        while done < cycles:
            response = await http.post("/runners", json={"executionEnvironmentId": ENVIRONMENT_ID})
            if response.status_code == 500:
                overloaded += 1
                await trio.sleep(0.05)
                continue
            response.raise_for_status()
            runner = response.json()["runnerId"]
            twice += runner in handed_out
            handed_out.add(runner)
            (await http.delete(f"/runners/{runner}")).raise_for_status()
            done += 1
            if done == 1000:
                rss_at_1000 = rss_kib(daemon_pid)
            if done % 1000 == 0:
                print(f"  {done} cycles, daemon RSS {rss_kib(daemon_pid) / 1024:.1f} MiB", flush=True)

    async with httpx.AsyncClient(base_url=api, timeout=30) as http, trio.open_nursery() as nursery:
        for _ in range(workers):
            nursery.start_soon(worker, http)
    return {
        "cycles": done,
        "overloaded": overloaded,
        "rss_at_1000_kib": rss_at_1000,
        "rss_at_end_kib": rss_kib(daemon_pid),
        "handed_out_twice": twice,
    }


async def main_async(args: argparse.Namespace) -> int:
    cpu, size = relist_cpu_at_scale()
    print(f"one relist of 10,000 live runners in 20 environments: {size / 2**20:.1f} MiB, ", end="")
    print(f"daemon CPU {cpu * 1000:.0f} ms")
    print(f"  every watcher.resync_interval (60 s): {cpu / 60:.2%} of a core")
    if args.cycles == 0:
        return 0
    logs = Path(tempfile.mkdtemp(prefix="bench-relist-"))
    python = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISOR_", "NOMAD_"))}
    simulator, addresses = start(
        [
            python,
            "-m",
            "supervisor",
            "simulate",
            "--listen",
            "127.0.0.1:0",
            "--nodes",
            "5",
            f"--history-allocations={args.history}",
            *("--node-cpu", "1000000", "--node-memory", "1000000", "--node-disk", "1000000"),
        ],
        env,
        "export NOMAD_ADDR=",
        logs / "simulator.log",
    )
    daemon, api = start(
        [python, "-m", "supervisor", "run", "--listen", "127.0.0.1:0"],
        {**env, "NOMAD_ADDR": addresses},
        "serving the API on ",
        logs / "daemon.log",
    )
    try:
        api = api.split(",")[0].strip() + "/api/v1"
        environment = {**ENVIRONMENT, "prewarmingPoolSize": POOL_SIZE}
        async with httpx.AsyncClient(base_url=api, timeout=30) as http:
            (await http.put(f"/execution-environments/{ENVIRONMENT_ID}", json=environment)).raise_for_status()
            with trio.fail_after(60):
                while True:
                    stats = (await http.get("/statistics/execution-environments")).json()
                    if stats[str(ENVIRONMENT_ID)]["idleRunners"] == POOL_SIZE:
                        break
                    await trio.sleep(0.1)
        relists = await measure_relists(addresses.split(",")[0])
        print(f"cluster: 5 nodes, {args.history} terminal allocations of purged runners; logs in {logs}")
        print(f"{'relist':<22} {'ms':>9} {'bytes':>12}")
        for name, (seconds, size) in relists.items():
            print(f"{name:<22} {seconds * 1000:>9.1f} {size:>12,}")
        ours, baseline = relists["filtered relist"], relists["relist of everything"]
        time_ratio, bytes_ratio = baseline[0] / ours[0], baseline[1] / max(1, ours[1])
        print(f"{args.cycles} claim-and-release cycles, {args.workers} clients:", flush=True)
        figures = await churn(api, args.cycles, args.workers, daemon.pid)
    finally:
        daemon.terminate()
        simulator.terminate()
        daemon.wait(timeout=30)
        simulator.wait(timeout=30)
    growth = figures["rss_at_end_kib"] / max(1, figures["rss_at_1000_kib"]) - 1
    print(
        f"daemon RSS after 1,000 cycles {figures['rss_at_1000_kib'] / 1024:.1f} MiB, after "
        f"{figures['cycles']:,} {figures['rss_at_end_kib'] / 1024:.1f} MiB ({growth:+.1%}); "
        f"{figures['overloaded']} claims found the pool empty and retried"
    )
    targets = [
        ("relist time, everything / filtered", f"{time_ratio:.1f}x", ">= 10x", time_ratio >= 10),
        ("relist bytes, everything / filtered", f"{bytes_ratio:.1f}x", ">= 10x", bytes_ratio >= 10),
        ("daemon RSS growth, 1,000 cycles to end", f"{growth:+.1%}", "within 10%", abs(growth) <= 0.10),
        (
            "runner IDs handed out twice",
            str(figures["handed_out_twice"]),
            "0",
            figures["handed_out_twice"] == 0,
        ),
    ]
    met = [target(name, ok, figure, limit) for name, figure, limit, ok in targets]
    return 0 if all(met) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=8)
    return trio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
