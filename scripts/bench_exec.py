"""What the daemon adds to an execution: through our API versus straight through Nomad's exec.

    python scripts/bench_exec.py [--executions 500] [--concurrency 50] [--runners 10]

Starts ``supervisor simulate``, ``supervisor run`` (pointed at it) and the bare API stack (the
daemon's HTTP server and starlette) as separate processes, claims ``--runners`` runners, then runs
``--executions`` executions of a trivial command, ``--concurrency`` at a time, three ways in one run:

- directly: the simulated cluster's exec WebSocket on the runners' allocations, up to ``exited``
  (the baseline);
- directly, one at a time, with the command line the daemon sends for the same command (its
  ``NOMAD_*`` variables unset, its PID noted so that it can be stopped, the note removed at exit):
  what the runner's shell does beyond the command, which the daemon asks of it and no proxy saves;
- through our API: ``POST /runners/{id}/execute``, the WebSocket, up to the ``exit`` message;
- through the bare stack: the same two requests to http server + starlette configured as the daemon
  configures them, answering at once with no Nomad behind: what the API stack costs by itself;
- through the daemon's own exec client (``NomadClient.open_exec``, trio-websocket) from this process,
  up to ``exited``: with the bare stack, the two parts every execution through the daemon needs;
- through our API with every client agent firewalled off (the simulator's control), so that exec
  takes the fallback path through the servers instead of going straight to the agent.

Then all three again one at a time, where nothing waits for a CPU. Prints throughput, p50/p99
latency, each process's CPU time per execution, the added latency, and the daemon's CPU budget that
the throughput of the direct path would leave it once the client and the simulator have had their
share (every process shares this machine's cores), for information. Targets, against baselines
measured in the same run: the daemon's CPU per execution at most 1.4x that of its two parts by
themselves, the bare stack plus the bare exec client (what a proxy of executions cannot do without);
the latency it adds one at a time at most 2.5x, at p50, the bare stack's round trip plus what its
command line costs the runner's shell over the bare command (``scripts/exec_hops.py`` times the
hops); its p99 one at a time at most 3x its own p50.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import httpx
import orjson
import trio
from load_client import HttpPool, websocket_messages
from targets import target

from supervisor.core.commands import NOMAD_VARIABLES_COMMAND, execution_command, nomad_variable_names
from supervisor.core.config import ExecutionSettings
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.nomad.exec import exec_url

COMMAND = "true"
CPU_TARGET: Final = 1.4
LATENCY_TARGET: Final = 2.5
FLOOR_MARKER = "serving the bare stack on "
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


async def claim_runners(http: httpx.AsyncClient, count: int) -> list[str]:
    response = await http.put("/execution-environments/1", json={**ENVIRONMENT, "prewarmingPoolSize": count})
    response.raise_for_status()
    runners: list[str] = []
    with trio.fail_after(60):
        while len(runners) < count:
            claim = await http.post("/runners", json={"executionEnvironmentId": 1})
            if claim.status_code == 200:
                runners.append(claim.json()["runnerId"])
            else:
                await trio.sleep(0.05)
    return runners


def api_execution(pool: HttpPool, prefix: str, runners: list[str]) -> Callable[[], Awaitable[None]]:
    """One execution the way a Poseidon client runs it: POST execute, then the WebSocket to ``exit``."""
    counter = 0

    async def execute() -> None:
        nonlocal counter
        counter += 1
        runner = runners[counter % len(runners)]
        status, body = await pool.post_json(f"{prefix}/runners/{runner}/execute", {"command": COMMAND})
        assert status == 200, (status, body)
        messages = await websocket_messages(body["websocketUrl"], _terminal)
        assert orjson.loads(messages[-1]) == {"type": "exit", "data": 0}, messages

    return execute


def _terminal(message: str) -> bool:
    return orjson.loads(message)["type"] in ("exit", "error", "timeout")


def direct_execution(
    client: NomadClient, allocations: list[str], *, nomad_variables: tuple[str, ...] | None = None
) -> Callable[[], Awaitable[None]]:
    """One execution through the simulated cluster's exec WebSocket, up to ``exited``: of the bare
    command, or (given the task's ``NOMAD_*`` names) of the command line the daemon sends for it."""
    counter = 0

    async def execute() -> None:
        nonlocal counter
        counter += 1
        alloc_id = allocations[counter % len(allocations)]
        command = ["/bin/sh", "-c", COMMAND]
        if nomad_variables is not None:
            command = execution_command(
                COMMAND,
                {},
                execution_id=f"bench-{counter}",
                privileged=False,
                nomad_variables=nomad_variables,
                unprivileged_wrapper=ExecutionSettings().unprivileged_wrapper,
            )
        url = exec_url(client, alloc_id, task="default-task", command=command, tty=False)
        messages = await websocket_messages(url, lambda message: "exited" in orjson.loads(message))
        assert orjson.loads(messages[-1]) == {"exited": True, "result": {}}, messages

    return execute


def client_execution(client: NomadClient, allocations: list[str]) -> Callable[[], Awaitable[None]]:
    """One execution through the daemon's own exec client (trio-websocket), up to ``exited``: what
    the daemon's side of an exec session costs by itself."""
    counter = 0

    async def execute() -> None:
        nonlocal counter
        counter += 1
        alloc_id = allocations[counter % len(allocations)]
        async with client.open_exec(
            alloc_id, task="default-task", command=["/bin/sh", "-c", COMMAND]
        ) as session:
            exited, _, _ = await session.wait_exit()
        assert exited.exit_code == 0, exited

    return execute


def http_client(base_url: str, concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency * 2)
    return httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits)


