"""One seed's deterministic simulation: a random cluster, daemon and load, a random fault schedule,
the promises checked throughout, and a trace whose hash proves the run replays.

Everything runs in one ``trio.run`` on a MockClock that jumps whenever every task waits, over a
MemoryNetwork, with the cluster's exec answered by the command model: no socket, no thread, no
process, no real sleep. Every random choice comes from the seed, and trio's scheduling order too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Final

import httpx
import trio
import trio.testing
from attrs import define, field
from loguru import logger

from ..core.runners import RunnerState
from ..nomad.transport import network_transport
from ..simulator import SimConfig
from .checks import Checks, Violation
from .clocks import virtual_process_clocks
from .faults import Fault, FaultLog, plan_faults, run_faults
from .graceful_stop import plan_graceful_stops, run_graceful_stops
from .load import run_students
from .overdue import Overdue
from .scheduling import deterministic_scheduling
from .stalls import plan_stalls, run_stalls, watch_silent_streams
from .timeline import Timeline
from .trace import Trace
from .world import World

__all__ = ["HEALTH_BOUND", "Plan", "Result", "plan", "run_seed"]

# The last virtual seconds have no fault: time for everything to heal, and to be checked.
QUIET: Final = 90.0
# Clients stop claiming this long before the end, so that every claim is given back by then.
_LOAD_STOPS: Final = 60.0
_WARM_UP: Final = 15.0
_IMAGE: Final = "python:3.12-slim"
# The cluster's time 0, on the wall clock the run shows its processes and the cluster its objects.
_EPOCH: Final = 1_780_000_000.0
# Health must say the event stream is down once none has been open this long; asked this often.
HEALTH_BOUND: Final = 10.0
_HEALTH_EVERY: Final = 1.0
# The share of seeds that run an HA pair ([ha] enabled, a load balancer before the active one).
_HA_SHARE: Final = 0.25


@define
class Plan:
    """What a seed draws: the cluster, the environments, the load and the faults."""

    seed: int
    minutes: float
    servers: int
    nodes: int
    pools: dict[int, int]
    students: int
    flood_limit: int
    latency: float
    faults: list[Fault]
    ha: bool = False

    def describe(self) -> str:
        """One line: the drawn cluster and load."""
        return (
            f"servers={self.servers} nodes={self.nodes} pools={self.pools} students={self.students} "
            f"flood_limit={self.flood_limit} latency={self.latency}" + (" ha=pair" if self.ha else "")
        )


@define
class Result:
    """One seed's outcome."""

    seed: int
    minutes: float
    claims: int
    executions: int
    faults: int
    violations: list[Violation]
    trace_hash: str
    wall_seconds: float
    plan: Plan
    trace_lines: list[str] = field(factory=list)
    log_lines: list[str] = field(factory=list)
    timeline: Timeline | None = None

    @property
    def passed(self) -> bool:
        """No promise broken."""
        return not self.violations


def plan(seed: int, minutes: float) -> Plan:
    """The seed's draws."""
    rng = random.Random(seed)
    end = minutes * 60.0
    # Drawn apart, so that the seeds drawn before pairs were simulated replay as they did.
    pair = random.Random(f"ha {seed}").random() < _HA_SHARE
    return Plan(
        seed=seed,
        minutes=minutes,
        servers=rng.choice([1, 3, 3, 5]),
        nodes=rng.randrange(2, 6),
        pools={10 + i: rng.randrange(1, 7) for i in range(rng.randrange(1, 4))},
        students=rng.randrange(2, 7),
        flood_limit=rng.choice([0, 0, 0, 20]),  # as the storm scenario: starts beyond max_starting
        latency=rng.choice([0.0, 0.0, 0.002, 0.02]),
        faults=plan_faults(rng, start=_WARM_UP + 10.0, end=end - QUIET, pair=pair),
        ha=pair,
    )


