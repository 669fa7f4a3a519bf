"""The agents restart one after another, each draining itself first, with 200 runners: the field's
25-minute denial of service (seed 000), which our registration rate limit must never feed.

    python scenarios/rolling_agent_restart_storm.py [--runners N] [--nodes K] [--seed S] [--report FILE]
        [--plot FILE.png]

The cluster models the storm as the field saw it: an agent that, within 30 s of coming back, is
starting more than 20 tasks at once runs out of file descriptors and crashes; 5 s later it restores
its pending allocations, all at once, and crashes again. With 200 runners on 5 agents, a drained
agent's 40 runners are replaced on the agent that has just come back (the emptiest), so 40 starts at
once crash it; at 100 runners (20 each) the field saw only warnings. A task takes 2 s to start
(a container from an image the agent has).

The roll: each agent drains on shutdown (a 3 s deadline), is away 2 s, registers again, and the
operator's upgrade script makes its node eligible again; four clients claim, run and give back a
runner every second.
The daemon replaces the idle runners of each draining node. Its ``factory.registrations_per_second``
(default 100) paces those registrations, but a pace alone would have 200 tasks starting at once on
the agent that takes them (100 a second, each 2 s to start); ``factory.max_starting`` (default 10) holds
new runner jobs while one agent may be starting 10 of its earlier ones (those placed there, and
those not placed yet).

The same roll then runs again with both lifted (``registrations_per_second`` and ``max_starting`` =
1e6, the settings under test, to show they matter): the storm must appear there.

Invariants (default settings): new runner jobs per second, as Nomad saw them over any 5 s, stay
within the rate;
no agent crashes; the pool is at strength within 30 s of the last agent's return (the recovery time
is reported); no runner job is leaked; and without the rate limit, agents crash again and again.
"""

from __future__ import annotations

import argparse
from collections import deque

import httpx
import trio
from harness import ENVIRONMENT_ID, Scenario, open_scenario, parse_arguments, run

from supervisor.core.config import FactorySettings, ServerSettings, Settings
from supervisor.simulator import SimConfig

DOWNTIME = 2.0
# The agents' drain_on_shutdown deadline: claimed runners (batch jobs) move only then.
DRAIN_DEADLINE = 3.0
SPACING = 1.0
CLIENTS = 4
RECOVERY_WITHIN = 30.0
UNLIMITED = 1e6
PACE_WINDOW = 5.0
# The storm's signature: an agent that crashes again when it restores what flooded it.
STORM_CRASHES = 2


def storm_cluster(seed: int, nodes: int) -> SimConfig:
    return SimConfig(
        seed=seed,
        servers=3,
        nodes=nodes,
        alloc_start_delay=2.0,
        flood_limit=20,
        flood_window=30.0,
        flood_downtime=5.0,
        # Room for every runner (100 MHz each) on the nodes that stay up while one restarts.
        node_cpu_mhz=20_000,
    )


def new_runner_jobs_most_within(scenario: Scenario, seconds: float) -> int:
    """The most new runner jobs Nomad registered within any ``seconds`` (its own clock, from the
    simulator's record of registrations): each places an allocation. A claim's meta update
    registers the job again, in place, and is not counted."""
    seen: set[str] = set()
    window: deque[float] = deque()
    most = 0
    for registration in scenario.cluster.state.registrations:
        job_id, t = registration["job_id"], registration["t"]
        if not job_id.startswith(f"{ENVIRONMENT_ID}-") or job_id in seen:
            continue
        seen.add(job_id)
        window.append(t)
        while window[0] <= t - seconds:
            window.popleft()
        most = max(most, len(window))
    return most


def flood_crashes(scenario: Scenario) -> int:
    return sum(node.flood_crashes for node in scenario.cluster.state.nodes.values())