async def phase(
    name: str, work: Callable[[], Awaitable[None]], executions: int, concurrency: int, pids: dict[str, int]
) -> tuple[float, list[float]]:
    """Run ``work`` and note each process's CPU time per execution under ``name``."""
    before = {who: cpu_seconds(pid) for who, pid in pids.items()}
    result = await timed(work, executions, concurrency)
    for who, pid in pids.items():
        CPU[(name, who)] = (cpu_seconds(pid) - before[who]) / executions
    return result


async def measure(
    api: str, nomad: str, floor: str, args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, tuple[float, list[float]]]:
    client_pid = {"this client": os.getpid()}
    results: dict[str, tuple[float, list[float]]] = {}
    api_pool, floor_pool = HttpPool(api), HttpPool(floor)
    async with (
        http_client(api + "/api/v1", args.concurrency) as http,
        NomadClient(NomadSettings(addresses=(nomad,))) as client,
    ):
        runners = await claim_runners(http, args.runners)
        allocations = [(await client.job_allocations(r)).value[0].id for r in runners]
        direct = direct_execution(client, allocations)
        async with client.open_exec(
            allocations[0], task="default-task", command=NOMAD_VARIABLES_COMMAND
        ) as env:
            _, listed, _ = await env.wait_exit()
        as_the_daemon = direct_execution(client, allocations, nomad_variables=nomad_variable_names(listed))
        through_api = api_execution(api_pool, "/api/v1", runners)
        bare_stack = api_execution(floor_pool, "", runners)
        exec_client = client_execution(client, allocations)
        for work in (direct, as_the_daemon, through_api, bare_stack, exec_client):  # warm every path up
            await timed(work, args.concurrency, args.concurrency)
        daemon_pids = {"daemon": pids["daemon"], "simulator": pids["simulator"], **client_pid}
        results["direct"] = await phase("direct", direct, args.executions, args.concurrency, daemon_pids)
        results["api"] = await phase("api", through_api, args.executions, args.concurrency, daemon_pids)
        floor_pids = {"http server + starlette": pids["floor"], **client_pid}
        results["floor"] = await phase("floor", bare_stack, args.executions, args.concurrency, floor_pids)
        results["client"] = await phase("client", exec_client, args.executions, args.concurrency, daemon_pids)
        # One at a time: the latency the daemon adds when nothing waits for a CPU.
        unloaded = max(50, args.executions // 5)
        results["direct 1"] = await timed(direct, unloaded, 1)
        results["command line 1"] = await timed(as_the_daemon, unloaded, 1)
        results["api 1"] = await timed(through_api, unloaded, 1)
        results["floor 1"] = await timed(bare_stack, unloaded, 1)
        results["client 1"] = await timed(exec_client, unloaded, 1)
        # The fallback path: every agent firewalled off, exec through the servers.
        state = (await http.get(f"{nomad}/sim/v1/state")).json()
        for node in state["nodes"]:
            await http.post(f"{nomad}/sim/v1/nodes/{node['name']}/http", json={"reachable": False})
        await timed(through_api, args.concurrency, args.concurrency)  # each agent is tried once
        results["fallback"] = await phase(
            "fallback", through_api, args.executions, args.concurrency, daemon_pids
        )
        results["fallback 1"] = await timed(through_api, unloaded, 1)
    await api_pool.aclose()
    await floor_pool.aclose()
    return results


async def serve_floor(args: argparse.Namespace) -> None:
    """The daemon's API stack with nothing behind it: its HTTP server (``supervisor.api.http_server``,
    configured as the daemon does) and starlette, answering ``execute`` with a WebSocket URL whose
    socket sends ``start`` and ``exit``. Its CPU time per execution is what the stack costs before
    the daemon does any work."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket

    from supervisor.api.http_server import AsgiServer, HttpServerSettings
    from supervisor.base.network import TcpNetwork

    async def execute(request: Request) -> JSONResponse:
        await request.json()
        host = request.headers["host"]
        runner = request.path_params["runner"]
        return JSONResponse({"websocketUrl": f"ws://{host}/runners/{runner}/websocket?executionID=x"})

    async def websocket(socket: WebSocket) -> None:
        await socket.accept()
        for message in ({"type": "start"}, {"type": "exit", "data": 0}):
            await socket.send_text(json.dumps(message))
        with contextlib.suppress(RuntimeError, trio.BrokenResourceError, trio.ClosedResourceError):
            await socket.close(code=1000)

    app = Starlette(
        routes=[
            Route("/runners/{runner}/execute", execute, methods=["POST"]),
            WebSocketRoute("/runners/{runner}/websocket", websocket),
        ]
    )
    host, port = args.serve_floor.rsplit(":", 1)
    listening = await TcpNetwork().listen(host, int(port))
    server = AsgiServer(app, HttpServerSettings(keep_alive_timeout=75.0))
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve, listening)
        print(f"{FLOOR_MARKER}{url}", flush=True)


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
    parser.add_argument("--serve-floor", metavar="HOST:PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_floor:
        trio.run(serve_floor, args)
        return 0

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    logs = Path(tempfile.mkdtemp(prefix="bench-exec-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        simulate, exports = start(
            [sys.executable, "-m", "supervisor", "simulate", "--listen", "127.0.0.1:0"],
            env,
            "export NOMAD_ADDR=",
            logs / "simulate.log",
        )
        processes.append(simulate)
        daemon, api = start(
            [sys.executable, "-m", "supervisor", "run", "--listen", "127.0.0.1:0"],
            {**env, "NOMAD_ADDR": exports},
            "serving the API on ",
            logs / "daemon.log",
        )
        processes.append(daemon)
        floor_server, floor = start(
            [sys.executable, __file__, "--serve-floor", "127.0.0.1:0"], env, FLOOR_MARKER, logs / "floor.log"
        )
        processes.append(floor_server)
        print(f"logs in {logs}")
        pids = {"daemon": daemon.pid, "simulator": simulate.pid, "floor": floor_server.pid}
        results = trio.run(measure, api, exports.split(",")[0], floor, args, pids)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    return report(results, args)


def report(results: dict[str, tuple[float, list[float]]], args: argparse.Namespace) -> int:
    rows: dict[str, dict[str, float]] = {}
    for name, (elapsed, latencies) in results.items():
        rows[name] = {
            "throughput": len(latencies) / elapsed,
            "p50": percentile(latencies, 0.5) * 1000,
            "p99": percentile(latencies, 0.99) * 1000,
        }
    labels = {
        "direct": "simulator exec directly (baseline)",
        "api": "through the daemon's API",
        "floor": "http server + starlette, no Nomad",
        "client": "the daemon's exec client alone",
        "direct 1": "one at a time: directly",
        "command line 1": "one at a time: the daemon's argv",
        "api 1": "one at a time: through the API",
        "floor 1": "one at a time: bare stack",
        "client 1": "one at a time: exec client alone",
        "fallback": "through the API, agents firewalled",
        "fallback 1": "one at a time: agents firewalled",
    }
    shape = f"{args.concurrency} at a time, on {args.runners} runners"
    print(f"{args.executions} executions of {COMMAND!r}, {shape}")
    print(f"{'path':<36}{'executions/s':>14}{'p50':>10}{'p99':>10}")
    for name, row in rows.items():
        print(f"{labels[name]:<36}{row['throughput']:>14.1f}{row['p50']:>8.1f}ms{row['p99']:>8.1f}ms")
    print("CPU per execution:")
    for path in ("direct", "api", "fallback", "floor", "client"):
        spent = ", ".join(f"{who} {CPU[(p, who)] * 1000:.2f} ms" for p, who in CPU if p == path)
        print(f"  {labels[path]}: {spent}")

    added_p50 = rows["api"]["p50"] - rows["direct"]["p50"]
    added_p99 = rows["api"]["p99"] - rows["direct"]["p99"]
    ratio = rows["api"]["throughput"] / rows["direct"]["throughput"]
    floor_ratio = rows["floor"]["throughput"] / rows["direct"]["throughput"]
    print(
        f"added latency: p50 {added_p50:+.1f} ms, p99 {added_p99:+.1f} ms; throughput ratio {ratio:.2f} "
        f"(the bare stack, with nothing behind it, reaches {floor_ratio:.2f})"
    )
    unloaded_p50 = rows["api 1"]["p50"] - rows["direct 1"]["p50"]
    unloaded_p99 = rows["api 1"]["p99"] - rows["direct 1"]["p99"]
    # The API path makes the direct path's exec plus a POST and a WebSocket round through the stack.
    print(
        f"added latency one at a time: p50 {unloaded_p50:+.1f} ms, p99 {unloaded_p99:+.1f} ms; "
        f"a POST and a WebSocket round through the bare stack take {rows['floor 1']['p50']:.1f} ms at p50"
    )
    # The daemon's own exec session costs what this process's exec client costs over the lean one.
    client_extra = rows["client 1"]["p50"] - rows["direct 1"]["p50"]
    print(
        f"the added p50 its two parts alone would give: the bare stack's round trip plus its exec client's "
        f"{client_extra:+.1f} ms over the lean one, {rows['floor 1']['p50'] + client_extra:.1f} ms, "
        f"{(rows['floor 1']['p50'] + client_extra) / rows['floor 1']['p50']:.2f}x the round trip"
    )

    print(
        "straight to the agent versus through the servers (agents firewalled): "
        f"p50 {rows['api 1']['p50']:.1f} ms against {rows['fallback 1']['p50']:.1f} ms one at a time, "
        f"{rows['api']['throughput']:.0f} against {rows['fallback']['throughput']:.0f} executions/s "
        "under load"
    )

    # All processes share this machine's cores, so throughput follows the CPU an execution costs.
    direct_total = sum(seconds for (path, _), seconds in CPU.items() if path == "direct")
    others = sum(seconds for (path, who), seconds in CPU.items() if path == "api" and who != "daemon")
    budget = direct_total / 0.8 - others
    print(
        f"CPU budget of the daemon for 80% of direct throughput: {budget * 1000:.2f} ms per execution "
        f"(direct path {direct_total * 1000:.2f} ms / 0.8, less {others * 1000:.2f} ms of client and "
        f"simulator); the daemon spent {CPU[('api', 'daemon')] * 1000:.2f} ms, of which the bare "
        f"http server + starlette stack costs {CPU[('floor', 'http server + starlette')] * 1000:.2f} ms"
    )
    daemon_cpu, stack_cpu = CPU[("api", "daemon")], CPU[("floor", "http server + starlette")]
    client_cpu = CPU[("client", "this client")]
    parts = stack_cpu + client_cpu
    print(
        f"the daemon's two parts by themselves: the bare stack {stack_cpu * 1000:.2f} ms and its exec "
        f"client (trio-websocket, run from this process) {client_cpu * 1000:.2f} ms, {parts * 1000:.2f} ms "
        f"together; the daemon {daemon_cpu * 1000:.2f} ms, {daemon_cpu / parts:.2f}x their sum"
    )
    cpu_ratio = daemon_cpu / parts
    command_extra = rows["command line 1"]["p50"] - rows["direct 1"]["p50"]
    floor = rows["floor 1"]["p50"] + max(0.0, command_extra)
    print(
        f"the daemon's command line costs the runner's shell {command_extra:+.1f} ms over the bare command "
        f"at p50; the added p50 is {unloaded_p50 / rows['floor 1']['p50']:.2f}x the bare stack's round trip "
        f"alone, {unloaded_p50 / floor:.2f}x the round trip plus that"
    )
    added_ratio = unloaded_p50 / floor
    tail_ratio = rows["api 1"]["p99"] / rows["api 1"]["p50"]
    met = [
        target(
            "daemon CPU per execution",
            cpu_ratio <= CPU_TARGET,
            f"{cpu_ratio:.2f}x the bare stack plus the bare exec client",
            f"<= {CPU_TARGET:g}x",
        ),
        target(
            "added p50 one at a time",
            added_ratio <= LATENCY_TARGET,
            f"{added_ratio:.2f}x the bare stack's round trip plus the command line's extra",
            f"<= {LATENCY_TARGET:g}x",
        ),
        target("p99 one at a time", tail_ratio <= 3, f"{tail_ratio:.2f}x its own p50", "<= 3x"),
    ]
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
