"""Nomad servers restart under running executions: the table of the field report (seed 002), row by row.

    python scenarios/server_restart.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Each row restarts one server, the leader or a follower, that is or is not the daemon's own address
(the server its Nomad address names first: "DNS resolves" in the report), while executions run on
claimed runners, and says whether the executions' WebSockets and the event stream had a problem.
Every row runs twice, each time on a cluster and a daemon of its own: with the client agents
reachable (exec goes straight to them), and with them firewalled off (exec goes through the servers,
as in the field). Invariants: with agents reachable, every execution of every row ends with its real
exit; with agents unreachable, the rows match the report's table, and each broken execution ends with
exactly one terminal `error`, never a made-up exit code; the event stream matches the table either
way; every claimed runner is kept; no runner job leaks; a new execution works afterwards.
"""

from __future__ import annotations

import argparse
from typing import Any

import trio
from harness import EXIT_0, Scenario, open_scenario, parse_arguments, run, terminal_messages

from supervisor.base.levels import StreamState
from supervisor.desk.executions import MESSAGE_CONNECTION_LOST
from supervisor.simulator import SimConfig

COMMAND = "echo started; sleep 2; echo done"
LOST = [{"type": "error", "data": MESSAGE_CONNECTION_LOST}]
# The report's table: (role, the daemon's address is the restarted server) -> (WebSocket, stream).
FIELD_TABLE = {
    ("leader", True): ("problematic", "problematic"),
    ("leader", False): ("problematic", "fine"),
    ("follower", True): ("problematic", "problematic"),
    ("follower", False): ("fine", "fine"),
}
# The simulated cluster's first server leads; the second follows.
SERVER_OF_ROLE = {"leader": 0, "follower": 1}


async def executions_during(scenario: Scenario, runners: list[str], fault: Any) -> list[list[dict[str, Any]]]:
    """One execution per runner; ``fault`` once every one has printed its first line; every message."""
    results: list[list[dict[str, Any]]] = [[] for _ in runners]
    started = 0
    all_started = trio.Event()

    def announce() -> None:
        nonlocal started
        started += 1
        if started == len(runners):
            all_started.set()

    async def one(index: int, runner: str) -> None:
        response = await scenario.http.post(f"/runners/{runner}/execute", json={"command": COMMAND})
        response.raise_for_status()
        results[index] = await scenario.read_execution(response.json()["websocketUrl"], first_line=announce)

    async with trio.open_nursery() as nursery:
        for index, runner in enumerate(runners):
            nursery.start_soon(one, index, runner)
        with trio.fail_after(30):
            await all_started.wait()
        await fault()
    return results


async def one_row(
    args: argparse.Namespace, reachable: bool, role: str, own: bool
) -> tuple[Scenario, str, str]:
    """One row on a cluster and a daemon of its own: (the scenario, WebSocket, stream)."""
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    target = SERVER_OF_ROLE[role]
    first = target if own else (target + 1) % 3
    name = f"{'agents' if reachable else 'firewalled'}_{role}_{'own' if own else 'other'}"
    async with open_scenario("server_restart", args.seed, config, first_server=first) as scenario:
        cluster = scenario.cluster
        warm = await scenario.create_environment(args.runners)
        scenario.check(f"{name}_pool_warm_s", warm is not None, warm, 60)
        claimed = [await scenario.claim() for _ in range(max(1, args.runners // 2))]
        if not reachable:
            for endpoint in cluster.endpoints.values():
                await cluster.set_agent_reachable(endpoint.name, False)
            for runner in claimed:  # each node's agent is tried once, then the servers serve it
                await scenario.execute(runner, "true")
        await scenario.wait_for(lambda: scenario.service.gate.state is StreamState.UP, within=30)
        losses = scenario.service.gate.losses
        server = cluster.servers[target]

        async def restart() -> None:
            cluster.restart_server(server.name, downtime=1.5)
            scenario.event("server restarted", server=server.name, role=role, daemons_own=own)

        ends = [terminal_messages(r) for r in await executions_during(scenario, claimed, restart)]
        websocket = "fine" if all(end == EXIT_0 for end in ends) else "problematic"
        await scenario.wait_for(lambda: server.up and cluster.leader is not None, within=30)
        await scenario.wait_for(lambda: scenario.service.gate.state is StreamState.UP, within=60)
        stream = "problematic" if scenario.service.gate.losses > losses else "fine"

        expected_websocket = "fine" if reachable else FIELD_TABLE[(role, own)][0]
        expected_stream = FIELD_TABLE[(role, own)][1]
        scenario.check(f"{name}_websocket", websocket == expected_websocket, websocket, expected_websocket)
        scenario.check(f"{name}_stream", stream == expected_stream, stream, expected_stream)
        honest = sum(end in (EXIT_0, LOST) for end in ends)
        scenario.check(f"{name}_one_honest_end_each", honest == len(ends), honest, len(ends))
        kept = sum(scenario.service.pool.used_runner(r) is not None for r in claimed)
        scenario.check(f"{name}_claimed_runners_kept", kept == len(claimed), kept, len(claimed))
        after = terminal_messages(await scenario.execute(claimed[0], "true"))
        scenario.check(f"{name}_execution_after", after == EXIT_0, after, "exit 0")
        for runner in claimed:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()
        await scenario.check_no_leaked_jobs()
        scenario.invariants[f"{name}_leaked_runner_jobs"] = scenario.invariants.pop("leaked_runner_jobs")
    return scenario, websocket, stream


def print_table(rows: dict[tuple[bool, str, bool], tuple[str, str]]) -> None:
    print(
        f"  {'agents':<12}{'restarted':<11}{'daemon uses it':<16}{'WebSocket':<13}{'stream':<13}field report"
    )
    for (reachable, role, own), (websocket, stream) in rows.items():
        field = " / ".join(FIELD_TABLE[(role, own)])
        agents = "reachable" if reachable else "firewalled"
        print(f"  {agents:<12}{role:<11}{'yes' if own else 'no':<16}{websocket:<13}{stream:<13}{field}")


async def main(args: argparse.Namespace) -> bool:
    rows: dict[tuple[bool, str, bool], tuple[str, str]] = {}
    report: Scenario | None = None
    for reachable in (True, False):
        for role in ("leader", "follower"):
            for own in (True, False):
                scenario, websocket, stream = await one_row(args, reachable, role, own)
                rows[(reachable, role, own)] = (websocket, stream)
                if report is None:
                    report = scenario
                else:
                    report.invariants.update(scenario.invariants)
                    report.timeline += scenario.timeline
    assert report is not None
    print_table(rows)
    return report.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=6))