def run_seed(seed: int, *, minutes: float = 5.0, keep_trace: bool = False) -> Result:
    """Run one seed to its end; the result, violations included (never raises on one)."""
    drawn = plan(seed, minutes)
    start, end = _WARM_UP + 10.0, minutes * 60.0 - QUIET
    stalls = plan_stalls(seed, drawn.faults, servers=drawn.servers, start=start, end=end)
    drawn.faults = sorted(
        drawn.faults + stalls + plan_graceful_stops(seed, start=start, end=end), key=lambda f: f.at
    )
    logs: list[str] = []
    started = time.perf_counter()
    clock = trio.testing.MockClock(autojump_threshold=0)
    trace = Trace(clock.current_time, keep=keep_trace)
    sink = logger.add(_memory_sink(logs, clock.current_time), level="DEBUG" if keep_trace else "WARNING")
    try:
        with deterministic_scheduling(seed), virtual_process_clocks(clock.current_time, _EPOCH):
            result = trio.run(_simulate, drawn, trace, clock=clock)
    finally:
        logger.remove(sink)
    result.wall_seconds = time.perf_counter() - started
    result.log_lines = logs[-400:] if not keep_trace else logs
    return result


def _memory_sink(lines: list[str], now: Callable[[], float]) -> Callable[[Any], None]:
    def sink(message: Any) -> None:
        record = message.record
        lines.append(f"{now():.6f} {record['level'].name} {record['name']}: {record['message']}")

    return sink


async def _simulate(drawn: Plan, trace: Trace) -> Result:
    config = SimConfig(
        servers=drawn.servers,
        nodes=drawn.nodes,
        seed=drawn.seed,
        epoch_ns=int(_EPOCH) * 10**9,
        flood_limit=drawn.flood_limit,
        response_latency=drawn.latency,
    )
    world = World(drawn.seed, config, trace, ha=drawn.ha)
    log = FaultLog()
    checks = Checks(world.truth, log, trace)
    timeline = Timeline()
    end = drawn.minutes * 60.0
    world.cluster.state.after_write.append(lambda tx: trace.record("write", _written(tx)))
    world.cluster.state.after_write.append(lambda tx: checks.wrote([s.name for s in world.acting()]))
    trace.record("plan", drawn.describe())
    async with trio.open_nursery() as nursery:
        await nursery.start(world.run)
        await _create_environments(world, checks, drawn.pools)
        nursery.start_soon(timeline.sample, world, checks, log)
        nursery.start_soon(_watch_health, world, checks)
        checks.overdue = Overdue(world.truth, log, checks.violate)
        nursery.start_soon(checks.overdue.watch)
        nursery.start_soon(run_stalls, world, drawn.faults, log)  # run_faults passes them over
        nursery.start_soon(watch_silent_streams, world, checks, HEALTH_BOUND)
        nursery.start_soon(run_graceful_stops, world, drawn.faults, checks, sorted(drawn.pools))
        nursery.start_soon(run_faults, world, drawn.faults, log, trace)
        rng = random.Random(drawn.seed ^ 0x5EED)
        await run_students(world, checks, rng, drawn.students, sorted(drawn.pools), end - _LOAD_STOPS)
        await trio.sleep_until(end)
        await _final_checks(world, checks, drawn.pools)
        nursery.cancel_scope.cancel("the run is over")
    return Result(
        seed=drawn.seed,
        minutes=drawn.minutes,
        claims=checks.claims,
        executions=checks.executions,
        faults=len(drawn.faults),
        violations=checks.violations,
        trace_hash=trace.digest,
        wall_seconds=0.0,
        plan=drawn,
        trace_lines=trace.lines,
        timeline=timeline,
    )


def _written(tx: Any) -> str:
    touched = " ".join(
        f"{topic}:{obj.id[:8]}:{getattr(obj, 'client_status', getattr(obj, 'status', ''))}"
        for topic, obj in tx.touched.values()
    )
    return f"{tx.message_type} {touched}"


