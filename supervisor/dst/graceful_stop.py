"""A graceful stop of the active daemon, as SIGTERM starts it (``Daemon.stop``), while executions run
in it and the nodes they run on start exec'd commands late, and its promise.

10. A graceful stop ends within its budget (``server.graceful_timeout``): the daemon's run has
    returned by then (``STOP_SLACK`` later at most), whatever was still under way: executions, the
    stops of their commands, connections.

About half of the seeds draw one, from a stream of their own (so that every seed keeps the faults it
drew before). The stop's own client first starts 1 to 3 long executions (``sleep 60``) in runners
it claims; from then until the daemon's run has returned, the nodes they run on start every exec'd
command 4 to 7 s late (a loaded container runtime), so that stopping those commands outlasts the
budget. The client walks away from its runners once its executions have ended; the daemon is started
again 1 to 10 s after its stop.
"""

from __future__ import annotations

import json
import random
from typing import Final
from urllib.parse import urlsplit

import httpx
import trio
import trio_websocket
from attrs import frozen

from ..nomad.transport import network_transport
from .checks import Checks
from .faults import Fault
from .world import DaemonSlot, World

__all__ = ["STOP", "STOP_SLACK", "GracefulStopFault", "plan_graceful_stops", "run_graceful_stops"]

STOP: Final = "daemon_stop"
# How long past its budget a stop may take to return (its last steps take no virtual time).
STOP_SLACK: Final = 0.5
_SHARE: Final = 0.5
_PROMISE: Final = "10 a graceful stop ends within its budget"
_COMMAND: Final = "echo {token}; sleep 60"
_TIME_LIMIT: Final = 120
_TIMEOUT: Final = 20
# A stop that has not returned this long after its budget is not waiting for anything that ends.
_GIVE_UP: Final = 60.0
_PATIENCE: Final = 30.0


@frozen
class GracefulStopFault(Fault):
    """A stop: ``duration`` is how long the daemon stays stopped; its executions and their delay."""

    executions: int = 1
    exec_delay: float = 5.0

    def describe(self) -> str:
        """One line for the trace and the report."""
        return (
            f"{self.kind} downtime={self.duration:.1f} executions={self.executions} "
            f"exec_delay={self.exec_delay:.1f}"
        )


def plan_graceful_stops(seed: int, *, start: float, end: float) -> list[Fault]:
    """None or one graceful stop in [start, end), the daemon back by ``end``."""
    rng = random.Random(f"graceful stops {seed}")
    if rng.random() >= _SHARE:
        return []
    at = round(rng.uniform(start, end - 40.0), 3)
    downtime = round(rng.uniform(1.0, 10.0), 3)
    executions, delay = rng.randrange(1, 4), round(rng.uniform(4.0, 7.0), 3)
    return [GracefulStopFault(at, STOP, 0, downtime, executions=executions, exec_delay=delay)]


async def run_graceful_stops(
    world: World, faults: list[Fault], checks: Checks, environments: list[int]
) -> None:
    """Do each graceful stop of ``faults`` at its time (``run_faults`` traces it and does the rest)."""
    async with trio.open_nursery() as nursery:
        for fault in faults:
            if isinstance(fault, GracefulStopFault):
                await trio.sleep_until(fault.at)
                await _stop_gracefully(world, fault, checks, environments, nursery)


async def _stop_gracefully(
    world: World, fault: GracefulStopFault, checks: Checks, environments: list[int], nursery: trio.Nursery
) -> None:
    slot = world.active_slot()
    daemon = slot.daemon if slot is not None else None
    if slot is None or daemon is None:
        return
    async with httpx.AsyncClient(transport=network_transport(world.network), timeout=_PATIENCE) as http:
        nodes = set()
        for i in range(fault.executions):
            node = await _long_execution(
                world, checks, http, slot, environments[i % len(environments)], nursery
            )
            if node:
                nodes.add(node)
    delays = world.cluster.execs.start_delays
    for node in sorted(nodes):
        delays[node] = fault.exec_delay
    budget = slot.settings.server.graceful_timeout
    stopped_at = trio.current_time()
    # What a stopping daemon's clients meet (connections refused, executions ended) is what a killed
    # one's meet: the log explains it alike.
    checks.faults.add("daemon_kill", stopped_at, stopped_at + budget + fault.duration + STOP_SLACK)
    checks.trace.record("daemon.stop", f"{slot.name} budget {budget}")
    daemon.stop()
    with trio.move_on_after(budget + _GIVE_UP):
        await daemon.ended.wait()
    took = trio.current_time() - stopped_at
    for node in nodes:
        delays.pop(node, None)
    checks.trace.record("daemon.stopped", f"{slot.name} in {took:.3f} s")
    if took > budget + STOP_SLACK:
        checks.violate(_PROMISE, f"{slot.name} stopped in {took:.3f} s; its budget is {budget:g} s")
    if slot.daemon is daemon:
        world.kill(slot)  # a stop that never returns: as systemd's SIGKILL after TimeoutStopSec
    await trio.sleep(fault.duration)
    if slot.daemon is None:
        await world.start(slot)


async def _long_execution(
    world: World,
    checks: Checks,
    http: httpx.AsyncClient,
    slot: DaemonSlot,
    environment: int,
    nursery: trio.Nursery,
) -> str:
    """Claim a runner and start a long execution in it, held in ``nursery`` until it ends; the ID of
    the node it runs on, once it has started ("" if none did)."""
    asked = {"executionEnvironmentId": environment, "inactivityTimeout": _TIMEOUT}
    claim = await http.post(f"{slot.url}/runners", json=asked)
    if claim.status_code != 200:
        checks.refused("graceful stop", "claim", claim.status_code, claim.text)
        return ""
    runner = claim.json()["runnerId"]
    checks.claimed(runner, environment)
    body = {"command": _COMMAND.format(token=f"stop{checks.claims}"), "timeLimit": _TIME_LIMIT}
    prepared = await http.post(f"{slot.url}/runners/{runner}/execute", json=body)
    if prepared.status_code != 200:
        checks.answered(runner, "execute", prepared.status_code, prepared.text)
        return ""
    started = trio.Event()
    nursery.start_soon(_hold, world, checks, prepared.json()["websocketUrl"], runner, started)
    with trio.move_on_after(_PATIENCE):
        await started.wait()
    node = world.cluster.state.node_by_name(world.truth.node_of(runner))
    return node.id if started.is_set() and node is not None else ""


async def _hold(world: World, checks: Checks, url: str, runner: str, started: trio.Event) -> None:
    """Read the execution until it ends (the stop ends it), then walk away from its runner."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    try:
        stream = await world.network.connect(parts.hostname, parts.port)
    except OSError:
        return
    try:
        async with trio.open_nursery() as nursery:
            ws = await trio_websocket.wrap_client_stream(
                nursery,
                stream,  # type: ignore[arg-type]  # any trio stream
                parts.hostname,
                f"{parts.path}?{parts.query}",
            )
            while True:
                kind = json.loads(await ws.get_message()).get("type")
                if kind == "start":
                    started.set()
                elif kind in ("exit", "timeout", "error"):
                    break
            await ws.aclose()
    except* (
        trio_websocket.HandshakeError,
        trio_websocket.ConnectionClosed,
        trio.BrokenResourceError,
        OSError,
    ):
        pass  # the stop ends it so, or a fault before
    finally:
        await trio.aclose_forcefully(stream)
    if started.is_set() and checks.overdue is not None:
        checks.overdue.execution_ended(url, runner, trio.current_time())
    checks.abandoned(runner, _TIMEOUT)
