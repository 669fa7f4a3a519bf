"""What the daemon adds to an execution: through our API versus straight through Nomad's exec.

    python scripts/bench_exec.py [--executions 500] [--concurrency 50] [--runners 10]

Starts ``supervisor simulate``, three ``supervisor run`` (pointed at it, each in a namespace of its
own: the defaults, where an execution runs on a terminal with its stderr read apart by a second exec;
a terminal with stderr merged, ``interactive_stderr = false``; no terminal, ``tty = false``) and the
bare API stack (the daemon's HTTP server and starlette) as separate processes, claims ``--runners``
runners of each daemon, then runs ``--executions`` executions of a trivial command, ``--concurrency``
at a time, these ways in one run:

- directly: the simulated cluster's exec WebSocket on the runners' allocations, up to ``exited``
  (the baseline);
- directly, one at a time, with the command lines the daemon sends for the same command (its
  ``NOMAD_*`` variables unset, its PID noted so that it can be stopped, the note removed at exit, in
  bash under ``/sbin/setuser user``; by default on a terminal, its stderr to a fifo that the second
  exec's command line reads): what the runner's shells do beyond the command, which the daemon asks
  of them and no proxy saves;
- through our API: ``POST /runners/{id}/execute``, the WebSocket, up to the ``exit`` message, for
  each of the three daemons;
- through the bare stack: the same two requests to http server + starlette configured as the daemon
  configures them, answering at once with no Nomad behind: what the API stack costs by itself;
- through the daemon's own exec client (``NomadClient.open_exec``, trio-websocket) from this process,
  up to ``exited``: with the bare stack, the two parts every execution through the daemon needs; by
  default a terminal's exec (with its ``tty_size``) and, at the same time, a second exec without one,
  as the daemon opens them; one exec on a terminal, and one without, for the other two daemons;
- through our API with every client agent firewalled off (the simulator's control), so that exec
  takes the fallback path through the servers instead of going straight to the agent.

Then again one at a time, where nothing waits for a CPU. Prints throughput, p50/p99 latency, each
process's CPU time per execution, the added latency, what keeping stderr apart costs an execution
(against stderr merged on the terminal, and against no terminal: the daemon's and the simulated
runner's CPU, and the latency), and the daemon's CPU budget that the throughput of the direct path
would leave it once the client and the simulator have had their share (every process shares this
machine's cores), for information. Targets, for the default daemon against baselines measured in the
same run: its CPU per execution at most 1.4x that of its parts by themselves, the bare stack plus the
bare exec client's two sessions (what a proxy of executions cannot do without); the latency it adds
one at a time at most 2.5x, at p50, the bare stack's round trip plus what its command lines cost the
runner's shells over the bare command (``scripts/exec_hops.py`` times the hops); its p99 one at a
time at most 3x its own p50.
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

from supervisor.core.commands import (
    NOMAD_VARIABLES_COMMAND,
    execution_command,
    nomad_variable_names,
    stderr_reader_command,
)
from supervisor.core.config import ExecutionSettings
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.nomad.exec import exec_url

COMMAND = "true"
CPU_TARGET: Final = 1.4
LATENCY_TARGET: Final = 2.5
FLOOR_MARKER = "serving the bare stack on "
# CPU seconds per execution, by (path, process).
CPU: dict[tuple[str, str], float] = {}
# The daemons: how each runs an execution, by name (its namespace and its settings' variables).
MODES: Final = {
    "apart": ("default", {}),
    "merged": ("bench-merged", {"SUPERVISOR_EXECUTION_INTERACTIVE_STDERR": "false"}),
    "no tty": ("bench-notty", {"SUPERVISOR_EXECUTION_TTY": "false"}),
}
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
    client: NomadClient,
    allocations: list[str],
    *,
    nomad_variables: tuple[str, ...] | None = None,
    mode: str = "no tty",
) -> Callable[[], Awaitable[None]]:
    """One execution through the simulated cluster's exec WebSocket, up to ``exited``: of the bare
    command, or (given the task's ``NOMAD_*`` names) of the command lines the daemon sends for it in
    ``mode`` (by default, two execs at once: the command's on a terminal, and its stderr's reader)."""
    counter = 0
    settings = ExecutionSettings(tty=mode != "no tty", interactive_stderr=mode == "apart")

    async def run(command: list[str], tty: bool, alloc_id: str) -> None:
        url = exec_url(client, alloc_id, task="default-task", command=command, tty=tty)
        messages = await websocket_messages(url, lambda message: "exited" in orjson.loads(message))
        assert orjson.loads(messages[-1]) == {"exited": True, "result": {}}, messages

    async def execute() -> None:
        nonlocal counter
        counter += 1
        alloc_id = allocations[counter % len(allocations)]
        if nomad_variables is None:
            await run(["/bin/sh", "-c", COMMAND], False, alloc_id)
            return
        apart = settings.tty and settings.interactive_stderr
        command = execution_command(
            COMMAND,
            {},
            execution_id=f"bench-{counter}",
            privileged=False,
            nomad_variables=nomad_variables,
            unprivileged_wrapper=settings.unprivileged_wrapper,
            shell=settings.shell,
            stderr_apart=apart,
        )
        async with trio.open_nursery() as nursery:
            if apart:
                nursery.start_soon(run, stderr_reader_command(f"bench-{counter}"), False, alloc_id)
            await run(command, settings.tty, alloc_id)

    return execute


def client_execution(
    client: NomadClient, allocations: list[str], mode: str = "no tty"
) -> Callable[[], Awaitable[None]]:
    """One execution through the daemon's own exec client (trio-websocket), up to ``exited``: what
    the daemon's side of its exec sessions costs by itself in ``mode`` (apart: one on a terminal,
    sized, and a second one without, at the same time)."""
    counter = 0

    async def run(alloc_id: str, tty: bool) -> None:
        async with client.open_exec(
            alloc_id, task="default-task", command=["/bin/sh", "-c", COMMAND], tty=tty
        ) as session:
            if tty:
                await session.resize(height=24, width=80)
            exited, _, _ = await session.wait_exit()
        assert exited.exit_code == 0, exited

    async def execute() -> None:
        nonlocal counter
        counter += 1
        alloc_id = allocations[counter % len(allocations)]
        async with trio.open_nursery() as nursery:
            if mode == "apart":
                nursery.start_soon(run, alloc_id, False)
            await run(alloc_id, mode != "no tty")

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
    apis: dict[str, str], nomad: str, floor: str, args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, tuple[float, list[float]]]:
    client_pid = {"this client": os.getpid()}
    results: dict[str, tuple[float, list[float]]] = {}
    pools = {mode: HttpPool(api) for mode, api in apis.items()}
    floor_pool = HttpPool(floor)
    async with (
        http_client(apis["apart"] + "/api/v1", args.concurrency) as http,
        NomadClient(NomadSettings(addresses=(nomad,))) as client,
    ):
        runners = {"apart": await claim_runners(http, args.runners)}
        for mode in ("merged", "no tty"):
            async with http_client(apis[mode] + "/api/v1", args.concurrency) as other:
                runners[mode] = await claim_runners(other, args.runners)
        allocations = [(await client.job_allocations(r)).value[0].id for r in runners["apart"]]
        direct = direct_execution(client, allocations)
        async with client.open_exec(
            allocations[0], task="default-task", command=NOMAD_VARIABLES_COMMAND
        ) as env:
            _, listed, _ = await env.wait_exit()
        names = nomad_variable_names(listed)
        as_the_daemon = {
            m: direct_execution(client, allocations, nomad_variables=names, mode=m) for m in MODES
        }
        through = {m: api_execution(pools[m], "/api/v1", runners[m]) for m in MODES}
        bare_stack = api_execution(floor_pool, "", runners["apart"])
        exec_client = {m: client_execution(client, allocations, m) for m in MODES}
        warm = [direct, *as_the_daemon.values(), *through.values(), bare_stack, *exec_client.values()]
        for work in warm:  # warm every path up
            await timed(work, args.concurrency, args.concurrency)
        n, c = args.executions, args.concurrency
        everyone = {f"daemon {m}": pids[f"daemon {m}"] for m in MODES}
        daemon_pids = {**everyone, "simulator": pids["simulator"], **client_pid}
        results["direct"] = await phase("direct", direct, n, c, daemon_pids)
        for mode in MODES:
            results[f"api {mode}"] = await phase(f"api {mode}", through[mode], n, c, daemon_pids)
        floor_pids = {"http server + starlette": pids["floor"], **client_pid}
        results["floor"] = await phase("floor", bare_stack, n, c, floor_pids)
        for mode in MODES:
            results[f"client {mode}"] = await phase(f"client {mode}", exec_client[mode], n, c, daemon_pids)
        # One at a time: the latency the daemon adds when nothing waits for a CPU.
        unloaded = max(50, args.executions // 5)
        results["direct 1"] = await timed(direct, unloaded, 1)
        for mode in MODES:
            results[f"command line {mode} 1"] = await timed(as_the_daemon[mode], unloaded, 1)
            results[f"api {mode} 1"] = await timed(through[mode], unloaded, 1)
            results[f"client {mode} 1"] = await timed(exec_client[mode], unloaded, 1)
        results["floor 1"] = await timed(bare_stack, unloaded, 1)
        # The fallback path: every agent firewalled off, exec through the servers.
        state = (await http.get(f"{nomad}/sim/v1/state")).json()
        for node in state["nodes"]:
            await http.post(f"{nomad}/sim/v1/nodes/{node['name']}/http", json={"reachable": False})
        await timed(through["apart"], args.concurrency, args.concurrency)  # each agent is tried once
        results["fallback"] = await phase("fallback", through["apart"], n, c, daemon_pids)
        results["fallback 1"] = await timed(through["apart"], unloaded, 1)
    for pool in [*pools.values(), floor_pool]:
        await pool.aclose()
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
        apis: dict[str, str] = {}
        pids: dict[str, int] = {"simulator": simulate.pid}
        for mode, (namespace, variables) in MODES.items():
            daemon, apis[mode] = start(
                [sys.executable, "-m", "supervisor", "run", "--listen", "127.0.0.1:0"],
                {**env, **variables, "NOMAD_ADDR": exports, "NOMAD_NAMESPACE": namespace},
                "serving the API on ",
                logs / f"daemon-{mode.replace(' ', '-')}.log",
            )
            processes.append(daemon)
            pids[f"daemon {mode}"] = daemon.pid
        floor_server, floor = start(
            [sys.executable, __file__, "--serve-floor", "127.0.0.1:0"], env, FLOOR_MARKER, logs / "floor.log"
        )
        processes.append(floor_server)
        print(f"logs in {logs}")
        pids["floor"] = floor_server.pid
        results = trio.run(measure, apis, exports.split(",")[0], floor, args, pids)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    return report(results, args)


_MODE_LABELS: Final = {
    "apart": "terminal, stderr apart",
    "merged": "terminal, stderr merged",
    "no tty": "no terminal",
}


_PATH_LABELS: Final = (("api", "API"), ("client", "exec client alone"), ("command line", "daemon's argv"))


def _label(name: str) -> str:
    """A row's label: its path, and the daemon's mode."""
    fixed = {
        "direct": "simulator exec directly (baseline)",
        "floor": "http server + starlette, no Nomad",
        "direct 1": "one at a time: directly",
        "floor 1": "one at a time: bare stack",
        "fallback": "API, agents firewalled",
        "fallback 1": "one at a time: agents firewalled",
    }
    if name in fixed:
        return fixed[name]
    alone = name.endswith(" 1")
    base = name.removesuffix(" 1")
    for mode, label in _MODE_LABELS.items():
        for path, what in (
            ("api", "API"),
            ("client", "exec client alone"),
            ("command line", "daemon's argv"),
        ):
            if base == f"{path} {mode}":
                return f"{'one at a time: ' if alone else ''}{what}, {label}"
    return name


def report(results: dict[str, tuple[float, list[float]]], args: argparse.Namespace) -> int:
    rows: dict[str, dict[str, float]] = {}
    for name, (elapsed, latencies) in results.items():
        rows[name] = {
            "throughput": len(latencies) / elapsed,
            "p50": percentile(latencies, 0.5) * 1000,
            "p99": percentile(latencies, 0.99) * 1000,
        }
    shape = f"{args.concurrency} at a time, on {args.runners} runners"
    print(f"{args.executions} executions of {COMMAND!r}, {shape}")
    print(f"{'path':<52}{'executions/s':>14}{'p50':>10}{'p99':>10}")
    for name, row in rows.items():
        print(f"{_label(name):<52}{row['throughput']:>14.1f}{row['p50']:>8.1f}ms{row['p99']:>8.1f}ms")
    print("CPU per execution:")
    paths = ["direct", *(f"api {m}" for m in MODES), "fallback", "floor", *(f"client {m}" for m in MODES)]
    for path in paths:
        own = path.removeprefix("api ") if path.startswith("api ") else "apart" if path == "fallback" else ""
        spent = ", ".join(
            f"{who} {CPU[(p, who)] * 1000:.2f} ms"
            for p, who in CPU
            if p == path and (not who.startswith("daemon") or who == f"daemon {own}")
        )
        print(f"  {_label(path)}: {spent}")

    api, api1 = rows["api apart"], rows["api apart 1"]
    added_p50 = api["p50"] - rows["direct"]["p50"]
    added_p99 = api["p99"] - rows["direct"]["p99"]
    ratio = api["throughput"] / rows["direct"]["throughput"]
    floor_ratio = rows["floor"]["throughput"] / rows["direct"]["throughput"]
    print(
        f"added latency: p50 {added_p50:+.1f} ms, p99 {added_p99:+.1f} ms; throughput ratio {ratio:.2f} "
        f"(the bare stack, with nothing behind it, reaches {floor_ratio:.2f})"
    )
    unloaded_p50 = api1["p50"] - rows["direct 1"]["p50"]
    unloaded_p99 = api1["p99"] - rows["direct 1"]["p99"]
    print(
        f"added latency one at a time: p50 {unloaded_p50:+.1f} ms, p99 {unloaded_p99:+.1f} ms; "
        f"a POST and a WebSocket round through the bare stack take {rows['floor 1']['p50']:.1f} ms at p50"
    )
    print(
        "straight to the agent versus through the servers (agents firewalled): "
        f"p50 {api1['p50']:.1f} ms against {rows['fallback 1']['p50']:.1f} ms one at a time, "
        f"{api['throughput']:.0f} against {rows['fallback']['throughput']:.0f} executions/s under load"
    )

    # What keeping stderr apart costs an execution: a second exec session, a fifo in the runner.
    for other in ("merged", "no tty"):
        daemon = CPU[("api apart", "daemon apart")] - CPU[(f"api {other}", f"daemon {other}")]
        runner = CPU[("api apart", "simulator")] - CPU[(f"api {other}", "simulator")]
        latency = api1["p50"] - rows[f"api {other} 1"]["p50"]
        shells = rows["command line apart 1"]["p50"] - rows[f"command line {other} 1"]["p50"]
        print(
            f"stderr apart against {_MODE_LABELS[other]}: the daemon's CPU {daemon * 1000:+.2f} ms, the "
            f"simulated runner's {runner * 1000:+.2f} ms per execution; p50 one at a time {latency:+.1f} ms "
            f"through the API, {shells:+.1f} ms of the command lines alone; "
            f"{api['throughput']:.0f} against {rows[f'api {other}']['throughput']:.0f} executions/s "
            "under load"
        )

    # All processes share this machine's cores, so throughput follows the CPU an execution costs.
    direct_total = sum(seconds for (path, _), seconds in CPU.items() if path == "direct")
    others = CPU[("api apart", "simulator")] + CPU[("api apart", "this client")]
    budget = direct_total / 0.8 - others
    daemon_cpu, stack_cpu = CPU[("api apart", "daemon apart")], CPU[("floor", "http server + starlette")]
    print(
        f"CPU budget of the daemon for 80% of direct throughput: {budget * 1000:.2f} ms per execution "
        f"(direct path {direct_total * 1000:.2f} ms / 0.8, less {others * 1000:.2f} ms of client and "
        f"simulator); the daemon spent {daemon_cpu * 1000:.2f} ms, of which the bare "
        f"http server + starlette stack costs {stack_cpu * 1000:.2f} ms"
    )
    client_cpu = CPU[("client apart", "this client")]
    parts = stack_cpu + client_cpu
    print(
        f"the daemon's parts by themselves: the bare stack {stack_cpu * 1000:.2f} ms and its exec "
        f"client's two sessions (trio-websocket, run from this process) {client_cpu * 1000:.2f} ms, "
        f"{parts * 1000:.2f} ms together; the daemon {daemon_cpu * 1000:.2f} ms, {daemon_cpu / parts:.2f}x "
        "their sum"
    )
    cpu_ratio = daemon_cpu / parts
    command_extra = rows["command line apart 1"]["p50"] - rows["direct 1"]["p50"]
    floor = rows["floor 1"]["p50"] + max(0.0, command_extra)
    print(
        f"the daemon's command lines (two execs, a terminal, the fifo, bash under setuser) cost the "
        f"runner {command_extra:+.1f} ms over the bare command at p50; the added p50 is "
        f"{unloaded_p50 / rows['floor 1']['p50']:.2f}x the bare stack's round trip alone, "
        f"{unloaded_p50 / floor:.2f}x the round trip plus that"
    )
    added_ratio = unloaded_p50 / floor
    tail_ratio = api1["p99"] / api1["p50"]
    met = [
        target(
            "daemon CPU per execution",
            cpu_ratio <= CPU_TARGET,
            f"{cpu_ratio:.2f}x the bare stack plus the bare exec client's two sessions",
            f"<= {CPU_TARGET:g}x",
        ),
        target(
            "added p50 one at a time",
            added_ratio <= LATENCY_TARGET,
            f"{added_ratio:.2f}x the bare stack's round trip plus the command lines' extra",
            f"<= {LATENCY_TARGET:g}x",
        ),
        target("p99 one at a time", tail_ratio <= 3, f"{tail_ratio:.2f}x its own p50", "<= 3x"),
    ]
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