async def roll(scenario: Scenario, runners: int, *, stop_on_storm: bool) -> float | None:
    """Restart every agent in turn under load; the seconds from the last agent's return to the pool
    at strength (None: not within RECOVERY_WITHIN), or None at once if a storm began."""
    nodes = sorted(scenario.cluster.state.nodes.values(), key=lambda n: n.name)
    control = scenario.cluster.addresses[0] + "/sim/v1/nodes/{}/restart"
    body = {"downtime_s": DOWNTIME, "drain_on_shutdown": True, "drain_deadline_s": DRAIN_DEADLINE}
    rolling = True

    async def client() -> None:
        while rolling:
            await scenario.claim_run_release("echo ok")
            await trio.sleep(1.0)

    def storming() -> bool:
        return any(n.flood_crashes >= STORM_CRASHES for n in nodes)

    async with trio.open_nursery() as nursery, httpx.AsyncClient() as http:
        for _ in range(CLIENTS):
            nursery.start_soon(client)
        for node in nodes:
            (await http.post(control.format(node.name), json=body)).raise_for_status()
            scenario.event("agent draining and restarting", node=node.name)
            await scenario.wait_for(lambda n=node: not n.agent_up, within=30)  # type: ignore[misc]
            back = await scenario.wait_for(
                lambda n=node: storming() or (n.agent_up and n.status == "ready"),  # type: ignore[misc]
                within=60,
            )
            if storming() and stop_on_storm:
                break
            scenario.event("agent back", node=node.name, seconds=back)
            await scenario.nomad.set_eligibility(node.id, eligible=True)
            await trio.sleep(SPACING)
        rolling = False
        nursery.cancel_scope.cancel("roll over")
    if storming():
        scenario.event("storm", crashes={n.name: n.flood_crashes for n in nodes if n.flood_crashes})
        return None
    scenario.event("last agent back")
    healed = await scenario.wait_for(lambda: scenario.idle() == runners, within=RECOVERY_WITHIN)
    scenario.event("pool at strength", seconds=healed)
    return healed


async def main(args: argparse.Namespace) -> bool:
    report: Scenario | None = None
    async with open_scenario(
        "rolling_agent_restart_storm", args.seed, storm_cluster(args.seed, args.nodes)
    ) as scenario:
        report = scenario
        await scenario.warm_with_claims(args.runners, args.runners // 10)
        recovered = await roll(scenario, args.runners, stop_on_storm=False)
        rate = scenario.service.settings.factory.registrations_per_second
        # Over 5 s, so that one request's network delay does not count as a burst. Nomad sees
        # arrivals, not the daemon's paced sends: +1 for the window's edge, +1 for a request sent
        # on time before the window and delayed in transit into it (up to one interval, 50 ms).
        most = new_runner_jobs_most_within(scenario, PACE_WINDOW) / PACE_WINDOW
        pace = rate + 2 / PACE_WINDOW
        scenario.check("registrations_per_second_within_rate", most <= pace, most, pace)
        scenario.check("agent_crashes", flood_crashes(scenario) == 0, flood_crashes(scenario), 0)
        scenario.check("pool_recovered_s", recovered is not None, recovered, RECOVERY_WITHIN)
        for runner in list(scenario.service.pool.runners):
            if scenario.service.pool.used_runner(runner) is not None:
                (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()
        await scenario.check_no_leaked_jobs()

    unlimited = Settings(
        server=ServerSettings(port=0),
        factory=FactorySettings(registrations_per_second=UNLIMITED, max_starting=int(UNLIMITED)),
    )
    config = storm_cluster(args.seed, args.nodes)
    async with open_scenario("rolling_agent_restart_storm", args.seed, config, unlimited) as storm:
        await storm.warm_with_claims(args.runners, args.runners // 10)
        storm_recovered = await roll(storm, args.runners, stop_on_storm=True)
        crashes = flood_crashes(storm)
        lifted = "without the rate limit (registrations_per_second, max_starting = 1e6: under test)"
        report.timeline += [{**e, "run": lifted} for e in storm.timeline]
    report.check(
        "storm_without_rate_limit",
        crashes >= STORM_CRASHES and storm_recovered is None,
        {"agent_crashes": crashes, "pool_recovered_s": storm_recovered},
        {"agent_crashes": f">= {STORM_CRASHES}", "pool_recovered_s": None},
    )
    return report.report(args.report, args.plot)


def extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=5, help="client agents")


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=200, extra=extra))
