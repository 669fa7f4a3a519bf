"""A seed's fault schedule, drawn from everything the simulated cluster can do, and the log of what
was done, by which the checks tell an explained failure from a broken promise.

Every fault heals before the quiet period: agents come back, servers serve again, drains end,
firewalls open, a killed daemon is started again.

Servers in trouble (500s and slow answers, ``simulator/http/trouble.py``) are drawn apart, from a stream
of their own, so that every seed keeps the schedule it had before they were simulated; so are a
pair's partitions (one daemon cut off from the cluster), and the kills of a daemon the instant a
client has its claim's answer.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio
from attrs import define, field, frozen

from ..simulator.http.trouble import Trouble
from .partition import MODES, PartitionableNetwork
from .trace import Trace
from .world import DaemonSlot, World

__all__ = ["CLAIM_KILL", "KINDS", "PARTITION", "TROUBLE", "Fault", "FaultLog", "plan_faults", "run_faults"]

KINDS: Final = (
    "agent_restart",
    "agent_drain_restart",
    "rolling_agents",
    "all_agents",
    "server_restart",
    "leader_restart",
    "stream_cut",
    "stream_flapping",
    "node_down",
    "agent_unreachable",
    "allocation_failure",
    "drain",
    "daemon_kill",
)
# The faults that restart agents, which may come back to containers gone.
_RESTARTS: Final = ("agent_restart", "agent_drain_restart", "rolling_agents", "all_agents")
# Not one of KINDS, which every seed's schedule draws from: its own stream draws it.
TROUBLE: Final = "server_trouble"
# Not one of KINDS either: a pair's seeds draw it from a stream of its own.
PARTITION: Final = "daemon_partition"
# Not one of KINDS either: every seed draws it from a stream of its own. The daemon that answers
# the first claim after the fault's time is killed the instant its client has the answer; one
# armed this long without a claim answered kills nothing.
CLAIM_KILL: Final = "daemon_kill_at_claim"
_CLAIM_KILL_ARMED: Final = 20.0
# The share of partitions that cut off the active daemon (the others, the standby).
_PARTITION_ACTIVE: Final = 0.75
# The faults after which anything may have been cut: a server's, or a daemon's.
_EVERYTHING: Final = ("server_restart", "leader_restart", "daemon_kill", TROUBLE, PARTITION)
# How long after a fault heals its consequences may still show (a node's heartbeat grace, the
# reschedule of what it lost, a refill).
_AFTERMATH: Final = 30.0


@frozen
class Fault:
    """One fault of the schedule: when, what, and its draws."""

    at: float
    kind: str
    target: int  # which node, server or daemon (modulo how many there are)
    duration: float
    fraction: float = 0.0
    trouble: Trouble | None = None  # the servers' trouble, for TROUBLE
    # For an agent's restart: the share of its running tasks whose containers are gone when it comes
    # back, and how long it takes to write so (``simulator/agents/restarts.py``).
    lose_containers: float = 0.0
    report_delay: float = 1.0
    # For a partition: how the cut shows (``partition.MODES``).
    cut: str = ""

    def describe(self) -> str:
        """One line for the trace and the report."""
        line = f"{self.kind} target={self.target} duration={self.duration:.1f} fraction={self.fraction:.2f}"
        if self.lose_containers:
            line += f" lose_containers={self.lose_containers:.2f} report_delay={self.report_delay:.1f}"
        if self.cut:
            line += f" cut={self.cut}"
        if self.trouble is None:
            return line
        return f"{line} {'one server' if self.fraction < 0.5 else 'every server'} {self.trouble.describe()}"


@define
class _Window:
    kind: str
    start: float
    end: float
    nodes: frozenset[str] | None  # None: every node
    everything: bool  # a server's or the daemon's fault: any execution may have been cut


@define(eq=False)
class FaultLog:
    """The faults done so far, each with the time window its effects may show in."""

    windows: list[_Window] = field(factory=list)

    def add(self, kind: str, start: float, heals: float, *, nodes: frozenset[str] | None = None) -> None:
        """A fault acting from ``start``; healed at ``heals``."""
        everything = kind in _EVERYTHING
        self.windows.append(_Window(kind, start, heals + _AFTERMATH, nodes, everything))

    def active(self, kind: str, at: float) -> _Window | None:
        """A fault of ``kind`` whose window holds ``at``."""
        return next((w for w in self.windows if w.kind == kind and w.start <= at <= w.end), None)

    def recent(self, kind: str, at: float, within: float) -> float | None:
        """When the last fault of ``kind`` that healed within ``within`` seconds before ``at`` healed."""
        healed = [w.end - _AFTERMATH for w in self.windows if w.kind == kind and w.start <= at]
        return next((h for h in reversed(healed) if at - h <= within), None)

    def explains(self, node: str, since: float, until: float) -> str | None:
        """The fault that could have ended something on ``node`` between ``since`` and ``until``."""
        for window in self.windows:
            if window.start > until or window.end < since:
                continue
            if window.everything or window.nodes is None or node in window.nodes or not node:
                return f"{window.kind} at {window.start:.3f}"
        return None


def plan_faults(rng: random.Random, *, start: float, end: float, pair: bool = False) -> list[Fault]:
    """Between 2 and 12 faults at random times in [start, end), each healed by ``end``; up to
    two windows of the servers' trouble, drawn from a stream forked off ``rng`` as it comes; and,
    for a pair, one or two partitions, drawn from another."""
    fork = copy.copy(rng).getrandbits(64)
    trouble = random.Random(f"trouble {fork}")
    restores = random.Random(f"restores {fork}")
    partitions = random.Random(f"partitions {fork}")
    claim_kills = random.Random(f"claim kills {fork}")
    faults = []
    for _ in range(rng.randrange(2, 13)):
        at = round(rng.uniform(start, end - 30.0), 3)
        kind = rng.choice(KINDS)
        duration = round(min(rng.uniform(1.0, 40.0), end - at - 5.0), 3)
        fault = Fault(at, kind, rng.randrange(1000), duration, round(rng.random(), 3))
        faults.append(_with_lost_containers(restores, fault))
    faults += _plan_trouble(trouble, start=start, end=end)
    if pair:
        faults += _plan_partitions(partitions, start=start, end=end)
    faults += _plan_claim_kills(claim_kills, start=start, end=end)
    return sorted(faults, key=lambda f: f.at)


def _with_lost_containers(rng: random.Random, fault: Fault) -> Fault:
    """Half of the agents' restarts find containers gone (their hosts rebooted): a fifth to all of
    the running tasks, written 0.5 to 15 s after the agent is back (Nomad's client writes once it
    has reached the servers: at once, or late when they answer slowly)."""
    if fault.kind not in _RESTARTS or rng.random() < 0.5:
        return fault
    lose = round(rng.uniform(0.2, 1.0), 3)
    return attrs.evolve(fault, lose_containers=lose, report_delay=round(rng.uniform(0.5, 15.0), 3))


def _plan_trouble(rng: random.Random, *, start: float, end: float) -> list[Fault]:
    """None, one or two windows of 3 to 30 s in which the servers (every one, or the target
    alone: ``fraction`` < 0.5) answer 500s, slowly, or both."""
    faults = []
    for _ in range(rng.choice((0, 1, 2))):
        at = round(rng.uniform(start, end - 30.0), 3)
        duration = round(min(rng.uniform(3.0, 30.0), end - at - 5.0), 3)
        mode = rng.choice(("errors", "slow", "both"))
        errors = round(rng.uniform(0.1, 0.8), 3) if mode != "slow" else 0.0
        slow = round(rng.uniform(0.2, 1.0), 3) if mode != "errors" else 0.0
        max_delay = round(rng.uniform(0.5, 4.0), 3) if slow else 0.0
        # A third of the windows with 500s answer some writes 500 after applying them.
        applied = round(rng.uniform(0.2, 0.8), 3) if errors and rng.random() < 1 / 3 else 0.0
        drawn = Trouble(duration, errors, slow, max_delay, applied, rng.getrandbits(64))
        faults.append(Fault(at, TROUBLE, rng.randrange(1000), duration, round(rng.random(), 3), drawn))
    return faults


def _plan_partitions(rng: random.Random, *, start: float, end: float) -> list[Fault]:
    """One or two partitions of 5 to 60 s, most of them of the active daemon: long enough, often,
    for its lock to lapse and the standby to take over (2 x TTL + LockDelay, 25 s at the
    defaults)."""
    faults = []
    for _ in range(rng.choice((1, 2))):
        at = round(rng.uniform(start, end - 30.0), 3)
        duration = round(min(rng.uniform(5.0, 60.0), end - at - 5.0), 3)
        cut = rng.choice(MODES)
        faults.append(Fault(at, PARTITION, rng.randrange(1000), duration, round(rng.random(), 3), cut=cut))
    return faults


def _plan_claim_kills(rng: random.Random, *, start: float, end: float) -> list[Fault]:
    """One or two kills of a daemon the instant a client has its claim's answer, when the claim's
    writes may still be on their way to Nomad; each daemon back 1 to 10 s later."""
    faults = []
    for _ in range(rng.choice((1, 2))):
        at = round(rng.uniform(start, end - 30.0), 3)
        downtime = round(rng.uniform(1.0, 10.0), 3)
        faults.append(Fault(at, CLAIM_KILL, rng.randrange(1000), downtime))
    return faults


async def run_faults(world: World, faults: list[Fault], log: FaultLog, trace: Trace) -> None:
    """Do each fault at its time; heals run beside, in this task's nursery."""
    async with trio.open_nursery() as nursery:
        for fault in faults:
            await trio.sleep_until(fault.at)
            trace.record("fault", fault.describe())
            await _do(world, fault, log, nursery)


