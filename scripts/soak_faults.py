"""The chaos soak's faults: the kinds, how long each reaches the executions it can cut, and the
injection of one into the simulated cluster (through its control API, as an operator's drain
goes through Nomad's).
"""

from __future__ import annotations

import argparse
import random
from typing import Any, Final

import httpx
import trio

from supervisor.simulator import SimConfig, SimulatedCluster

FAULTS: Final = ("server", "leader", "agent", "all_agents", "drain", "streams", "allocation", "node_down")
AGENT_DOWNTIME: Final = 2.0
DRAIN_DEADLINE: Final = 3.0
HEARTBEAT_GRACE: Final = SimConfig().heartbeat_grace
# A node down: its agent away past the heartbeat grace, so that Nomad marks it down.
NODE_DOWNTIME: Final = HEARTBEAT_GRACE + 3
# From a node down's start, the faults that Nomad's blindness to the away agent reaches: it places
# new allocations there until the grace ends.
BLIND_WINDOW: Final = NODE_DOWNTIME + 2
# Faults that reach every execution: a server's restart cuts each exec that goes through it.
EVERYWHERE: Final = frozenset({"server", "leader", "all_agents"})
# How long after it each fault can end an execution (a stream cut cannot): its own duration, then
# 10 s for what follows (an election, an agent's registration, a task's restart).
REACH: Final = {
    "server": 12.0,
    "leader": 12.0,
    "agent": AGENT_DOWNTIME + 10,
    "all_agents": AGENT_DOWNTIME + 10,
    "drain": DRAIN_DEADLINE + 10,
    "allocation": 30.0,
    "node_down": NODE_DOWNTIME + 10,
}


async def post(cluster: SimulatedCluster, control: httpx.AsyncClient, path: str, json: Any) -> None:
    """A control or operator request, to the first server that answers (one may be restarting):
    tried again every second until one does."""
    while True:
        for address in cluster.addresses:
            try:
                await control.post(address + path, json=json)
                return
            except httpx.TransportError:
                continue
        await trio.sleep(1)


async def inject(
    cluster: SimulatedCluster,
    control: httpx.AsyncClient,
    kind: str,
    rng: random.Random,
    nursery: trio.Nursery,
    *,
    at: float,
) -> dict[str, Any]:
    """One fault of the kind (an undrain later, in ``nursery``), as the soak records it: when, what
    kind (another, if nothing is left to hit) and its target."""
    nodes = sorted(cluster.state.nodes.values(), key=lambda n: n.name)
    up = [n for n in nodes if n.agent_up]
    if kind in ("agent", "node_down") and not up:
        kind = "streams"  # every agent is away: nothing to restart
    target = ""
    if kind in ("server", "leader"):
        serving = [s for s in cluster.servers if s.up]
        server = (
            next((s for s in serving if s.name == cluster.leader), None)
            if kind == "leader"
            else rng.choice(serving)
        )
        if server is not None:
            cluster.restart_server(server.name, downtime=2.0)
            target = server.name
    elif kind == "agent":
        node = rng.choice(up)
        await post(
            cluster, control, f"/sim/v1/nodes/{node.name}/restart", json={"downtime_s": AGENT_DOWNTIME}
        )
        target = node.name
    elif kind == "all_agents":
        await post(
            cluster,
            control,
            "/sim/v1/nodes/restart-all",
            json={"downtime_s": AGENT_DOWNTIME, "lose_fraction": 0.3},
        )
    elif kind == "drain":
        node = rng.choice(nodes)
        await post(
            cluster,
            control,
            f"/v1/node/{node.id}/drain",
            json={"DrainSpec": {"Deadline": round(DRAIN_DEADLINE * 1e9)}, "Meta": {}},
        )
        target = node.name

        async def undrain() -> None:
            await trio.sleep(10)
            body: dict[str, Any] = {"DrainSpec": None, "MarkEligible": True, "Meta": {}}
            await post(cluster, control, f"/v1/node/{node.id}/drain", json=body)

        nursery.start_soon(undrain)
    elif kind == "streams":
        cluster.cut_streams()
    elif kind == "allocation":
        live = [a for a in cluster.state.allocs.values() if a.client_status == "running"]
        if live:
            alloc = rng.choice(live)
            await post(
                cluster,
                control,
                f"/sim/v1/allocations/{alloc.id}/fail",
                json={"reason": rng.choice(["oom", "crash"])},
            )
            target = alloc.job_id
    elif kind == "node_down":
        node = rng.choice(up)
        downtime = NODE_DOWNTIME
        await post(cluster, control, f"/sim/v1/nodes/{node.name}/restart", json={"downtime_s": downtime})
        target = node.name
    return {"t": at, "kind": kind, "target": target}


def fault_kinds(text: str) -> list[str]:
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    if not kinds:
        raise argparse.ArgumentTypeError("no kind of fault given")
    unknown = sorted(set(kinds) - {*FAULTS, "none"})
    if unknown:
        raise argparse.ArgumentTypeError(f"no such kind of fault: {', '.join(unknown)}")
    return kinds