async def _create_environments(world: World, checks: Checks, pools: dict[int, int]) -> None:
    body = {"image": _IMAGE, "cpuLimit": 100, "memoryLimit": 256, "networkAccess": False, "exposedPorts": []}
    active = None
    with trio.move_on_after(_WARM_UP) as waited:
        while (active := world.active_slot()) is None:  # noqa: ASYNC110  # which of a pair wins
            await trio.sleep(0.1)
    if waited.cancelled_caught or active is None:
        checks.violate("3 no request ended by the daemon", f"no daemon active within {_WARM_UP} s")
        return
    async with httpx.AsyncClient(transport=network_transport(world.network), timeout=30) as http:
        for environment, size in pools.items():
            answer = await http.put(
                f"{active.url}/execution-environments/{environment}",
                json={**body, "prewarmingPoolSize": size},
            )
            if answer.status_code not in (201, 204):
                refused = f"environment {environment}: {answer.status_code} {answer.text[:200]}"
                checks.violate("3 no request ended by the daemon", refused)
    await trio.sleep(_WARM_UP)


async def _watch_health(world: World, checks: Checks) -> None:
    """Promise 6 as the run goes: the active daemon's health never says OK once no event stream of
    its has been open at any server for HEALTH_BOUND seconds (a stream cut is seen at once: its
    connection closes)."""
    unstreamed_since: float | None = None
    async with httpx.AsyncClient(transport=network_transport(world.network), timeout=30) as http:
        while True:
            await trio.sleep(_HEALTH_EVERY)
            now = trio.current_time()
            servers = world.cluster.servers
            if any(s.http is not None and s.http.connection_count("stream") for s in servers):
                unstreamed_since = None
            elif unstreamed_since is None:
                unstreamed_since = now
            slot = world.active_slot()
            if slot is None or unstreamed_since is None or now - unstreamed_since < HEALTH_BOUND:
                continue
            try:
                health = await http.get(f"{slot.url}/health")
            except httpx.TransportError:
                continue  # killed meanwhile: the load's clients see that
            checks.trace.record("health", f"{slot.name} {health.status_code} without a stream")
            if health.status_code == 204:
                checks.violate(
                    "6 health tells the truth",
                    f"{slot.name} says OK; no event stream open since {unstreamed_since:.3f}",
                )


async def _final_checks(world: World, checks: Checks, pools: dict[int, int]) -> None:
    """Promises 5 and 6, after the quiet period."""
    acting = world.acting()
    if len(acting) != 1:
        checks.violate("5 nothing leaked, nothing forgotten", f"{len(acting)} daemons act at the end")
        return
    daemon = acting[0].daemon
    assert daemon is not None
    assert daemon.service is not None
    pool = daemon.service.pool
    known = set(pool.runners_in(RunnerState.IDLE)) | set(pool.runners_in(RunnerState.USED))
    starting = set(pool.runners_in(RunnerState.STARTING))
    in_nomad = set(world.truth.runner_jobs())
    if in_nomad - known - starting:
        checks.violate(
            "5 nothing leaked", f"jobs in Nomad the daemon does not know: {sorted(in_nomad - known)[:5]}"
        )
    if known - in_nomad:
        checks.violate("5 nothing forgotten", f"runners Nomad does not have: {sorted(known - in_nomad)[:5]}")
    stats = pool.stats()
    for environment, size in pools.items():
        idle = stats[environment].idle if environment in stats else 0
        if idle != size:
            checks.violate("5 every pool at its size", f"environment {environment}: {idle} idle of {size}")
    async with httpx.AsyncClient(transport=network_transport(world.network), timeout=30) as http:
        health = await http.get(f"{acting[0].url}/health")
        if health.status_code != 204:
            checks.violate(
                "6 health tells the truth", f"health {health.status_code} at the end: {health.text[:200]}"
            )
