"""The event pipeline: how fast the daemon takes Nomad's event stream into its pool, against the bare
parse of the same stream.

    python scripts/bench_events.py [--events 200000] [--runners 2000] [--repeat 3]

A busy cluster's stream, served over a real NDJSON HTTP stream (chunked, on loopback) by a small
trio server in this process: allocations (AllocationUpdated and PlanResult, 80%), Job events (15%)
and Node events (5%), in batches of one to three events, about 2.5 KB per allocation, every one
about a runner the pool knows (``--runners`` in 20 environments on 20 nodes).

(a) The daemon's path: ``NomadClient.open_event_stream`` (read, split, decode into typed models)
    and ``Informer.apply_batch`` into the pool and its node tracker, as the daemon does.
(b) The baseline: the same stream read with httpx, split into lines, each ``orjson.loads``-ed.

Targets: (a) handles at least 35,000 events/s, and takes at most 3x the time of (b). Each figure is
the best of ``--repeat`` runs (this machine's noise only ever makes a run slower).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Final

import httpx
import orjson
import trio
from targets import target

from supervisor.base.errors import EventStreamError
from supervisor.core.config import Settings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.orders import SetEnvironment
from supervisor.desk.service import RunnerService
from supervisor.nomad import NomadClient, NomadSettings

FIXTURES: Final = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
TARGET_RATE: Final = 35_000
TARGET_RATIO: Final = 3.0
ENVIRONMENTS: Final = 20
NODES: Final = 20


def stream_lines(runner_ids: list[str], node_ids: list[str], count: int, seed: int = 1) -> list[bytes]:
    """``count`` events about those runners and nodes, as Nomad's stream writes them."""
    rng = random.Random(seed)
    alloc_template: dict[str, Any] = orjson.loads(
        (FIXTURES / "allocation_running_replacement.json").read_bytes()
    )
    job_template: dict[str, Any] = orjson.loads((FIXTURES / "job_runner.json").read_bytes())
    node_template: dict[str, Any] = orjson.loads((FIXTURES / "node_draining.json").read_bytes())
    # Not draining: a drain would remove every runner of its node, and the allocation events that
    # follow would be about runners the pool no longer has.
    node_template = {
        **node_template,
        "Drain": False,
        "DrainStrategy": None,
        "SchedulingEligibility": "eligible",
    }
    alloc_ids = {runner: str(uuid.UUID(int=rng.getrandbits(128))) for runner in runner_ids}
    lines: list[bytes] = []
    index, made = 1_000, 0
    while made < count:
        events = []
        for _ in range(min(rng.randint(1, 3), count - made)):
            index += 1
            roll = rng.random()
            runner = rng.choice(runner_ids)
            if roll < 0.80:
                alloc = {
                    **alloc_template,
                    "ID": alloc_ids[runner],
                    "JobID": runner,
                    "NodeID": rng.choice(node_ids),
                    "CreateIndex": 500,
                    "ModifyIndex": index,
                    "ClientStatus": "running",
                    "DesiredStatus": "run",
                }
                kind = ("Allocation", "AllocationUpdated" if roll < 0.55 else "PlanResult")
                payload: dict[str, Any] = {"Allocation": alloc}
                key = alloc["ID"]
            elif roll < 0.95:
                job = {**job_template, "ID": runner, "Name": runner, "ModifyIndex": index, "Stop": False}
                kind, payload, key = ("Job", "JobRegistered"), {"Job": job}, runner
            else:
                node_id = rng.choice(node_ids)
                node = {**node_template, "ID": node_id, "ModifyIndex": index, "Status": "ready"}
                kind, payload, key = ("Node", "NodeStreamEvent"), {"Node": node}, node_id
            events.append(
                {
                    "Topic": kind[0],
                    "Type": kind[1],
                    "Key": key,
                    "Namespace": "default",
                    "Index": index,
                    "Payload": payload,
                }
            )
            made += 1
        lines.append(orjson.dumps({"Index": index, "Events": events}))
    return lines


