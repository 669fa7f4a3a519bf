"""Nomad servers restart under running executions (the field report behind Poseidon's "the runner will
be destroyed and replaced").

    python scenarios/server_restart.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

A follower restarts, then the leader, while executions run on claimed runners. Invariants: the
follower's restart changes nothing for running executions; the leader's restart ends each running
execution with exactly one terminal message and never a made-up exit code; the event stream comes
back; recovery keeps every claimed runner (no runner object replaced under its client); the pool
refills; no runner job is leaked in Nomad; new executions work afterwards.
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import trio
from harness import EXIT_0, Scenario, open_scenario, parse_arguments, run, terminal_messages

from supervisor.executions import MESSAGE_CONNECTION_LOST
from supervisor.levels import StreamState
from supervisor.simulator import SimConfig

COMMAND = "echo started; sleep 2; echo done"


async def executions_during(scenario: Scenario, runners: list[str], fault: Any) -> list[list[dict[str, Any]]]:
    """Start one execution per runner, apply ``fault`` once all have started, collect every message."""
    results: list[list[dict[str, Any]]] = [[] for _ in runners]

    async def one(index: int, runner: str) -> None:
        results[index] = await scenario.execute(runner, COMMAND)

    async with trio.open_nursery() as nursery:
        for index, runner in enumerate(runners):
            nursery.start_soon(one, index, runner)
        await trio.sleep(0.5)
        await fault()
    return results


async def restart(scenario: Scenario, server: str, downtime: float) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{scenario.cluster.addresses[-1]}/sim/v1/servers/{server}/restart", json={"downtime_s": downtime}
        )
        response.raise_for_status()
    scenario.event("server restarted", server=server, downtime_s=downtime)


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    async with open_scenario("server_restart", args.seed, config) as scenario:
        warm = await scenario.create_environment(args.runners)
        scenario.check("pool_warm_s", warm is not None, warm, 60)
        scenario.event("pool warm")
        claimed = [await scenario.claim() for _ in range(max(1, args.runners // 2))]
        scenario.event("runners claimed", count=len(claimed))

        follower = next(s.name for s in scenario.cluster.servers if s.name != scenario.cluster.leader)
        results = await executions_during(scenario, claimed, lambda: restart(scenario, follower, 1.0))
        intact = sum(terminal_messages(r) == EXIT_0 for r in results)
        scenario.check("follower_restart_executions_intact", intact == len(claimed), intact, len(claimed))

        leader = scenario.cluster.leader or ""
        results = await executions_during(scenario, claimed, lambda: restart(scenario, leader, 2.0))
        ends = [terminal_messages(r) for r in results]
        exited = sum(end == EXIT_0 for end in ends)
        lost = sum(end == [{"type": "error", "data": MESSAGE_CONNECTION_LOST}] for end in ends)
        scenario.event("leader restart outcomes", exited=exited, connection_lost=lost)
        # A leader restart drops every exec it proxies: their outcome is unknown, and must be said so.
        scenario.check(
            "leader_restart_one_honest_end_each", exited + lost == len(claimed), exited + lost, len(claimed)
        )
        back = await scenario.wait_for(lambda: scenario.service.gate.state is StreamState.UP, within=30)
        scenario.check("stream_back_s", back is not None, back, 30)
        scenario.event("stream up", losses=scenario.service.gate.losses)

        kept = sum(scenario.service.pool.used_runner(r) is not None for r in claimed)
        scenario.check("claimed_runners_kept", kept == len(claimed), kept, len(claimed))
        refilled = await scenario.wait_for(lambda: scenario.idle() == args.runners, within=60)
        scenario.check("pool_refilled_s", refilled is not None, refilled, 60)
        after = terminal_messages(await scenario.execute(claimed[0], "true"))
        scenario.check("execution_after_recovery", after == EXIT_0, after, "exit 0")

        for runner in claimed:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()

        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=6))
