"""A Nomad agent stays away past its heartbeat grace: its node goes down, its allocations are lost.

    python scenarios/node_down.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

One node's agent stops for longer than the cluster's heartbeat grace (20 s) and then comes back.
Invariants: once the node is down, the claimed runners that were on it answer 410, and no runner on
it is handed out; the pool is back to strength within 10 s of the node going down, on other nodes
(an idle runner whose allocation Nomad replaced elsewhere may keep its ID: nobody has used it); the
node's return changes nothing that was replaced (no allocation comes back from the dead, the pool
is not doubled); the claimed runners on other nodes are untouched; no runner job leaks.
"""

from __future__ import annotations

import argparse

import httpx
from harness import EXIT_0, open_scenario, parse_arguments, run, terminal_messages

from supervisor.simulator import SimConfig


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    async with open_scenario("node_down", args.seed, config) as scenario:
        claimed = await scenario.warm_with_claims(args.runners, max(3, args.runners // 2))
        pool = scenario.service.pool
        nodes = [pool.runners[r].node_id for r in claimed]
        node_id = max(set(nodes), key=nodes.count)
        node = scenario.cluster.state.nodes[node_id]
        on_node = [r for r in claimed if pool.runners[r].node_id == node_id]
        elsewhere = [r for r in claimed if r not in on_node]
        lost_allocs = {r.alloc_id for r in pool.runners.values() if r.node_id == node_id}

        def on_lost_allocs() -> list[str]:
            return sorted(r.id for r in pool.runners.values() if r.alloc_id in lost_allocs)

        downtime = scenario.cluster.config.heartbeat_grace + 5
        async with httpx.AsyncClient(base_url=scenario.cluster.addresses[0]) as control:
            response = await control.post(f"/sim/v1/nodes/{node.name}/restart", json={"downtime_s": downtime})
            response.raise_for_status()
        scenario.event("agent stopped", node=node.name, downtime_s=downtime, claimed_there=len(on_node))

        down = await scenario.wait_for(lambda: node.status == "down", within=downtime)
        scenario.check("node_down_s", down is not None, down, downtime)
        scenario.event("node down", node=node.name)
        strength = await scenario.wait_for(
            lambda: scenario.idle() == args.runners and not on_lost_allocs(), within=10
        )
        scenario.check("pool_at_strength_after_down_s", strength is not None, strength, 10)
        gone = 0
        for runner in on_node:
            answer = await scenario.http.post(f"/runners/{runner}/execute", json={"command": "true"})
            gone += answer.status_code == 410
        scenario.check("claimed_runners_there_are_410", gone == len(on_node), gone, len(on_node))
        fresh = [await scenario.claim() for _ in range(args.runners)]
        landed = sum(pool.runners[r].node_id == node_id for r in fresh)
        scenario.check("nothing_handed_out_on_the_down_node", landed == 0, landed, 0)
        for runner in fresh:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()

        back = await scenario.wait_for(lambda: node.agent_up and node.status == "ready", within=downtime + 10)
        scenario.check("node_back_s", back is not None, back, downtime + 10)
        scenario.event("node back", node=node.name)
        settled = await scenario.wait_for(lambda: scenario.idle() == args.runners, within=10)
        scenario.check("pool_at_strength_after_return_s", settled is not None, settled, 10)
        revived = on_lost_allocs()
        scenario.check("no_allocation_back_from_the_dead", not revived, len(revived), 0)
        gone_for_good = sum(r in pool.runners for r in on_node)
        scenario.check("claims_there_stay_gone", gone_for_good == 0, gone_for_good, 0)
        idle_and_used = scenario.idle() + len(elsewhere)
        scenario.check(
            "pool_not_doubled", len(pool.runners) == idle_and_used, len(pool.runners), idle_and_used
        )
        ends = [terminal_messages(await scenario.execute(r, "true")) for r in elsewhere]
        intact = sum(end == EXIT_0 for end in ends)
        scenario.check("claims_elsewhere_untouched", intact == len(elsewhere), intact, len(elsewhere))
        for runner in elsewhere:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=6))
