"""Event streams that stall (``simulator/stream_stalls.py``), and the promise they test.

A stall: the streams of the server the daemon streams from stay open and deliver nothing, not even
heartbeats, for 60 to 120 s (past the daemon's heartbeat deadline, 45 s at its defaults), then
deliver what they held on the same connections. A daemon that takes the silence for a lost stream
reconnects to the next server, where the stream flows; one that does not waits on the silent one.
Seeds with two servers or more draw one, from a stream of their own (so that every seed keeps the
faults it drew before), where its first minute finds room away from the faults that end runners
(about a quarter of the seeds do): until the daemon gives the silent stream up, their news is held
back, longer than promise 2's bound, which assumes a stream that flows.

6 (silent streams). Health tells the truth: once every open event stream has been silent (no event,
no heartbeat) for the daemon's ``watcher.heartbeat_timeout`` and then ``HEALTH_BOUND`` more, the
active daemon's health never answers 204: a silent stream is taken for lost.
"""

from __future__ import annotations

import random
from typing import Final

import httpx
import trio

from ..nomad.transport import network_transport
from .checks import Checks
from .faults import Fault, FaultLog
from .world import World

__all__ = ["STALL", "plan_stalls", "run_stalls", "watch_silent_streams"]

STALL: Final = "stream_stall"
# The faults whose news a stalled stream would hold back: they end runners.
_ENDS_RUNNERS: Final = (
    "agent_restart",
    "agent_drain_restart",
    "rolling_agents",
    "all_agents",
    "node_down",
    "agent_unreachable",
    "allocation_failure",
    "drain",
)
# How long after such a fault begins its news may still come: its duration, a node's heartbeat
# grace, the restores and reschedules it causes.
_NEWS_AFTER: Final = 40.0
_SHORTEST, _LONGEST = 60.0, 120.0
# How long a stall may keep a daemon's knowledge stale: its heartbeat deadline, a reconnection's
# backoff and relist.
_STALE: Final = 60.0
# Where a stall may go is drawn this many times at most.
_PLACINGS: Final = 60
_EVERY: Final = 1.0


def plan_stalls(seed: int, faults: list[Fault], *, servers: int, start: float, end: float) -> list[Fault]:
    """None or one stall in [start, end), healed by ``end``, its first ``_STALE`` seconds clear of
    every fault that ends runners; none with a single server (no other to reconnect to)."""
    rng = random.Random(f"stalls {seed}")
    duration = round(rng.uniform(_SHORTEST, _LONGEST), 3)
    if servers < 2:
        return []
    busy = [(f.at, f.at + f.duration + _NEWS_AFTER) for f in faults if f.kind in _ENDS_RUNNERS]
    for _ in range(_PLACINGS):
        if end - duration - 5.0 <= start:
            return []
        at = round(rng.uniform(start, end - duration - 5.0), 3)
        if all(heals < at or begins > at + _STALE for begins, heals in busy):
            return [Fault(at, STALL, 0, duration)]
    return []


async def run_stalls(world: World, faults: list[Fault], log: FaultLog) -> None:
    """Do each stall of ``faults`` at its time, on the server the active daemon streams from then
    (none if no daemon is active), and heal it (``run_faults`` traces it and does the rest)."""
    async with trio.open_nursery() as nursery:
        for fault in faults:
            if fault.kind != STALL:
                continue
            await trio.sleep_until(fault.at)
            server = _streamed_from(world)
            if server is None:
                continue
            world.cluster.stream_stalls.stall(server)
            now = trio.current_time()
            log.add(STALL, now, now + fault.duration)
            world.trace.record("stall", server)
            nursery.start_soon(_heal, world, server, fault.duration)


def _streamed_from(world: World) -> str | None:
    """The server the active daemon's informer streams from (its client's current server)."""
    slot = world.active_slot()
    service = slot.daemon.service if slot is not None and slot.daemon is not None else None
    if service is None:
        return None
    address = service.informer.client.address
    return next((s.name for s in world.cluster.servers if s.address == address), None)


async def _heal(world: World, server: str, after: float) -> None:
    await trio.sleep(after)
    world.cluster.stream_stalls.heal(server)


async def watch_silent_streams(world: World, checks: Checks, health_bound: float) -> None:
    """Promise 6 for silent streams, asked every virtual second while they are silent so long."""
    async with httpx.AsyncClient(transport=network_transport(world.network), timeout=30) as http:
        while True:
            await trio.sleep(_EVERY)
            freshest = world.cluster.stream_stalls.freshest_delivery()
            slot = world.active_slot()
            if freshest is None or slot is None:
                continue  # no stream open: promise 6's first clause
            bound = slot.settings.watcher.heartbeat_timeout + health_bound
            if trio.current_time() - freshest < bound:
                continue
            try:
                health = await http.get(f"{slot.url}/health")
            except httpx.TransportError:
                continue  # killed meanwhile: the load's clients see that
            checks.trace.record("health", f"{slot.name} {health.status_code} with every stream silent")
            if health.status_code == 204:
                checks.violate(
                    "6 health tells the truth",
                    f"{slot.name} says OK; no event stream has delivered a byte since {freshest:.3f}",
                )
