"""Allocations fail under claimed runners: one is OOM-killed while an execution runs, one's task
crashes, and an operator stops one.

    python scenarios/allocation_failures.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Invariants: the execution on the OOM-killed allocation ends with Poseidon's exact OOM text; each of
the three runners answers its client 410 on its next call (its files are gone with its container);
each is replaced, so the pool is back to strength within 10 s; the other claimed runners are
untouched; no runner job leaks.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import httpx
import trio
from harness import EXIT_0, open_scenario, parse_arguments, run, terminal_messages

from supervisor.core.runners import REASON_OOM
from supervisor.simulator import SimConfig


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    async with open_scenario("allocation_failures", args.seed, config) as scenario:
        pool_size = max(4, args.runners)
        claimed = await scenario.warm_with_claims(pool_size, 4)
        oom, crash, stopped, bystander = claimed
        runners = scenario.service.pool.runners
        control = httpx.AsyncClient(base_url=scenario.cluster.addresses[0])

        async def fail(runner: str, reason: str) -> None:
            response = await control.post(
                f"/sim/v1/allocations/{runners[runner].alloc_id}/fail", json={"reason": reason}
            )
            response.raise_for_status()
            scenario.event("allocation failed", runner=runner, reason=reason)

        messages: list[dict[str, object]] = []

        async def run_until_killed() -> None:
            messages.extend(await scenario.execute(oom, "echo started; sleep 30"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_until_killed)
            await scenario.wait_for(lambda: scenario.service.executions.running_count == 1, within=10)
            await trio.sleep(0.3)
            await fail(oom, "oom")
        ends = terminal_messages(messages)
        oom_end = [{"type": "error", "data": REASON_OOM}]
        scenario.check("oom_execution_says_so", ends == oom_end, ends, oom_end)

        await fail(crash, "crash")
        stop = await scenario.nomad.stop_allocation(runners[stopped].alloc_id)
        scenario.event("allocation stopped by an operator", runner=stopped, eval=stop.eval_id)
        await control.aclose()

        async def gone(runner: str) -> bool:
            patch = {"copy": [{"path": "next.txt", "content": ""}]}
            return (await scenario.http.patch(f"/runners/{runner}/files", json=patch)).status_code == 410

        def replaced(runner: str) -> Callable[[], bool]:
            return lambda: runner not in runners

        for runner, name in ((oom, "oom"), (crash, "crash"), (stopped, "stopped")):
            await scenario.wait_for(replaced(runner), within=10)
            answered = await gone(runner)
            scenario.check(f"{name}_runner_is_410", answered, answered, True)
        strength = await scenario.wait_for(lambda: scenario.idle() == pool_size, within=10)
        scenario.check("pool_at_strength_s", strength is not None, strength, 10)
        after = terminal_messages(await scenario.execute(bystander, "true"))
        scenario.check("bystander_untouched", after == EXIT_0, after, "exit 0")
        (await scenario.http.delete(f"/runners/{bystander}")).raise_for_status()
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=6))
