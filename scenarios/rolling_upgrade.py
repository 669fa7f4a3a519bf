"""An unattended upgrade: the servers restart one by one, then the agents one by one, under load.

    python scenarios/rolling_upgrade.py [--runners N] [--rate 4] [--seed S] [--report FILE] [--plot FILE.svg]

A client like CodeOcean claims, runs a command that takes a second, and releases, ``--rate`` times a
second (it claims again on 410, and waits a little on NOMAD_OVERLOAD), while each server restarts
in turn (2 s down, the next once a leader leads again) and then each agent (2 s down, the next once
its node is ready again). Invariants: every execution ends with exactly one terminal message; none
is killed while only servers restart (exec goes straight to the agents); while agents restart, an
execution ends in error only with the agent's own message (its agent restarted under it); the pool
is back to strength within 10 s of the last restart; no runner job leaks.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import httpx
import trio
import trio_websocket
from harness import EXIT_0, Scenario, open_scenario, parse_arguments, run, terminal_messages

from supervisor.desk.executions import MESSAGE_AGENT_AWAY, MESSAGE_AGENT_RESTARTED, MESSAGE_CONNECTION_LOST
from supervisor.simulator import SimConfig
from supervisor.simulator.handle import SimServer
from supervisor.simulator.state.objects import SimNode

AGENT_ENDS = (
    [{"type": "error", "data": MESSAGE_AGENT_RESTARTED}],
    [{"type": "error", "data": MESSAGE_CONNECTION_LOST}],
    [{"type": "error", "data": MESSAGE_AGENT_AWAY}],
)


class Load:
    """Each execution's terminal messages, by phase: "servers" if it ran while only servers
    restarted, "agents" if any of its life overlapped the agents' restarts."""

    def __init__(self) -> None:
        self.phase = "servers"
        self.ends: dict[str, list[list[dict[str, Any]]]] = {"servers": [], "agents": []}
        self.refused: list[int] = []


async def one_cycle(scenario: Scenario, load: Load) -> None:
    phase = load.phase
    claim = await scenario.http.post("/runners", json={"executionEnvironmentId": 10})
    if claim.status_code != 200:
        load.refused.append(claim.status_code)
        return
    runner = claim.json()["runnerId"]
    prepared = await scenario.http.post(f"/runners/{runner}/execute", json={"command": "sleep 1; echo ok"})
    if prepared.status_code != 200:
        load.refused.append(prepared.status_code)
    else:
        try:
            ends = terminal_messages(await scenario.read_execution(prepared.json()["websocketUrl"]))
        except trio_websocket.ConnectionRejected as rejected:
            # The stream lost between the POST and the WebSocket's opening: the execution is new
            # work, refused past the admission wait (500 NOMAD_UNREACHABLE), as a claim would be.
            if rejected.status_code != 500 or b"NOMAD_UNREACHABLE" not in (rejected.body or b""):
                raise
            load.refused.append(rejected.status_code)
        else:
            load.ends["servers" if phase == load.phase == "servers" else "agents"].append(ends)
    await scenario.http.delete(f"/runners/{runner}")


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    async with open_scenario("rolling_upgrade", args.seed, config) as scenario:
        warm = await scenario.create_environment(args.runners)
        scenario.check("pool_warm_s", warm is not None, warm, 60)
        cluster = scenario.cluster
        load = Load()

        def serving(server: SimServer) -> Callable[[], bool]:
            return lambda: server.up and cluster.leader is not None

        def ready(node: SimNode) -> Callable[[], bool]:
            return lambda: node.agent_up and node.status == "ready"

        async with (
            trio.open_nursery() as nursery,
            httpx.AsyncClient(base_url=cluster.addresses[0]) as control,
        ):
            upgrading = True

            async def client() -> None:
                while upgrading:
                    nursery.start_soon(one_cycle, scenario, load)
                    await trio.sleep(1 / args.rate)

            nursery.start_soon(client)
            await trio.sleep(1)
            for server in cluster.servers:
                cluster.restart_server(server.name, downtime=2.0)
                scenario.event("server restarting", server=server.name)
                await trio.sleep(0.5)
                await scenario.wait_for(serving(server), within=30)
            load.phase = "agents"
            for node in list(cluster.state.nodes.values()):
                await control.post(f"/sim/v1/nodes/{node.name}/restart", json={"downtime_s": 2.0})
                scenario.event("agent restarting", node=node.name)
                await trio.sleep(0.5)
                await scenario.wait_for(ready(node), within=30)
            upgrading = False
        scenario.event("upgrade over", executions=sum(len(e) for e in load.ends.values()))

        every = [end for ends in load.ends.values() for end in ends]
        one_each = sum(len(end) == 1 for end in every)
        scenario.check("one_terminal_message_each", one_each == len(every), one_each, len(every))
        killed = [end for end in load.ends["servers"] if end != EXIT_0]
        scenario.check("none_killed_while_servers_restart", not killed, killed[:2], [])
        unexplained = [end for end in load.ends["agents"] if end != EXIT_0 and end not in AGENT_ENDS]
        scenario.check("agent_phase_errors_are_the_agents_own", not unexplained, unexplained[:3], [])
        ran = len(load.ends["servers"]) + len(load.ends["agents"])
        scenario.check("executions_ran", ran > 0, ran, "> 0")
        strength = await scenario.wait_for(lambda: scenario.idle() == args.runners, within=10)
        scenario.check("pool_at_strength_s", strength is not None, strength, 10)
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=4.0, help="executions started a second")


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], 10, options))
