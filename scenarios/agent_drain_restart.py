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
from harness import ENVIRONMENT_ID, open_scenario, parse_arguments, run

from supervisor.simulator import SimConfig

COMMAND = "echo started; sleep 1; echo finished"


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    async with open_scenario("agent_drain_restart", args.seed, config) as scenario:
        environment = {
            "image": "python:3.12-slim",
            "prewarmingPoolSize": args.runners,
            "cpuLimit": 100,
            "memoryLimit": 256,
            "networkAccess": False,
            "exposedPorts": [],
        }
        (
            await scenario.http.put(f"/execution-environments/{ENVIRONMENT_ID}", json=environment)
        ).raise_for_status()
        await scenario.wait_for(lambda: scenario.idle() == args.runners, within=60)
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
            await scenario.wait_for(lambda: node_id in pool.draining_nodes, within=10)
            for runner in on_node:
                attempt = await scenario.http.post(f"/runners/{runner}/execute", json={"command": "true"})
                refused += attempt.status_code == 410
        finished = sum(
            [m for m in results[r] if m["type"] in ("exit", "error", "timeout")]
            == [{"type": "exit", "data": 0}]
            for r in on_node
        )
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
        await scenario.service.client.set_eligibility(node_id, eligible=True)
        scenario.event("node eligible again", node=node.name)
        runner = await scenario.claim()
        ends = [
            m for m in await scenario.execute(runner, "true") if m["type"] in ("exit", "error", "timeout")
        ]
        scenario.check("works_after_the_drain", ends == [{"type": "exit", "data": 0}], ends, "exit 0")

        for leftover in [runner, *claimed]:
            await scenario.http.delete(f"/runners/{leftover}")

        def runner_jobs() -> set[str]:
            return {
                job_id
                for (_, job_id), job in scenario.cluster.state.jobs.items()
                if job_id.startswith(f"{ENVIRONMENT_ID}-") and not job.stop
            }

        await scenario.wait_for(lambda: runner_jobs() == set(pool.runners), within=30)
        leaked = sorted(runner_jobs() - set(pool.runners))
        scenario.check("leaked_runner_jobs", not leaked, len(leaked), 0)
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=8))
