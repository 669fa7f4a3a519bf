"""The chaos soak: CodeOcean-like load while a random fault hits the cluster every few seconds.

    python scripts/soak.py [--minutes 10] [--rate 20] [--fault-every 5] [--seed 1]
                           [--faults KIND,...] [--report FILE.json] [--plot FILE.png]

A simulated cluster (3 servers, 5 nodes) in this process; the daemon, ``supervisor run`` at its
defaults (or with ``--setting`` changes, for comparison), in a process of its own; three
environments of 30 runners. The load, ``--rate`` executions a second from at most 100 clients at
once, does what CodeOcean does: claim (with an inactivity timeout of 60 s); list the workspace (it
must be empty); PATCH ``delete: ["./*"]`` and a copy of a file with a fresh token; run ``cat`` of
it and a sleep of 0.1 to 3 s; check the output; release. On 410 it claims again and retries, on
500 it waits a little and retries. Every ``--fault-every`` seconds one fault of the simulator's
kinds: a server or the leader restarts, an agent restarts, all agents restart losing jobs, a node
drains (and is made eligible again later), the streams are cut, an allocation fails, a node goes
down past its heartbeat grace.

Invariants, checked from outside: every execution ends with exactly one terminal message; one that
ends in error, or with a non-zero exit code (its command killed under it, as the task of a
replaced allocation is), overlapped a fault that can cut it; no output is lost (a killed command's
output is what it printed before: a prefix of the whole); no runner ID is handed out
twice, and every claimed workspace is empty; no runner job leaks at the end; every pool is back to
strength (its idle runners) within 10 s of each fault, each pool judged on its own (the time each
took is reported, with the median, 90th percentile and slowest over the run); the daemon's
trio tasks, open descriptors and RSS drift less than 10% between minute 2 and the end of the load.
The same seed gives the same kinds of fault in the same order; ``--faults`` plays the kinds it
lists instead, in its order (``none``: a turn without a fault), and none after them, to replay one
window of a run (the same kinds; their targets are drawn anew, and in a run of a few minutes the
drift checks have too few samples to mean anything).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
from pathlib import Path
from typing import Final

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
from harness import start_daemon
from soak_faults import FAULTS, NODE_DOWNTIME, fault_kinds, inject
from soak_load import one_execution
from soak_record import ENVIRONMENTS, POOL, Soak
from soak_report import leaks, report
from soak_watch import watching

from supervisor.simulator import SimConfig, SimulatedCluster

# After the load: the last fault's reach and 10 s to refill, so that it is judged like the others.
SETTLE: Final = NODE_DOWNTIME + 10 + 5


async def main(args: argparse.Namespace) -> bool:
    # The kinds of fault draw from a generator of their own: the same seed gives the same kinds in
    # the same order, whatever the load's timing and whatever is live when a target is chosen.
    rng, kinds, targets = (random.Random(f"{use} {args.seed}") for use in ("load", "kinds", "targets"))
    soak = Soak()
    config = SimConfig(seed=args.seed, servers=3, nodes=5, alloc_start_delay=0.05)
    logs = Path(tempfile.mkdtemp(prefix="soak-"))
    async with trio.open_nursery() as root:
        cluster = await root.start(SimulatedCluster(config).run)
        settings = dict(item.split("=", 1) for item in args.setting)
        soak.max_starting = int(settings.get("SUPERVISOR_FACTORY_MAX_STARTING", soak.max_starting))
        daemon, api = await start_daemon(cluster, logs / "daemon.log", settings)
        try:
            # As httpx keeps by default: at most 20 idle connections (no bound would leave the API
            # holding every connection a burst opened, for its keep-alive of 75 s).
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=20)
            async with (
                httpx.AsyncClient(base_url=api, timeout=60, limits=limits) as http,
                httpx.AsyncClient(base_url=cluster.addresses[0], timeout=30) as control,
            ):
                for environment in ENVIRONMENTS:
                    body = {
                        "image": "python:3.12-slim",
                        "prewarmingPoolSize": POOL,
                        "cpuLimit": 100,
                        "memoryLimit": 256,
                        "networkAccess": False,
                        "exposedPorts": [],
                    }
                    (await http.put(f"/execution-environments/{environment}", json=body)).raise_for_status()
                await trio.sleep(3)
                deadline = trio.current_time() + args.minutes * 60
                async with trio.open_nursery() as nursery, watching(soak, api, daemon.pid):

                    async def faults() -> None:
                        listed = iter(args.faults or ())
                        while trio.current_time() + args.fault_every < deadline:
                            await trio.sleep(args.fault_every)
                            kind = next(listed, "none") if args.faults else kinds.choice(FAULTS)
                            if kind != "none":
                                soak.faults.append(
                                    await inject(cluster, control, kind, targets, nursery, at=soak.now())
                                )

                    nursery.start_soon(faults)
                    limiter = trio.CapacityLimiter(100)

                    async def limited(client: object) -> None:
                        try:
                            await one_execution(http, cluster, soak, rng)
                        except httpx.TransportError:
                            soak.client_errors += 1  # a kept-alive connection the daemon closed
                        finally:
                            limiter.release_on_behalf_of(client)

                    async with trio.open_nursery() as load:
                        while trio.current_time() < deadline:
                            try:  # at most 100 clients at once: past that, the load is shed, not queued
                                client = object()
                                limiter.acquire_on_behalf_of_nowait(client)
                                load.start_soon(limited, client)
                            except trio.WouldBlock:
                                soak.shed += 1
                            await trio.sleep(1 / args.rate)
                    soak.load_ended = soak.now()
                    await trio.sleep(SETTLE)  # the last faults' effects settle, the pools refill
                    nursery.cancel_scope.cancel("soak over")
                leaked, leak = await leaks(cluster, http)
        finally:  # whatever happened, the daemon goes too
            daemon.terminate()
            with trio.CancelScope(shield=True):
                await daemon.wait()
        root.cancel_scope.cancel("soak over")
    return report(soak, leaked, leak, args, logs)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="executions started a second")
    parser.add_argument("--fault-every", type=float, default=5.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="SUPERVISOR_SECTION_KEY=VALUE",
        help="run the daemon with this setting changed (to compare with its defaults)",
    )
    parser.add_argument(
        "--faults",
        type=fault_kinds,
        metavar="KIND,...",
        help=f"these kinds of fault in this order, then none ({', '.join(FAULTS)}, or none)",
    )
    parser.add_argument("--report", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    turns = math.ceil(args.minutes * 60 / args.fault_every) - 1
    if args.faults and len(args.faults) > turns:
        parser.error(f"--faults: {len(args.faults)} kinds, but {args.minutes:g} minutes hold {turns} turns")
    return args


if __name__ == "__main__":
    sys.exit(0 if trio.run(main, parse()) else 1)
