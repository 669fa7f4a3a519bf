"""Where the time of one execution at a time goes: the daemon's execution path, hop by hop.

    python scripts/exec_hops.py [--executions 300] [--runners 5] [--pause 0]

Starts ``supervisor simulate`` as a process of its own and ``supervisor run`` pointed at it (as
``bench_exec.py`` does), the daemon in a child of this script that wraps, from the outside, the
functions ``HOPS`` names before the daemon starts: each call's start and end go into a list that
the child writes out when the daemon stops. Nothing in the package is changed. Then it runs
``--executions`` executions of ``true``, one at a time, through the API with a lean client that
notes when each reply and message arrives (``CLIENT_HOPS``), and, for comparison, as many one at a
time around the daemon: straight through the simulated cluster's exec with ``sh -c true`` (as
``bench_exec.py``'s direct path) and with the argv the daemon gives Nomad (``DAEMON_ARGV``), through
the daemon's exec client from this process with each, and through ``bench_exec.py``'s bare stack.

Both processes stamp with ``time.perf_counter`` (on Linux the system-wide monotonic clock), so the
daemon's calls are placed inside the client's hops of the same execution. Each hop's time is its
own: a call's duration less the hops inside it; so the hops add up to the whole, and what the
client's hops keep for themselves is what no wrapped function explains (HTTP parsing and writing,
the loopback, the scheduler's turns). Prints each hop's median and 90th percentile per execution,
the sum of the daemon's wrapped hops, and the whole.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import bench_exec
import orjson
import trio
from bench_exec import FLOOR_MARKER, api_execution, claim_runners, direct_execution, http_client, start
from load_client import HttpPool, websocket_messages
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, RejectConnection, Request, TextMessage

from supervisor.core.config import ExecutionSettings
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.nomad.exec import exec_url

# Where the daemon's time goes: dotted name -> hop. The only place that names the daemon's code,
# so that a renamed module changes one line here. A function imported by name into another
# module is wrapped where it is looked up at call time (``supervisor.nomad.client.open_exec``, not
# the module that defines it). An async context manager names two hops: its entry and its exit.
HOPS: Final[dict[str, str | tuple[str, str]]] = {
    "supervisor.api.http_connection.Connection._wait_for_request": "HTTP: a request's head read",
    "supervisor.api.app._Routes.execute": "API request: the POST's handler",
    "supervisor.api.app._Routes.websocket": "WebSocket: the handler's own part",
    "supervisor.api.websocket_session.WebSocketSession._accept": "WebSocket open: the 101 written",
    "supervisor.desk.desk.RunnerDesk.runner_for_work": "lease/runner lookup",
    "supervisor.desk.desk.RunnerDesk.prepare_execution": "desk: prepare the execution",
    "supervisor.desk.desk.RunnerDesk.take_execution": "desk: take the execution",
    "supervisor.desk.executions.ExecutionService._nomad_variables": "desk: NOMAD_* variables",
    "supervisor.nomad.client.NomadClient._agent_route": "exec connect: the agent's route",
    "supervisor.nomad.client.open_exec": ("exec connect: TCP and upgrade", "close: exec teardown"),
    "supervisor.nomad.exec.ExecSession.receive": "agent: Nomad's frames",
    "supervisor.desk.executions.ExecutionService._killed_with_allocation": "exit: its confirmation",
    "supervisor.api.app._ClientSocket.send_json": "first frame and exit: sent to the client",
}
# The argv the daemon gives Nomad for a command, to run it straight through the simulator too.
DAEMON_ARGV: Final = "supervisor.core.commands.execution_command"
# The client's hops, one after another from the POST to the exit message: they cover the whole.
CLIENT_HOPS: Final = (
    "API request: the POST's round trip",
    "WebSocket open: the handshake",
    "first frame: 'start' arrives",
    "exit: from 'start' to 'exit'",
)
COMMAND: Final = "true"
ANSWER_MARKER: Final = "serving the API on "
# Stamps of the daemon's calls: (hop, start, end).
RECORDS: list[tuple[str, float, float]] = []


def resolve(dotted: str) -> tuple[object, str]:
    """The object that holds the last name of ``dotted`` (a module or a class), and that name."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name, None)
        if owner is None or not hasattr(owner, parts[-1]):
            raise SystemExit(f"HOPS names {dotted}, which does not exist: update the table")
        return owner, parts[-1]
    raise SystemExit(f"HOPS names {dotted}, whose module does not exist: update the table")


