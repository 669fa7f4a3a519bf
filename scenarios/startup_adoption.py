"""The daemon starts against a cluster that a previous run left behind (seed 000's aftermath).

    python scenarios/startup_adoption.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Before the daemon starts, the cluster holds: environment 11 (its template job a count-0 service job,
"dead" as such jobs are, but existing) with idle runners and one claimed runner (``used`` and an
inactivity timeout of 300 s in its job's claim group, written by an update of the job once its
allocation runs); and runner jobs of environment 12, whose template job is gone. Invariants: both
environments with templates are there; the idle runners are adopted, not doubled; the claimed
runner is adopted as claimed, keeps its timeout and runs a command; the runner jobs of the
environment that no longer exists are purged; no runner job leaks.
"""

from __future__ import annotations

import argparse
import uuid

import trio
from harness import EXIT_0, open_scenario, parse_arguments, run, terminal_messages

from supervisor.core.environments import ExecutionEnvironment, runner_job, template_job
from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig

ADOPTED = 11
ORPHANED = 12


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    size = max(2, args.runners)
    environment = ExecutionEnvironment(ADOPTED, "python:3.12-slim", size, 100.0, 256, False, ())
    gone = ExecutionEnvironment(ORPHANED, "python:3.12-slim", 2, 100.0, 256, False, ())
    idle = [f"{ADOPTED}-{uuid.uuid4()}" for _ in range(size)]
    claimed = f"{ADOPTED}-{uuid.uuid4()}"
    orphans = [f"{ORPHANED}-{uuid.uuid4()}" for _ in range(2)]

    async def left_behind(nomad: NomadClient) -> None:
        await nomad.register_job(template_job(environment))
        for runner in idle:
            await nomad.register_job(runner_job(environment, runner))
        # Registered, then claimed once it runs: as a previous run's claim wrote it, an update of
        # the job. A claimed runner whose allocation is pending has restarted, its files gone.
        await nomad.register_job(runner_job(environment, claimed))
        with trio.fail_after(10):
            while not any(a.client_status == "running" for a in (await nomad.job_allocations(claimed)).value):
                await trio.sleep(0.05)
        await nomad.register_job(runner_job(environment, claimed, used=True, timeout=300))
        for runner in orphans:
            await nomad.register_job(runner_job(gone, runner))

    async with open_scenario("startup_adoption", args.seed, config, before_start=left_behind) as scenario:
        pool = scenario.service.pool
        cluster = scenario.cluster

        def runner_jobs(environment_id: int) -> set[str]:
            prefix = f"{environment_id}-"
            return {j for (_, j), job in cluster.state.jobs.items() if j.startswith(prefix) and not job.stop}

        known = await scenario.wait_for(lambda: ADOPTED in pool.environments, within=30)
        scenario.check("environment_adopted_s", known is not None, known, 30)
        settled = await scenario.wait_for(
            lambda: (stats := pool.stats().get(ADOPTED)) is not None and stats.idle == size, within=30
        )
        scenario.check("idle_runners_adopted_s", settled is not None, settled, 30)
        adopted = sum(r in pool.runners for r in idle)
        scenario.check("idle_runners_kept_not_replaced", adopted == size, adopted, size)
        doubled = len(runner_jobs(ADOPTED)) - (size + 1)
        scenario.check("pool_not_doubled", doubled == 0, doubled, 0)
        used = pool.used_runner(claimed)
        timeout = used.inactivity_timeout if used is not None else None
        scenario.check("claim_adopted_with_its_timeout", timeout == 300, timeout, 300)
        response = await scenario.http.post(f"/runners/{claimed}/execute", json={"command": "true"})
        ends = terminal_messages(await scenario.read_execution(response.json()["websocketUrl"]))
        scenario.check("claimed_runner_works", ends == EXIT_0, ends, "exit 0")
        purged = await scenario.wait_for(lambda: not runner_jobs(ORPHANED), within=30)
        scenario.check("orphaned_runner_jobs_purged_s", purged is not None, purged, 30)
        (await scenario.http.delete(f"/runners/{claimed}")).raise_for_status()
        scenario.event("adopted", idle=adopted, orphans_purged=len(orphans))

        def ours() -> set[str]:
            return {r.id for r in pool.runners.values() if r.environment_id == ADOPTED}

        await scenario.wait_for(lambda: runner_jobs(ADOPTED) == ours(), within=30)
        leaked = sorted(runner_jobs(ADOPTED) - ours())
        scenario.check("leaked_runner_jobs", not leaked, len(leaked), 0)
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=4))