def _later(nursery: trio.Nursery, delay: float, action: Callable[[], Awaitable[None]]) -> None:
    async def run() -> None:
        await trio.sleep(delay)
        await action()

    nursery.start_soon(run)


async def _do(world: World, fault: Fault, log: FaultLog, nursery: trio.Nursery) -> None:  # noqa: C901  # a branch per kind
    cluster = world.cluster
    agents = cluster.agents
    now = trio.current_time()
    nodes = sorted(cluster.state.nodes.values(), key=lambda n: n.name)
    node = nodes[fault.target % len(nodes)]
    one = frozenset({node.name})
    kind, duration = fault.kind, fault.duration
    if kind in ("agent_restart", "agent_drain_restart", "node_down"):
        if not node.agent_up:
            return
        downtime = duration if kind != "node_down" else cluster.config.heartbeat_grace + duration
        drain = kind == "agent_drain_restart"
        agents.restarts.restart_agent(
            node,
            downtime=downtime,
            drain_on_shutdown=drain,
            drain_deadline=duration,
            lose_containers=fault.lose_containers,
            report_delay=fault.report_delay,
        )
        heals = now + downtime + (duration + 5.0 if drain else 0.0)
        if drain:  # the node stays ineligible after its own drain: the operator's runbook ends it
            _later(nursery, heals - now, _undrain(world, node.name))
        log.add(kind, now, heals, nodes=one)
    elif kind == "rolling_agents":
        gap = duration / max(len(nodes), 1)
        for i, each in enumerate(nodes):
            _later(nursery, i * gap, _restarting(world, each.name, min(gap, 10.0), fault))
        log.add(kind, now, now + duration + 10.0)
    elif kind == "all_agents":
        if all(n.agent_up for n in nodes):
            downtime = min(duration, 20.0)
            agents.restarts.restart_all(
                downtime=downtime,
                lose_fraction=fault.fraction * 0.5,
                lose_containers=fault.lose_containers,
                report_delay=fault.report_delay,
            )
            log.add(kind, now, now + downtime)
    elif kind in ("server_restart", "leader_restart"):
        serving = [s for s in cluster.servers if s.up]
        if kind == "leader_restart":
            serving = [s for s in serving if s.name == cluster.leader]
        if serving:
            downtime = min(duration, 10.0)
            cluster.restart_server(serving[fault.target % len(serving)].name, downtime=downtime)
            log.add(kind, now, now + downtime + cluster.config.election_timeout)
    elif kind == "stream_cut":
        cluster.cut_streams()
        log.add(kind, now, now)
    elif kind == "stream_flapping":
        for i in range(int(duration // 2)):
            _later(nursery, 2.0 * i, _cutting(world))
        log.add(kind, now, now + duration)
    elif kind == "agent_unreachable":
        await cluster.set_agent_reachable(node.name, False)
        _later(nursery, duration, _reachable(world, node.name))
        log.add(kind, now, now + duration, nodes=one)
    elif kind == "allocation_failure":
        up = {n.id for n in nodes if n.agent_up}
        running = sorted(
            (a for a in cluster.state.allocs.values() if a.client_status == "running" and a.node_id in up),
            key=lambda a: a.id,
        )
        if running:
            alloc = running[fault.target % len(running)]
            agents.fail(alloc, "oom" if fault.fraction < 0.5 else "crash")
            log.add(kind, now, now, nodes=frozenset({alloc.node_name}))
    elif kind == "drain":
        agents.drain(
            node, deadline_ns=round(duration * 1e9), mark_eligible=False, meta={}, accessor="operator"
        )
        _later(nursery, duration + 5.0, _undrain(world, node.name))
        log.add(kind, now, now + duration + 5.0, nodes=one)
    elif kind == TROUBLE and fault.trouble is not None:
        servers = cluster.servers
        sick = servers[fault.target % len(servers)].name if fault.fraction < 0.5 else None
        cluster.config.trouble.begin(fault.trouble, server=sick)
        log.add(kind, now, now + duration)
    elif kind == PARTITION:
        active = world.active_slot()
        if fault.fraction < _PARTITION_ACTIVE and active is not None:
            slot = active
        else:
            slot = next((s for s in world.slots if s is not active), world.slots[0])
        network = slot.network
        # One daemon cut off at a time: both at once leave no daemon to serve for longer than a
        # client's patience, an outage no daemon can keep a promise through.
        if network is not None and not any(s.network is not None and s.network.cut_off for s in world.slots):
            network.cut(fault.cut)
            _later(nursery, duration, _healing(network))
            log.add(kind, now, now + duration)
    elif kind == CLAIM_KILL:
        _arm_claim_kill(world, fault, log, nursery)
    elif kind == "daemon_kill":
        slot = world.slots[fault.target % len(world.slots)]
        if slot.running:
            world.kill(slot)
            downtime = min(duration, 10.0)
            _later(nursery, downtime, _starting(world, slot))
            log.add(kind, now, now + downtime)


def _arm_claim_kill(world: World, fault: Fault, log: FaultLog, nursery: trio.Nursery) -> None:
    """Kill the daemon that answers the next claim, the instant its client has the answer."""
    disarm_at = trio.current_time() + _CLAIM_KILL_ARMED

    def kill(slot: DaemonSlot) -> None:
        if not slot.running:
            return
        world.on_claim_answered = None
        world.kill(slot)
        now = trio.current_time()
        _later(nursery, fault.duration, _starting(world, slot))
        log.add("daemon_kill", now, now + fault.duration)

    async def disarm() -> None:
        await trio.sleep_until(disarm_at)
        if world.on_claim_answered is kill:
            world.on_claim_answered = None

    world.on_claim_answered = kill
    nursery.start_soon(disarm)


def _restarting(world: World, name: str, downtime: float, fault: Fault) -> Callable[[], Awaitable[None]]:
    async def restart() -> None:
        node = world.cluster.state.node_by_name(name)
        if node is not None and node.agent_up:
            world.cluster.agents.restarts.restart_agent(
                node,
                downtime=downtime,
                lose_containers=fault.lose_containers,
                report_delay=fault.report_delay,
            )

    return restart


def _healing(network: PartitionableNetwork) -> Callable[[], Awaitable[None]]:
    async def heal() -> None:
        network.heal()

    return heal


def _cutting(world: World) -> Callable[[], Awaitable[None]]:
    async def cut() -> None:
        world.cluster.cut_streams()

    return cut


def _reachable(world: World, name: str) -> Callable[[], Awaitable[None]]:
    async def open_again() -> None:
        await world.cluster.set_agent_reachable(name, True)

    return open_again


def _undrain(world: World, name: str) -> Callable[[], Awaitable[None]]:
    async def undrain() -> None:
        node = world.cluster.state.node_by_name(name)
        if node is not None:
            world.cluster.agents.drain(
                node, deadline_ns=None, mark_eligible=True, meta={}, accessor="operator"
            )

    return undrain


def _starting(world: World, slot: DaemonSlot) -> Callable[[], Awaitable[None]]:
    async def start() -> None:
        await world.start(slot)

    return start
