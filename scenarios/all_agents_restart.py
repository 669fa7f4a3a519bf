"""Every Nomad agent restarts at once (the field report "Handle permanently dead Nomad jobs").

    python scenarios/all_agents_restart.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Some runner jobs vanish without a JobDeregistered, and the environment job ends dead but existing.
Invariants: the fault really lost jobs; the pool is back to full strength with runners whose jobs
exist (found by the periodic relist, since no event says anything); the environment is still served
(claims and executions work); a claimed runner whose job vanished is gone (410), one that survived
is kept; no runner job is leaked.
"""

from __future__ import annotations

import argparse

import httpx
from harness import EXIT_0, open_scenario, parse_arguments, run, terminal_messages

from supervisor.config import ServerSettings, Settings, WatcherSettings
from supervisor.simulator import SimConfig


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    settings = Settings(server=ServerSettings(port=0), watcher=WatcherSettings(resync_interval=1.0))
    async with open_scenario("all_agents_restart", args.seed, config, settings) as scenario:
        await scenario.create_environment(args.runners)
        claimed = [await scenario.claim() for _ in range(max(1, args.runners // 2))]
        await scenario.wait_for(lambda: scenario.idle() == args.runners, within=60)
        scenario.event("pool warm, runners claimed", claimed=len(claimed))

        def exists(runner: str) -> bool:
            return ("default", runner) in scenario.cluster.state.jobs

        known = set(scenario.service.pool.runners)
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{scenario.cluster.addresses[0]}/sim/v1/nodes/restart-all",
                json={"downtime_s": 1.0, "lose_fraction": 0.4},
            )
            response.raise_for_status()
        scenario.event("all agents restarted", downtime_s=1.0, lose_fraction=0.4)
        await scenario.wait_for(
            lambda: all(n.agent_up for n in scenario.cluster.state.nodes.values()), within=30
        )
        vanished = sorted(r for r in known if not exists(r))
        scenario.event("agents back", vanished=len(vanished))
        scenario.check("jobs_vanished_silently", len(vanished) > 0, len(vanished), "> 0")

        healed = await scenario.wait_for(
            lambda: scenario.idle() == args.runners and all(exists(r) for r in scenario.service.pool.runners),
            within=60,
        )
        scenario.check("pool_back_to_strength_s", healed is not None, healed, 60)
        scenario.event("pool healed")
        lost_claims = [r for r in claimed if r in vanished]
        gone = [r for r in lost_claims if (await scenario.http.get(f"/runners/{r}/files")).status_code == 410]
        scenario.check("vanished_claims_are_gone", gone == lost_claims, len(gone), len(lost_claims))
        survivors = [r for r in claimed if r not in vanished]
        kept = [r for r in survivors if scenario.service.pool.used_runner(r) is not None]
        scenario.check("surviving_claims_kept", kept == survivors, len(kept), len(survivors))

        fresh = await scenario.claim()
        ends = terminal_messages(await scenario.execute(fresh, "true"))
        scenario.check("environment_still_served", ends == EXIT_0, ends, "exit 0")

        for runner in [fresh, *kept]:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()

        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=8))