async def serve_stream(
    lines: list[bytes], *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """An HTTP/1.1 server that answers every request with the lines, chunked, then ends the body."""
    body = b"\n".join(lines) + b"\n"
    chunks = [body[i : i + 256 * 1024] for i in range(0, len(body), 256 * 1024)]

    async def handle(stream: trio.SocketStream) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = await stream.receive_some(65536)
            if not data:
                return
            request += data
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        await stream.send_all(head + b"X-Nomad-Index: 1\r\n\r\n")
        for chunk in chunks:
            await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await stream.send_all(b"0\r\n\r\n")
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def baseline(url: str) -> tuple[float, int]:
    """Seconds to read, split and parse every event; how many there were."""
    started, events, rest = time.perf_counter(), 0, b""
    async with (
        httpx.AsyncClient(timeout=None) as http,
        http.stream("GET", url + "/v1/event/stream") as response,
    ):
        async for data in response.aiter_bytes():
            *lines, rest = (rest + data).split(b"\n")
            for line in lines:
                if line:
                    events += len(orjson.loads(line)["Events"])
    return time.perf_counter() - started, events


def loaded_service(nursery: trio.Nursery, client: NomadClient) -> tuple[RunnerService, list[str], list[str]]:
    """A runner service whose pool knows ``ENVIRONMENTS`` environments and their runners."""
    service = RunnerService(client, Settings(), execution_nursery=nursery)
    runner_ids: list[str] = []
    for environment_id in range(1, ENVIRONMENTS + 1):
        environment = ExecutionEnvironment(environment_id, "python:3.12-slim", 100, 100.0, 256, False, ())
        actions = service.effects.tell(SetEnvironment(environment))
        runner_ids += [a.runner_id for a in actions if hasattr(a, "runner_id")]
    node_ids = [str(uuid.UUID(int=i + 1)) for i in range(NODES)]
    return service, runner_ids, node_ids


async def ours(url: str, service: RunnerService) -> tuple[float, int]:
    """Seconds for the daemon's path: read, decode, apply to the pool; how many events."""
    events = 0
    async with NomadClient(NomadSettings(addresses=(url,))) as client:
        started = time.perf_counter()
        try:
            async with client.open_event_stream(
                {"Job": "*", "Allocation": "*", "Node": "*"}, index=1, heartbeat_timeout=60
            ) as stream:
                while True:
                    batch = await stream.receive()
                    service.informer.apply_batch(batch)
                    events += len(batch.events)
        except EventStreamError:
            pass  # the server ended the stream: everything was read
        return time.perf_counter() - started, events


async def main(args: argparse.Namespace) -> int:
    async with trio.open_nursery() as nursery:
        async with NomadClient(NomadSettings(addresses=("http://127.0.0.1:1",))) as idle_client:
            service, runner_ids, node_ids = loaded_service(nursery, idle_client)
            lines = stream_lines(runner_ids[: args.runners], node_ids, args.events)
            port = await nursery.start(serve_stream, lines)
            url = f"http://127.0.0.1:{port}"
            bare = [await baseline(url) for _ in range(args.repeat)]
            mine = []
            for _ in range(args.repeat):
                service.informer.last_index = 0
                mine.append(await ours(url, service))
        nursery.cancel_scope.cancel("done")
    (bare_s, bare_n), (ours_s, ours_n) = min(bare), min(mine)
    size = sum(len(line) for line in lines) / 1e6
    runners = min(args.runners, len(runner_ids))
    print(f"{args.events:,} events in {len(lines):,} lines ({size:.0f} MB), {runners:,} runners")
    print(f"{'consumer':<36}{'seconds':>10}{'events/s':>12}")
    print(f"{'(b) bare: split + orjson.loads':<36}{bare_s:>10.2f}{bare_n / bare_s:>12,.0f}")
    print(f"{'(a) daemon: stream, decode, pool':<36}{ours_s:>10.2f}{ours_n / ours_s:>12,.0f}")
    rate, ratio = ours_n / ours_s, ours_s / bare_s
    ok_rate, ok_ratio = rate >= TARGET_RATE and ours_n == args.events, ratio <= TARGET_RATIO
    target("daemon path", ok_rate, f"{rate:,.0f} events/s", f">= {TARGET_RATE:,}")
    target("daemon path / bare parse", ok_ratio, f"{ratio:.2f}x", f"<= {TARGET_RATIO:g}x")
    return 0 if ok_rate and ok_ratio else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runners", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(trio.run(main, parse()))
