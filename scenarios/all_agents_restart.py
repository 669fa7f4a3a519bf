"""Every Nomad agent restarts at once (the field report "Handle permanently dead Nomad jobs").

    python scenarios/all_agents_restart.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

At the daemon's default settings. Half of the runner jobs vanish without a JobDeregistered, and the
environment job ends dead but existing; of the jobs that survive, the agents come back without half
of the containers (their hosts rebooted), which the servers list running until the restored clients
write so, 1 s later. Each agent registers again when it starts, which makes its runners suspect: none
is handed out until evidence newer than the restart proves it (a command run in it once the relist
that runs as soon as the agents are ready lists it, or its client's own write).

Invariants: the fault really lost jobs and containers; once the agents are back, no runner a claim
hands out lacks its container, and every one runs ``echo ok`` to exit 0 (a claim may answer 500
NOMAD_OVERLOAD while the pool refills); the pool is back to strength within 5 s of the agents'
return; a claimed runner whose job vanished or whose container was lost is gone (410), one that
survived whole is kept; no runner job is leaked.
"""

from __future__ import annotations

import argparse

import httpx
import trio
from harness import open_scenario, parse_arguments, run

from supervisor.simulator import SimConfig

CLAIMS_AFTER_RETURN = 12
# Half of the runner jobs vanish; the agents come back without half of the other containers, and
# write so 1 s after their return, as a client that reaches the servers at once does.
RESTART_ALL = {"downtime_s": 1.0, "lose_fraction": 0.5, "lose_containers": 0.5, "report_delay_s": 1.0}
STRENGTH_WITHIN = 5.0


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=5, alloc_start_delay=0.05)
    async with open_scenario("all_agents_restart", args.seed, config) as scenario:
        claimed = await scenario.warm_with_claims(args.runners, args.runners // 2)

        def exists(runner: str) -> bool:
            return ("default", runner) in scenario.cluster.state.jobs

        nodes = scenario.cluster.state.nodes.values()
        known = set(scenario.service.pool.runners)
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{scenario.cluster.addresses[0]}/sim/v1/nodes/restart-all",
                json={**RESTART_ALL},
            )
            response.raise_for_status()
        scenario.event("all agents restarting", **RESTART_ALL)
        await scenario.wait_for(lambda: all(n.agent_up and n.status == "ready" for n in nodes), within=30)
        vanished = sorted(r for r in known if not exists(r))
        state = scenario.cluster.state
        without_container = {a.job_id for a in state.every_alloc() if a.container_lost and a.job_id in known}
        scenario.event("agents back", vanished=len(vanished), without_container=len(without_container))
        scenario.check("jobs_vanished_silently", len(vanished) > 0, len(vanished), "> 0")
        scenario.check("containers_lost", len(without_container) > 0, len(without_container), "> 0")

        outcomes: list[str] = []
        healed: float | None = None
        dead_handed_out: list[str] = []

        def claimed_now(runner: str) -> None:
            runner_allocs = state.allocs_by_job.get(("default", runner), {}).values()
            if not any(a.client_status == "running" and not a.container_lost for a in runner_allocs):
                dead_handed_out.append(runner)

        async def claim_and_run() -> None:
            outcomes.append(await scenario.claim_run_release("echo ok", claimed=claimed_now))

        async def wait_for_strength() -> None:
            nonlocal healed
            healed = await scenario.wait_for(
                lambda: (
                    scenario.idle() == args.runners and all(exists(r) for r in scenario.service.pool.runners)
                ),
                within=60,
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_strength)
            for _ in range(CLAIMS_AFTER_RETURN):
                nursery.start_soon(claim_and_run)
        scenario.event("pool back to strength", seconds=healed)
        ran_ok = outcomes.count("exit 0")
        scenario.event("claims after the return", outcomes=outcomes)
        scenario.check("no_dead_runner_handed_out", not dead_handed_out, dead_handed_out, [])
        scenario.check(
            "claims_after_return_ran_echo_ok", ran_ok == CLAIMS_AFTER_RETURN, ran_ok, CLAIMS_AFTER_RETURN
        )
        scenario.check(
            "pool_back_to_strength_s",
            healed is not None and healed <= STRENGTH_WITHIN,
            healed,
            STRENGTH_WITHIN,
        )
        lost_claims = [r for r in claimed if r in vanished or r in without_container]
        gone = [r for r in lost_claims if (await scenario.http.get(f"/runners/{r}/files")).status_code == 410]
        scenario.check("vanished_claims_are_gone", gone == lost_claims, len(gone), len(lost_claims))
        survivors = [r for r in claimed if r not in lost_claims]
        kept = [r for r in survivors if scenario.service.pool.used_runner(r) is not None]
        scenario.check("surviving_claims_kept", kept == survivors, len(kept), len(survivors))
        for runner in kept:
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=8))
