"""A Nomad agent restarts with drain_on_shutdown while executions run on it (Poseidon issue #659:
"New connections to draining runners").

    python scenarios/agent_drain_restart.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Invariants: executions already running on the draining node finish (exit 0, none killed); no runner
on the draining node is handed out; a new execution on a runner there is refused with 410 (the client
takes another runner); the pool stays at strength on the other nodes; once the operator makes the
node eligible again, everything works; no runner job is leaked.
"""

from __future__ import annotations

import argparse

import httpx
import trio
from harness import EXIT_0, open_scenario, parse_arguments, run, terminal_messages

from supervisor.simulator import SimConfig

COMMAND = "echo started; sleep 1; echo finished"


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    async with open_scenario("agent_drain_restart", args.seed, config) as scenario:
        await scenario.create_environment(args.runners)
        claimed = [await scenario.claim() for _ in range(max(2, args.runners // 2))]
        pool = scenario.service.pool
        nodes = [pool.runners[r].node_id for r in claimed]
        node_id = max(set(nodes), key=nodes.count)
        node = scenario.cluster.state.nodes[node_id]
        on_node = [r for r in claimed if pool.runners[r].node_id == node_id]
        scenario.event("runners claimed", claimed=len(claimed), on_draining_node=len(on_node))

        results: dict[str, list[dict[str, object]]] = {}

        async def run_one(runner: str) -> None:
            results[runner] = await scenario.execute(runner, COMMAND)

        refused = 0
        async with trio.open_nursery() as nursery:
            for runner in on_node:
                nursery.start_soon(run_one, runner)
            await trio.sleep(0.3)
            async with httpx.AsyncClient() as http:
                body = {"downtime_s": 2.0, "drain_on_shutdown": True, "drain_deadline_s": 3.0}
                response = await http.post(
                    f"{scenario.cluster.addresses[0]}/sim/v1/nodes/{node.name}/restart", json=body
                )
                response.raise_for_status()
            scenario.event("agent restarting with drain", node=node.name)
            await scenario.wait_for(lambda: pool.nodes.draining(node_id), within=10)
            for runner in on_node:
                attempt = await scenario.http.post(f"/runners/{runner}/execute", json={"command": "true"})
                refused += attempt.status_code == 410
        finished = sum(terminal_messages(results[r]) == EXIT_0 for r in on_node)
        scenario.check("running_executions_finish", finished == len(on_node), finished, len(on_node))
        scenario.check("new_work_on_draining_node_refused", refused == len(on_node), refused, len(on_node))

        fresh = [await scenario.claim() for _ in range(args.runners // 2)]
        landed = sum(pool.runners[r].node_id == node_id for r in fresh)
        scenario.check("claims_avoid_the_draining_node", landed == 0, landed, 0)
        for runner in fresh:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()
        healed = await scenario.wait_for(lambda: scenario.idle() == args.runners, within=60)
        scenario.check("pool_at_strength_s", healed is not None, healed, 60)

        await scenario.wait_for(lambda: node.agent_up and node.drain_strategy is None, within=30)
        await scenario.nomad.set_eligibility(node_id, eligible=True)
        scenario.event("node eligible again", node=node.name)
        runner = await scenario.claim()
        ends = terminal_messages(await scenario.execute(runner, "true"))
        scenario.check("works_after_the_drain", ends == EXIT_0, ends, "exit 0")

        for leftover in [runner, *claimed]:
            await scenario.http.delete(f"/runners/{leftover}")

        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=8))
