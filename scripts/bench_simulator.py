"""How the simulated cluster holds up at scale.

    python scripts/bench_simulator.py [--runners 10000] [--rate 1000] [--seconds 10] [--subscribers 5]

The cluster runs in a child process (so that this process's readers do not share its CPU). It places
``--runners`` runner jobs; then this process measures, over real HTTP:

- ``GET /v1/jobs?prefix=`` and ``GET /v1/allocations?resources=true`` (best and worst of 5), against
  the baseline of ``GET /v1/status/leader`` (the HTTP round trip with no work behind it);
- the event stream: ``--subscribers`` readers (our own stream client) while the cluster writes
  ``--rate`` allocation updates per second for ``--seconds``; each reader must receive every update,
  and the lag from the write (the allocation's ModifyTime) to its arrival is reported.

Targets: each list answers in under 1 s; every reader receives every update, with p99 lag under 1 s.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
import trio
import trio.lowlevel
from targets import target

from supervisor.cli import GC_THRESHOLDS
from supervisor.nomad import Allocation, NomadClient, NomadSettings

LIST_TARGET_S = 1.0
LAG_TARGET_S = 1.0
# The description of the allocation updates the load generator writes, to tell them from older events.
PRODUCED = "benchmark update"


# -- the child: a cluster with its load generator -------------------------------------------------


def runner_spec(job_id: str) -> dict[str, Any]:
    return {
        "ID": job_id,
        "Type": "batch",
        "Datacenters": ["dc1"],
        "Meta": {"used": "false"},
        "TaskGroups": [
            {
                "Name": "default-group",
                "Count": 1,
                "Networks": [{"Mode": "host", "DynamicPorts": [{"Label": "8080", "To": 8080}]}],
                "Tasks": [
                    {
                        "Name": "default-task",
                        "Driver": "docker",
                        "Config": {
                            "image": "openhpi/co_execenv_python:3.8",
                            "command": "sleep",
                            "args": ["infinity"],
                        },
                        "Resources": {"CPU": 20, "MemoryMB": 50, "MemoryMaxMB": 512},
                    }
                ],
            }
        ],
    }


async def serve(runners: int, seed: int) -> None:
    from supervisor.simulator import SimConfig, SimulatedCluster

    big = 1_000_000  # nodes that take every runner: placement is not what is measured
    config = SimConfig(
        seed=seed,
        nodes=5,
        eval_delay=0.0,
        alloc_start_delay=0.0,
        node_cpu_mhz=big,
        node_memory_mb=big,
        node_disk_mb=big,
    )
    async with trio.open_nursery() as nursery:
        cluster: SimulatedCluster = await nursery.start(SimulatedCluster(config).run)
        started = time.perf_counter()
        for i in range(runners):
            cluster.jobs.register(runner_spec(f"29-{i:08d}"), "default")
            if i % 500 == 499:
                await trio.lowlevel.checkpoint()
        while sum(a.client_status == "running" for a in cluster.state.allocs.values()) < runners:
            await cluster.wait_for_write()
        print(f"READY {cluster.addresses[0]} {time.perf_counter() - started:.2f}", flush=True)
        stdin = trio.lowlevel.FdStream(0)
        buffer = b""
        while True:
            while b"\n" not in buffer:
                buffer += await stdin.receive_some(1024)
            line, buffer = buffer.split(b"\n", 1)
            words = line.decode().split()
            if words[0] == "quit":
                nursery.cancel_scope.cancel("benchmark over")
                return
            rate, seconds = float(words[1]), float(words[2])
            count = await produce_updates(cluster, rate, seconds)
            print(f"DONE {count}", flush=True)


async def produce_updates(cluster: Any, rate: float, seconds: float) -> int:
    """``rate`` AllocationUpdated writes per second, each on one allocation, in 10 ms slices."""
    allocs = list(cluster.state.allocs.values())
    state = cluster.state
    count, start, total = 0, trio.current_time(), int(seconds * rate)
    while count < total:
        due = min(int((trio.current_time() - start) * rate), total)
        while count < due:
            alloc = allocs[count % len(allocs)]
            with state.write("AllocationUpdated") as tx:
                state.alloc_changed(tx, alloc, client_description=f"{PRODUCED} {count}")
            count += 1
        await trio.sleep(0.01)
    return count


# -- the parent: measurements -----------------------------------------------------------------------


async def timed_get(
    http: httpx.AsyncClient, path: str, params: dict[str, str] | None = None
) -> tuple[float, int]:
    started = time.perf_counter()
    response = await http.get(path, params=params)
    response.raise_for_status()
    return time.perf_counter() - started, len(response.content)


async def measure_lists(address: str, runners: int) -> list[tuple[str, float, float, int]]:
    rows = []
    async with httpx.AsyncClient(base_url=address, timeout=60) as http:
        floor = [(await timed_get(http, "/v1/status/leader"))[0] for _ in range(20)]
        rows.append(("GET /v1/status/leader (baseline)", min(floor), statistics.median(floor), 0))
        for path, params in (("/v1/jobs", {"prefix": ""}), ("/v1/allocations", {"resources": "true"})):
            runs = [await timed_get(http, path, params) for _ in range(5)]
            times = [t for t, _ in runs]
            rows.append((f"GET {path}?{next(iter(params))}=...", min(times), max(times), runs[0][1]))
    return rows


async def subscriber(
    address: str, index: int, expected: int, lags: list[float], received: list[int], slot: int
) -> None:
    settings = NomadSettings(addresses=(address,))
    async with (
        NomadClient(settings) as client,
        client.open_event_stream({"Allocation": "*"}, index=index) as stream,
    ):
        while received[slot] < expected:
            batch = await stream.receive()
            now_ns = time.time_ns()
            for event in batch.events:
                payload = event.payload
                if isinstance(payload, Allocation) and payload.client_description.startswith(PRODUCED):
                    received[slot] += 1
                    lags.append((now_ns - payload.modify_time_ns) / 1e9)


async def measure_stream(
    child: Any, address: str, subscribers: int, rate: float, seconds: float
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=address) as http:
        index = int((await http.get("/v1/jobs")).headers["X-Nomad-Index"])
    expected = int(rate * seconds)
    lags: list[list[float]] = [[] for _ in range(subscribers)]
    received = [0] * subscribers
    started = time.perf_counter()
    with trio.move_on_after(seconds + 30):
        async with trio.open_nursery() as nursery:
            for slot in range(subscribers):
                nursery.start_soon(subscriber, address, index + 1, expected, lags[slot], received, slot)
            await trio.sleep(0.5)
            child.stdin.write(f"updates {rate} {seconds}\n")
            child.stdin.flush()
            done = await trio.to_thread.run_sync(child.stdout.readline)
            assert done.startswith("DONE"), done
    elapsed = time.perf_counter() - started
    all_lags = sorted(lag for per in lags for lag in per)
    return {
        "expected": expected,
        "received": received,
        "elapsed": elapsed,
        "p50": all_lags[len(all_lags) // 2] if all_lags else float("inf"),
        "p99": all_lags[int(len(all_lags) * 0.99)] if all_lags else float("inf"),
        "max": all_lags[-1] if all_lags else float("inf"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--subscribers", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        gc.set_threshold(*GC_THRESHOLDS)  # as `supervisor simulate` runs
        trio.run(serve, args.runners, args.seed)
        return 0

    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--runners", str(args.runners), "--seed", str(args.seed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().split()
        if not ready or ready[0] != "READY":
            raise SystemExit(f"the cluster did not start: {ready}")
        address, placed_s = ready[1], float(ready[2])
        print(f"cluster: {args.runners:,} runner jobs placed and running in {placed_s:.1f} s (child process)")
        ok = True
        rows = trio.run(measure_lists, address, args.runners)
        floor = rows[0][2]
        print(f"{'request':<40}{'best':>10}{'worst':>10}{'bytes':>14}{'x baseline':>12}")
        for name, best, worst, size in rows:
            print(f"{name:<40}{best * 1000:>8.1f}ms{worst * 1000:>8.1f}ms{size:>14,}{worst / floor:>12.0f}")
        for name, _, worst, _ in rows[1:]:
            limit = f"< {LIST_TARGET_S:g} s"
            ok &= target(name, worst < LIST_TARGET_S, f"{worst:.3f} s", limit)
        stream = trio.run(measure_stream, child, address, args.subscribers, args.rate, args.seconds)
        rate = stream["expected"] / args.seconds
        print(
            f"event stream: {args.subscribers} subscribers, {stream['expected']:,} allocation updates at "
            f"{rate:,.0f}/s; received {stream['received']}; lag p50 {stream['p50'] * 1000:.1f} ms, "
            f"p99 {stream['p99'] * 1000:.1f} ms, max {stream['max'] * 1000:.1f} ms"
        )
        complete = all(r == stream["expected"] for r in stream["received"])
        ok &= target(
            f"{args.subscribers} subscribers at {rate:,.0f} updates/s",
            complete and stream["p99"] < LAG_TARGET_S,
            f"p99 lag {stream['p99']:.3f} s, all received: {complete}",
            f"p99 < {LAG_TARGET_S:g} s, all received",
        )
        return 0 if ok else 1
    finally:
        if child.stdin:
            child.stdin.write("quit\n")
            child.stdin.flush()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


if __name__ == "__main__":
    sys.exit(main())
