"""The daemon itself restarts: SIGTERM, then SIGKILL, with claimed runners and running executions.

    python scenarios/daemon_restart.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

The daemon runs as a process of its own (``supervisor run`` at its defaults) against the simulated
cluster. First SIGTERM while an execution runs: it finishes within the graceful stop. Then SIGKILL
while another runs: nothing stops it, and Nomad leaves its command running. Each time a new daemon
starts. Invariants: the SIGTERM'd execution exits 0 and the daemon exits 0; claims survive both
restarts with their inactivity timeouts (one of 4 s expires on time, one without a timeout stays);
the pool is not doubled; the command a SIGKILL left running is stopped once the next daemon is
back; no runner job leaks.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Mapping
from pathlib import Path

import httpx
import trio
from harness import (
    ENVIRONMENT,
    ENVIRONMENT_ID,
    EXIT_0,
    Scenario,
    daemon_logs,
    parse_arguments,
    run,
    start_daemon,
    terminal_messages,
)

from supervisor.nomad import NomadClient, NomadSettings
from supervisor.simulator import SimConfig, SimulatedCluster


async def pool_counts(scenario: Scenario) -> tuple[int, int]:
    """The environment's idle and used runners, as the daemon's statistics say."""
    stats = (await scenario.http.get("/statistics/execution-environments")).json()
    entry = stats.get(str(ENVIRONMENT_ID), {})
    return int(entry.get("idleRunners", 0)), int(entry.get("usedRunners", 0))


async def patch_as_a_client(scenario: Scenario, runner: str, patch: Mapping[str, object]) -> tuple[int, str]:
    """PATCH the runner's files as a client does: a 500 NOMAD_UNREACHABLE (the new daemon's first
    listing is not in yet and the gate's wait passed) is tried again after its Retry-After.
    Gives the status and, for a refusal, its body."""
    with trio.move_on_after(60):
        while True:
            response = await scenario.http.patch(f"/runners/{runner}/files", json=patch)
            if response.status_code != 500 or response.json().get("errorCode") != "NOMAD_UNREACHABLE":
                return response.status_code, response.text if response.status_code >= 400 else ""
            scenario.event("refused while the daemon starts; trying again", runner=runner)
            await trio.sleep(float(response.headers.get("retry-after", "1")))
    return 500, "still NOMAD_UNREACHABLE after 60 s"


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    with daemon_logs("daemon-restart-") as kept:
        logs = kept.path
        async with trio.open_nursery() as nursery:
            cluster = await nursery.start(SimulatedCluster(config).run)
            daemon, api = await start_daemon(cluster, logs / "first.log")
            async with (
                httpx.AsyncClient(base_url=api, timeout=30) as http,
                NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as nomad,
            ):
                scenario = Scenario("daemon_restart", args.seed, cluster, None, http, nomad)
                ok = await play(scenario, cluster, daemon, logs, args)
            nursery.cancel_scope.cancel("scenario over")
        kept.ok = ok
    return ok


def runner_jobs(cluster: SimulatedCluster) -> set[str]:
    return {
        j for (_, j), job in cluster.state.jobs.items() if j.startswith(f"{ENVIRONMENT_ID}-") and not job.stop
    }


async def play(
    scenario: Scenario,
    cluster: SimulatedCluster,
    daemon: trio.Process,
    logs: Path,
    args: argparse.Namespace,
) -> bool:
    environment = {**ENVIRONMENT, "prewarmingPoolSize": args.runners}
    (
        await scenario.http.put(f"/execution-environments/{ENVIRONMENT_ID}", json=environment)
    ).raise_for_status()
    with trio.fail_after(60):
        while (await pool_counts(scenario))[0] < args.runners:
            await trio.sleep(0.1)
    kept = await scenario.claim()
    body = {"executionEnvironmentId": ENVIRONMENT_ID, "inactivityTimeout": 4}
    expiring = (await scenario.http.post("/runners", json=body)).json()["runnerId"]

    # SIGTERM under an execution that ends within the graceful stop.
    async with trio.open_nursery() as nursery:
        ends: list[object] = []

        async def run_short() -> None:
            ends.extend(terminal_messages(await scenario.execute(kept, "echo started; sleep 2; echo done")))

        nursery.start_soon(run_short)
        await trio.sleep(0.5)
        daemon.send_signal(signal.SIGTERM)
        scenario.event("SIGTERM")
    exit_code = await daemon.wait()
    scenario.check("sigterm_execution_finishes", ends == EXIT_0, ends, "exit 0")
    scenario.check("sigterm_daemon_exits_0", exit_code == 0, exit_code, 0)

    daemon, api = await start_daemon(cluster, logs / "second.log")
    scenario.event("daemon started again")
    await scenario.http.aclose()
    scenario.http = httpx.AsyncClient(base_url=api, timeout=30)
    patch = {"copy": [{"path": "kept.txt", "content": ""}]}
    survived, refusal = await patch_as_a_client(scenario, kept, patch)
    scenario.check("claim_survives_sigterm", survived == 204, refusal or survived, 204)
    # An adopted claim's countdown starts again at its adoption, which the answer above follows:
    # the expiring claim is gone its timeout (4 s) after it, and a margin.
    await trio.sleep(6)
    expired, _ = await patch_as_a_client(scenario, expiring, patch)
    scenario.check("inactivity_timeout_survives_the_restart", expired == 410, expired, 410)

    # SIGKILL under an execution that would run for a minute.
    started = trio.Event()

    async def run_long() -> None:
        response = await scenario.http.post(
            f"/runners/{kept}/execute", json={"command": "echo started; sleep 60"}
        )
        await scenario.read_execution(response.json()["websocketUrl"], first_line=started.set)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_long)
        with trio.fail_after(10):
            await started.wait()
        daemon.send_signal(signal.SIGKILL)
        scenario.event("SIGKILL")
    await daemon.wait()
    left = cluster.execs.count
    scenario.check("sigkill_leaves_the_command_running", left >= 1, left, ">= 1")

    daemon, api = await start_daemon(cluster, logs / "third.log")
    scenario.event("daemon started after SIGKILL")
    await scenario.http.aclose()
    scenario.http = httpx.AsyncClient(base_url=api, timeout=30)
    stopped = await scenario.wait_for(lambda: cluster.execs.count == 0, within=30)
    scenario.check("left_command_stopped_s", stopped is not None, stopped, 30)
    survived, refusal = await patch_as_a_client(scenario, kept, patch)
    scenario.check("claim_survives_sigkill", survived == 204, refusal or survived, 204)
    again = terminal_messages(await scenario.execute(kept, "true"))
    scenario.check("claimed_runner_works", again == EXIT_0, again, "exit 0")

    await trio.sleep(1)
    jobs, known = len(runner_jobs(cluster)), sum(await pool_counts(scenario))
    expected = args.runners + 1
    scenario.check("pool_not_doubled", jobs == expected and known == jobs, [jobs, known], expected)
    (await scenario.http.delete(f"/runners/{kept}")).raise_for_status()
    await trio.sleep(2)
    jobs = len(runner_jobs(cluster))
    scenario.check("leaked_runner_jobs", jobs == args.runners, jobs - args.runners, 0)
    daemon.send_signal(signal.SIGTERM)
    await daemon.wait()
    await scenario.http.aclose()
    return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=4))
