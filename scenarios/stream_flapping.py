"""The event stream flaps: cut every 2 s for a minute, under ten executions a second.

    python scenarios/stream_flapping.py [--runners N] [--seconds 60] [--rate 10] [--seed S]
                                        [--report FILE] [--plot FILE.svg]

A client like CodeOcean claims a runner, runs ``echo ok`` in it and gives it back, ``--rate`` times a
second; every stream of every server is cut every 2 s for ``--seconds``. The daemon runs at its
defaults, so its reconnect backoff grows with the losses, and the admission gate holds new work
while the stream is down. Invariants: no execution that started is killed (each ends with exit 0);
a claim or execution is refused by the gate (500 NOMAD_UNREACHABLE) only once it waited the gate's
whole wait (``admission.wait_timeout``); the pool is back to strength within 10 s of the last cut;
no runner job leaks.
"""

from __future__ import annotations

import argparse
import time

import trio
import trio_websocket
from harness import EXIT_0, Scenario, open_scenario, parse_arguments, run, terminal_messages

from supervisor.base.levels import StreamState
from supervisor.core.config import Settings
from supervisor.informer.informer import STREAM_BACKOFF_CAP
from supervisor.simulator import SimConfig


class Load:
    """The client's tally."""

    def __init__(self) -> None:
        self.executions = 0
        self.killed: list[object] = []
        self.refused_waits: list[float] = []
        self.overloaded = 0


async def one_client_cycle(scenario: Scenario, load: Load) -> None:
    started = time.monotonic()
    claim = await scenario.http.post("/runners", json={"executionEnvironmentId": 10})
    if claim.status_code == 500:
        code = claim.json().get("errorCode")
        if code == "NOMAD_UNREACHABLE":
            load.refused_waits.append(time.monotonic() - started)
        elif code == "NOMAD_OVERLOAD":
            load.overloaded += 1
        return
    claim.raise_for_status()
    runner = claim.json()["runnerId"]
    started = time.monotonic()
    prepared = await scenario.http.post(f"/runners/{runner}/execute", json={"command": "echo ok"})
    if prepared.status_code == 500 and prepared.json().get("errorCode") == "NOMAD_UNREACHABLE":
        load.refused_waits.append(time.monotonic() - started)
    elif prepared.status_code == 200:
        connecting = time.monotonic()
        try:
            ends = terminal_messages(await scenario.read_execution(prepared.json()["websocketUrl"]))
        except trio_websocket.ConnectionRejected as refused:
            # The upgrade waits at the gate too, and is refused as a claim is: nothing ran.
            if refused.status_code != 500 or b"NOMAD_UNREACHABLE" not in (refused.body or b""):
                raise
            load.refused_waits.append(time.monotonic() - connecting)
        else:
            load.executions += 1
            if ends != EXIT_0:
                load.killed.append(ends)
    await scenario.http.delete(f"/runners/{runner}")


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    async with open_scenario("stream_flapping", args.seed, config) as scenario:
        warm = await scenario.create_environment(args.runners)
        scenario.check("pool_warm_s", warm is not None, warm, 60)
        load = Load()
        cuts = 0
        async with trio.open_nursery() as nursery:
            deadline = trio.current_time() + args.seconds

            async def cut() -> None:
                nonlocal cuts
                while trio.current_time() < deadline:
                    await trio.sleep(2)
                    scenario.cluster.cut_streams()
                    cuts += 1
                    scenario.event("streams cut", state=scenario.service.gate.state.value)

            nursery.start_soon(cut)
            while trio.current_time() < deadline:
                nursery.start_soon(one_client_cycle, scenario, load)
                await trio.sleep(1 / args.rate)
        scenario.event("flapping over", cuts=cuts, executions=load.executions)
        scenario.check("no_execution_killed", not load.killed, len(load.killed), 0)
        wait = Settings().admission.wait_timeout  # the default the daemon runs at
        early = [round(w, 2) for w in load.refused_waits if w < wait * 0.95]
        scenario.check("refused_only_after_the_gates_wait", not early, early, f">= {wait} s")
        scenario.check("executions_ran", load.executions > 0, load.executions, "> 0")
        scenario.event("refused by the gate", count=len(load.refused_waits), overloaded=load.overloaded)
        # The stream may still wait out its reconnect backoff (at most its cap); from its return, the
        # pool is whole within 10 s.
        up = await scenario.wait_for(lambda: scenario.service.gate.state is StreamState.UP, within=60)
        scenario.check(
            "stream_up_after_s", up is not None and up <= STREAM_BACKOFF_CAP + 2, up, STREAM_BACKOFF_CAP + 2
        )
        strength = await scenario.wait_for(lambda: scenario.idle() == args.runners, within=60)
        scenario.check("pool_at_strength_after_s", strength is not None and strength <= 10, strength, 10)
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the stream flaps")
    parser.add_argument("--rate", type=float, default=10.0, help="executions a second")


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], 10, options))
