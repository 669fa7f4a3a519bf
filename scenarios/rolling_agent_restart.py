"""The Nomad agents restart one after another, as an operator rolls them (5 nodes, 100 runners).

    python scenarios/rolling_agent_restart.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

At the daemon's default settings. Each agent is away for 2 s (within the heartbeat grace, so its
allocations survive), and registers again when it starts: its runners are suspect until a relist
newer than the restart proves them. Four clients claim, run and give back a runner every second
until the last agent is back, as CodeOcean's users do.

Invariants: every runner a claim hands out, during the roll and after it, runs ``echo ok`` to exit 0
(a claim may answer 500 NOMAD_OVERLOAD while the pool refills; an exec whose agent is away waits for
it), or, if its agent stops under it, ends with that agent's own message and nothing else; the pool
is at strength within 5 s of the last agent's return; every claimed runner is kept; no runner job is
leaked.
"""

from __future__ import annotations

import argparse
import json

import httpx
import trio
from harness import open_scenario, parse_arguments, run

from supervisor.desk.executions import MESSAGE_AGENT_AWAY, MESSAGE_AGENT_RESTARTED
from supervisor.simulator import SimConfig

DOWNTIME = 2.0
AGENT_CUT = {
    json.dumps([{"type": "error", "data": m}]) for m in (MESSAGE_AGENT_RESTARTED, MESSAGE_AGENT_AWAY)
}
SPACING = 3.0
CLIENTS = 4
STRENGTH_WITHIN = 5.0


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=5, alloc_start_delay=0.05)
    async with open_scenario("rolling_agent_restart", args.seed, config) as scenario:
        claimed = await scenario.warm_with_claims(args.runners, args.runners // 10)
        nodes = sorted(scenario.cluster.state.nodes.values(), key=lambda n: n.name)
        outcomes: list[str] = []
        rolling = True

        async def client() -> None:
            while rolling:
                outcomes.append(await scenario.claim_run_release("echo ok"))
                await trio.sleep(1.0)

        async with trio.open_nursery() as nursery:
            for _ in range(CLIENTS):
                nursery.start_soon(client)
            async with httpx.AsyncClient() as http:
                for node in nodes:
                    response = await http.post(
                        f"{scenario.cluster.addresses[0]}/sim/v1/nodes/{node.name}/restart",
                        json={"downtime_s": DOWNTIME},
                    )
                    response.raise_for_status()
                    scenario.event("agent restarting", node=node.name)
                    await trio.sleep(SPACING)
            await scenario.wait_for(lambda: all(n.agent_up and n.status == "ready" for n in nodes), within=30)
            scenario.event("last agent back")
            rolling = False
            healed = await scenario.wait_for(lambda: scenario.idle() == args.runners, within=60)
        scenario.event("pool at strength", seconds=healed, executions=len(outcomes))
        ran_ok = outcomes.count("exit 0")
        # An execution whose agent stops under it ends with the agent's own message, never else.
        cut = [o for o in outcomes if o in AGENT_CUT]
        failures = [o for o in outcomes if o != "exit 0" and o not in AGENT_CUT]
        scenario.event("claims during and after the roll", failures=failures, cut_by_their_agent=len(cut))
        scenario.check("claims_ran_echo_ok", not failures and ran_ok > 0, failures or ran_ok, len(outcomes))
        scenario.check(
            "pool_at_strength_s", healed is not None and healed <= STRENGTH_WITHIN, healed, STRENGTH_WITHIN
        )
        kept = [r for r in claimed if scenario.service.pool.used_runner(r) is not None]
        scenario.check("claims_kept", kept == claimed, len(kept), len(claimed))
        for runner in kept:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=100))