class _TimedContext:
    """An async context manager whose entry and exit are each a hop."""

    def __init__(self, inner: Any, hops: tuple[str, str]) -> None:
        self._inner, self._hops = inner, hops

    async def __aenter__(self) -> Any:
        began = time.perf_counter()
        try:
            return await self._inner.__aenter__()
        finally:
            RECORDS.append((self._hops[0], began, time.perf_counter()))

    async def __aexit__(self, *exc_info: Any) -> Any:
        began = time.perf_counter()
        try:
            return await self._inner.__aexit__(*exc_info)
        finally:
            RECORDS.append((self._hops[1], began, time.perf_counter()))


def timed(function: Callable[..., Any], hop: str | tuple[str, str]) -> Callable[..., Any]:
    """``function`` with each call's start and end noted under ``hop``."""
    if isinstance(hop, tuple):

        def context(*args: Any, **kwargs: Any) -> _TimedContext:
            return _TimedContext(function(*args, **kwargs), hop)

        return context
    if not inspect.iscoroutinefunction(function):
        raise SystemExit(f"{function.__qualname__}: a hop is an async function or an async context manager")

    async def call(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await function(*args, **kwargs)
        finally:
            RECORDS.append((hop, began, time.perf_counter()))

    return call


def serve_daemon(records: Path) -> int:
    """The daemon, in this process, with every function of ``HOPS`` wrapped; its calls' stamps
    written to ``records`` once it stops."""
    for dotted, hop in HOPS.items():
        owner, name = resolve(dotted)
        setattr(owner, name, timed(getattr(owner, name), hop))
    from supervisor.cli import main as supervisor_main

    try:
        return supervisor_main(["run", "--listen", "127.0.0.1:0"])
    finally:
        records.write_bytes(orjson.dumps(RECORDS))


async def stamped_execution(pool: HttpPool, runner: str) -> list[float]:
    """One execution through the API, with the lean client's stamps: the POST sent, its answer,
    the WebSocket open, the 'start' message, the 'exit' message."""
    stamps = [time.perf_counter()]
    status, body = await pool.post_json(f"/api/v1/runners/{runner}/execute", {"command": COMMAND})
    assert status == 200, (status, body)
    stamps.append(time.perf_counter())
    parts = urlsplit(body["websocketUrl"])
    websocket = WSConnection(ConnectionType.CLIENT)
    stream = await trio.open_tcp_stream(parts.hostname or "", parts.port or 80)
    try:
        await stream.send_all(
            websocket.send(Request(host=parts.netloc, target=f"{parts.path}?{parts.query}"))
        )
        while data := await stream.receive_some(65536):
            websocket.receive_data(data)
            for event in websocket.events():
                if isinstance(event, AcceptConnection):
                    stamps.append(time.perf_counter())
                elif isinstance(event, RejectConnection | CloseConnection):
                    raise RuntimeError(f"the execution ended without its exit: {event}")
                elif isinstance(event, TextMessage):
                    message = orjson.loads(event.data)
                    if message["type"] in ("start", "exit"):
                        stamps.append(time.perf_counter())
                    if message["type"] == "exit":
                        assert message["data"] == 0, message
                        with contextlib.suppress(trio.BrokenResourceError):
                            await stream.send_all(websocket.send(CloseConnection(code=1000)))
                        return stamps
        raise RuntimeError("the connection closed before the exit")
    finally:
        await stream.aclose()


def daemon_argv() -> list[str]:
    """The argv the daemon gives Nomad for ``COMMAND``: with its PID note and the note's removal, in
    its shell under its wrapper (its stderr on the exec's own stream: the second exec that reads it
    apart from a terminal, and what that costs, ``bench_exec.py`` measures)."""
    owner, name = resolve(DAEMON_ARGV)
    settings = ExecutionSettings()
    argv: list[str] = getattr(owner, name)(
        COMMAND,
        {},
        execution_id="exec-hops",
        privileged=False,
        nomad_variables=(),
        unprivileged_wrapper=settings.unprivileged_wrapper,
        shell=settings.shell,
    )
    return argv


def daemon_command_execution(client: NomadClient, allocations: list[str]) -> Callable[[], Awaitable[None]]:
    """One execution of the daemon's argv straight through the simulated cluster's exec (a server)."""
    argv, turn = daemon_argv(), itertools.cycle(allocations)

    async def execute() -> None:
        url = exec_url(client, next(turn), task="default-task", command=argv, tty=False)
        messages = await websocket_messages(url, lambda message: "exited" in orjson.loads(message))
        assert orjson.loads(messages[-1]) == {"exited": True, "result": {}}, messages

    return execute


def exec_client_execution(
    client: NomadClient, allocations: list[str], argv: list[str]
) -> Callable[[], Awaitable[None]]:
    """One execution of ``argv`` through the daemon's own exec client, from this process: to the
    allocation's agent, as the daemon goes."""
    turn = itertools.cycle(allocations)

    async def execute() -> None:
        async with client.open_exec(next(turn), task="default-task", command=argv) as session:
            exited, _, _ = await session.wait_exit()
        assert exited.exit_code == 0, exited

    return execute


async def one_at_a_time(work: Callable[[], Awaitable[None]], count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        began = time.perf_counter()
        await work()
        latencies.append(time.perf_counter() - began)
    return latencies


async def measure(
    api: str, nomad: str, floor: str, args: argparse.Namespace
) -> tuple[list[list[float]], dict[str, list[float]]]:
    """Each execution's client stamps, and the latencies of the ways around the daemon."""
    pool, floor_pool = HttpPool(api), HttpPool(floor)
    async with (
        http_client(api + "/api/v1", 2) as http,
        NomadClient(NomadSettings(addresses=(nomad,))) as client,
    ):
        runners = await claim_runners(http, args.runners)
        allocations = [(await client.job_allocations(r)).value[0].id for r in runners]
        around = {
            "direct": direct_execution(client, allocations),
            "direct, the daemon's argv": daemon_command_execution(client, allocations),
            "exec client": exec_client_execution(client, allocations, ["/bin/sh", "-c", COMMAND]),
            "exec client, the daemon's argv": exec_client_execution(client, allocations, daemon_argv()),
            "bare stack": api_execution(floor_pool, "", runners),
        }
        for index in range(2 * args.runners):  # each runner's NOMAD_* variables read, the paths warm
            await stamped_execution(pool, runners[index % len(runners)])
            for work in around.values():
                await work()
        await trio.sleep(0.5)  # the warm-up's teardowns end before the stamps count
        executions = []
        for index in range(args.executions):
            await trio.sleep(args.pause)
            executions.append(await stamped_execution(pool, runners[index % len(runners)]))
        latencies = {name: await one_at_a_time(work, args.executions) for name, work in around.items()}
        await trio.sleep(0.5)  # the last teardown ends
    await pool.aclose()
    await floor_pool.aclose()
    return executions, latencies


def own_times(intervals: list[tuple[str, float, float]]) -> dict[str, float]:
    """Each hop's own time: its intervals' durations less those of the intervals directly inside
    them (an interval that runs past its parent counts only inside it)."""
    ordered = sorted(intervals, key=lambda item: (item[1], -item[2]))
    own: dict[str, float] = {}
    stack: list[tuple[str, float, float]] = []
    for hop, began, ended in ordered:
        while stack and began >= stack[-1][2]:
            stack.pop()
        if stack:
            parent_hop, _, parent_end = stack[-1]
            ended = min(ended, parent_end)
            own[parent_hop] = own.get(parent_hop, 0.0) - (ended - began)
        own[hop] = own.get(hop, 0.0) + (ended - began)
        stack.append((hop, began, ended))
    return own


def per_execution(
    executions: list[list[float]], records: list[tuple[str, float, float]]
) -> tuple[list[dict[str, float]], list[float]]:
    """Each execution's own time per hop (the daemon's calls inside its stamps, and the client's
    hops) and the daemon's calls after its exit (the teardown), keyed by hop."""
    records = sorted(records, key=lambda record: record[1])
    rows, after = [], []
    for index, stamps in enumerate(executions):
        began, ended = stamps[0], stamps[-1]
        following = executions[index + 1][0] if index + 1 < len(executions) else float("inf")
        client = [(hop, a, b) for hop, a, b in zip(CLIENT_HOPS, stamps[:-1], stamps[1:], strict=True)]
        inside = [(hop, a, b) for hop, a, b in records if began <= a < ended]
        rows.append(own_times(client + inside))
        after.append(sum(b - a for hop, a, b in records if ended <= a < following))
    return rows, after


def report(
    executions: list[list[float]], records: list[tuple[str, float, float]], around: dict[str, list[float]]
) -> None:
    rows, after = per_execution(executions, records)
    daemon_hops = [
        hop for value in HOPS.values() for hop in (value if isinstance(value, tuple) else (value,))
    ]
    wholes = [stamps[-1] - stamps[0] for stamps in executions]

    def line(name: str, values: list[float]) -> None:
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
        print(f"  {name:<46}{statistics.median(values) * 1000:>9.3f}{p90 * 1000:>9.3f}")

    print(f"{len(executions)} executions of {COMMAND!r}, one at a time; ms per execution")
    print(f"  {'hop (its own time, less the hops inside it)':<46}{'median':>9}{'p90':>9}")
    print(" the daemon's wrapped functions:")
    for hop in daemon_hops:
        if any(hop in row for row in rows):
            line(hop, [row.get(hop, 0.0) for row in rows])
    daemon_sums = [sum(row.get(hop, 0.0) for hop in daemon_hops) for row in rows]
    line("sum of the daemon's hops", daemon_sums)
    print(" the client's hops, less the daemon's inside them (what no wrapped function explains):")
    for hop in CLIENT_HOPS:
        line(hop, [row.get(hop, 0.0) for row in rows])
    line("sum of the client's own parts", [sum(row.get(hop, 0.0) for hop in CLIENT_HOPS) for row in rows])
    line("sum of every hop", [sum(row.values()) for row in rows])
    line("the whole, POST to 'exit' at the client", wholes)
    line("after the exit (teardown, off the client's path)", after)
    print(" around the daemon, as many one at a time:")
    line("straight through the simulator's exec", around["direct"])
    line("the same with the daemon's argv", around["direct, the daemon's argv"])
    line("the daemon's exec client (to the agent)", around["exec client"])
    line("the same with the daemon's argv", around["exec client, the daemon's argv"])
    line("the bare stack's round trip (bench_exec's)", around["bare stack"])
    direct, argv, _, _, floor = (statistics.median(values) for values in around.values())
    added = statistics.median(wholes) - direct
    print(
        f"  added by the daemon at p50 (the whole less the direct exec): {added * 1000:.3f} ms, "
        f"{added / floor:.2f}x the bare stack's round trip; of it, the daemon's argv over the bare "
        f"command on Nomad's side {(argv - direct) * 1000:.3f} ms; without that, "
        f"{(added - argv + direct) / floor:.2f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=300)
    parser.add_argument("--runners", type=int, default=5)
    parser.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds between executions through the API, so that the daemon's work after one "
        "(its teardown, its log line) ends before the next begins [0, as bench_exec.py]",
    )
    parser.add_argument("--serve-daemon", metavar="RECORDS", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_daemon:
        return serve_daemon(args.serve_daemon)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    logs = Path(tempfile.mkdtemp(prefix="exec-hops-"))
    records_file = logs / "records.json"
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
            [sys.executable, __file__, "--serve-daemon", str(records_file)],
            {**env, "NOMAD_ADDR": exports},
            ANSWER_MARKER,
            logs / "daemon.log",
        )
        processes.append(daemon)
        floor_server, floor = start(
            [sys.executable, bench_exec.__file__, "--serve-floor", "127.0.0.1:0"],
            env,
            FLOOR_MARKER,
            logs / "floor.log",
        )
        processes.append(floor_server)
        print(f"logs in {logs}")
        address = api.split(",")[0].strip()
        executions, around = trio.run(measure, address, exports.split(",")[0], floor, args)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    records = [(hop, float(a), float(b)) for hop, a, b in json.loads(records_file.read_text())]
    report(executions, records, around)
    return 0


if __name__ == "__main__":
    sys.exit(main())
