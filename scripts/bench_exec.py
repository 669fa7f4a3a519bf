"""What the daemon adds to an execution: through our API versus straight through Nomad's exec.

    python scripts/bench_exec.py [--executions 500] [--concurrency 50] [--runners 10]

Starts ``supervisor simulate`` and ``supervisor run`` (pointed at it) as separate processes, claims
``--runners`` runners, then runs ``--executions`` executions of a trivial command, ``--concurrency``
at a time, two ways in one run:

- through our API: ``POST /runners/{id}/execute``, the WebSocket, up to the ``exit`` message;
- directly: the simulated cluster's exec WebSocket on the same allocations, up to ``exited``.

Prints throughput and p50/p99 latency of both and the added latency. Targets: added p50 under 3 ms,
added p99 under 15 ms, our throughput at least 80% of the direct one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import trio
import trio_websocket

from supervisor.nomad import NomadClient, NomadSettings

COMMAND = "true"
# CPU seconds per execution, by (path, process).
CPU: dict[tuple[str, str], float] = {}
ENVIRONMENT = {
    "image": "python:3.12-slim",
    "prewarmingPoolSize": 5,
    "cpuLimit": 100,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}


def start(
    argv: list[str], env: dict[str, str], marker: str, log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a process whose output goes to ``log`` (nothing must block on a full pipe); wait for
    the line with ``marker`` and return what follows it."""
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if marker in line:
                return process, line.split(marker, 1)[1].strip()
        if process.poll() is not None:
            raise SystemExit(f"{' '.join(argv[2:4])} exited early; see {log}")
        time.sleep(0.05)
    raise SystemExit(f"{' '.join(argv[2:4])} did not start; see {log}")


async def timed(
    work: Callable[[], Awaitable[None]], executions: int, concurrency: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    remaining = executions

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            await work()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return time.perf_counter() - started, latencies


async def measure(
    api: str, nomad: str, args: argparse.Namespace, pids: dict[str, int] | None = None
) -> dict[str, tuple[float, list[float]]]:
    async with httpx.AsyncClient(
        base_url=api + "/api/v1", timeout=30, limits=httpx.Limits(max_connections=args.concurrency * 2)
    ) as http:
        response = await http.put(
            "/execution-environments/1", json={**ENVIRONMENT, "prewarmingPoolSize": args.runners}
        )
        response.raise_for_status()
        runners: list[str] = []
        with trio.fail_after(60):
            while len(runners) < args.runners:
                claim = await http.post("/runners", json={"executionEnvironmentId": 1})
                if claim.status_code == 200:
                    runners.append(claim.json()["runnerId"])
                else:
                    await trio.sleep(0.05)
        counter = 0

        async def through_api() -> None:
            nonlocal counter
            counter += 1
            runner = runners[counter % len(runners)]
            url = (await http.post(f"/runners/{runner}/execute", json={"command": COMMAND})).json()[
                "websocketUrl"
            ]
            async with trio_websocket.open_websocket_url(url) as ws:
                while True:
                    message = json.loads(await ws.get_message())
                    if message["type"] in ("exit", "error", "timeout"):
                        assert message == {"type": "exit", "data": 0}, message
                        return

        async with NomadClient(NomadSettings(addresses=(nomad,))) as client:
            allocations = [(await client.job_allocations(r)).value[0].id for r in runners]

            async def direct() -> None:
                nonlocal counter
                counter += 1
                alloc_id = allocations[counter % len(allocations)]
                async with client.open_exec(
                    alloc_id, task="default-task", command=["/bin/sh", "-c", COMMAND]
                ) as session:
                    exited, _, _ = await session.wait_exit()
                    assert exited.exit_code == 0

            await timed(direct, args.concurrency, args.concurrency)  # warm both paths up
            await timed(through_api, args.concurrency, args.concurrency)
            results: dict[str, tuple[float, list[float]]] = {}
            for name, work in (("direct", direct), ("api", through_api)):
                before = {who: cpu_seconds(pid) for who, pid in (pids or {}).items()}
                results[name] = await timed(work, args.executions, args.concurrency)
                for who, pid in (pids or {}).items():
                    CPU[(name, who)] = (cpu_seconds(pid) - before[who]) / args.executions
            return results


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--runners", type=int, default=10)
    args = parser.parse_args(argv)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    logs = Path(tempfile.mkdtemp(prefix="bench-exec-"))
    simulate, exports = start(
        [sys.executable, "-m", "supervisor", "simulate", "--listen", "127.0.0.1:0"],
        env,
        "export NOMAD_ADDR=",
        logs / "simulate.log",
    )
    nomad = exports.split(",")[0]
    daemon, api = start(
        [sys.executable, "-m", "supervisor", "run", "--listen", "127.0.0.1:0"],
        {**env, "NOMAD_ADDR": exports},
        "serving the API on ",
        logs / "daemon.log",
    )
    print(f"logs in {logs}")
    try:
        results = trio.run(measure, api, nomad, args, {"daemon": daemon.pid, "simulator": simulate.pid})
    finally:
        for process in (daemon, simulate):
            process.terminate()
        for process in (daemon, simulate):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()

    rows: dict[str, dict[str, Any]] = {}
    for name, (elapsed, latencies) in results.items():
        rows[name] = {
            "throughput": len(latencies) / elapsed,
            "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99),
        }
    shape = f"{args.concurrency} at a time, on {args.runners} runners"
    print(f"{args.executions} executions of {COMMAND!r}, {shape}")
    print(f"{'path':<34}{'executions/s':>14}{'p50':>10}{'p99':>10}")
    labels = {"direct": "simulator exec directly (baseline)", "api": "through the daemon's API"}
    for name in ("direct", "api"):
        row = rows[name]
        p50, p99 = row["p50"] * 1000, row["p99"] * 1000
        print(f"{labels[name]:<34}{row['throughput']:>14.1f}{p50:>8.1f}ms{p99:>8.1f}ms")
    for name in ("direct", "api"):
        spent = ", ".join(f"{who} {CPU[(path, who)] * 1000:.2f} ms" for path, who in CPU if path == name)
        print(f"CPU per execution, {labels[name]}: {spent}")
    added_p50 = (rows["api"]["p50"] - rows["direct"]["p50"]) * 1000
    added_p99 = (rows["api"]["p99"] - rows["direct"]["p99"]) * 1000
    ratio = rows["api"]["throughput"] / rows["direct"]["throughput"]
    print(f"added latency: p50 {added_p50:+.1f} ms, p99 {added_p99:+.1f} ms; throughput ratio {ratio:.2f}")
    checks = [
        (added_p50 < 3, f"added p50 under 3 ms ({added_p50:.1f} ms)"),
        (added_p99 < 15, f"added p99 under 15 ms ({added_p99:.1f} ms)"),
        (ratio >= 0.8, f"throughput at least 80% of direct ({ratio:.0%})"),
    ]
    for ok, text in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {text}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
