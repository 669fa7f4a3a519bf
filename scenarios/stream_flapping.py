"""The event stream flaps: cut every 2 s for a minute, under ten executions a second.

    python scenarios/stream_flapping.py [--runners N] [--seconds 60] [--rate 10] [--seed S]
                                        [--report FILE] [--plot FILE.svg]

A client like CodeOcean claims a runner, runs ``echo ok`` in it and gives it back, ``--rate`` times a
second; every stream of every server is cut every 2 s for ``--seconds``. Nomad answers 50 ms after
it has computed an answer, so the listing the daemon takes at each reconnect, three rounds of reads,
runs for 0.15 s or more; another client holds runners and, at each reconnect, gives them back one
after another while that listing runs, so that the listing was taken before their purges and is
reconciled after their release. The daemon runs at its defaults, so its reconnect backoff grows
with the losses, and the admission gate holds new work while the stream is down.

Invariants: no execution that started is killed (each ends with exit 0), and no claimed runner is
answered 410 (gone: no fault here touches a runner); the daemon lets a claim, an execution or an
execution's WebSocket through only once its stream is up (each was answered with the gate up at some
moment since it was sent: it waited at the gate and went on once the stream was back), and refuses
one (500 NOMAD_UNREACHABLE) only once it waited the gate's whole wait (``admission.wait_timeout``);
a runner given back never comes back: the daemon's pool never holds it again and no claim is
answered with it again, and some were given back while a listing ran; the stream is up within the
reconnect backoff's cap of the last cut, and the pool back to strength within 10 s of that; no
runner job leaks. The gate and the pool are watched after every step of the run
(``daemon_watch.py``), not sampled.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Final

import trio
import trio_websocket
from daemon_watch import DaemonWatch
from harness import ENVIRONMENT_ID, EXIT_0, Scenario, open_scenario, parse_arguments, run, terminal_messages

from supervisor.base.levels import StreamState
from supervisor.core.config import Settings
from supervisor.informer.informer import STREAM_BACKOFF_CAP
from supervisor.simulator import SimConfig

# How long Nomad's answers take to reach the daemon once computed.
LATENCY: Final = 0.05
# The runners held to be given back while a reconnect's listing runs, one every RELEASE_EVERY: from
# the listing's start to past its third round of reads (at most half the pool, which the load needs).
HELD: Final = 8
RELEASE_EVERY: Final = LATENCY / 2
# How often the holder looks whether the daemon has begun to list.
_LOOK_EVERY: Final = 0.005
_CLAIM: Final = {"executionEnvironmentId": ENVIRONMENT_ID}


class Load:
    """The clients' tally."""

    def __init__(self, scenario: Scenario, watch: DaemonWatch) -> None:
        self.scenario, self.watch = scenario, watch
        self.executions = 0
        self.killed: list[object] = []
        # Claimed runners the daemon answered 410 (gone) for: no fault here touches a runner.
        self.gone: list[str] = []
        self.refused_waits: list[float] = []
        self.overloaded = 0
        # What the daemon let through the gate: (what, sent, answered), trio's times.
        self.let_through: list[tuple[str, float, float]] = []
        self.handed_out: Counter[str] = Counter()
        # Releases sent while the daemon listed at a reconnect.
        self.released_while_listing = 0

    async def claim(self) -> str | None:
        """A runner, or None: refused (the gate's wait passed, or no idle runner)."""
        sent = trio.current_time()
        claim = await self.scenario.http.post("/runners", json=_CLAIM)
        answered = trio.current_time()
        if claim.status_code == 500:
            code = claim.json().get("errorCode")
            if code == "NOMAD_UNREACHABLE":
                self.refused_waits.append(answered - sent)
            elif code == "NOMAD_OVERLOAD":
                self.overloaded += 1
            return None
        claim.raise_for_status()
        self.let_through.append(("claim", sent, answered))
        runner = str(claim.json()["runnerId"])
        self.handed_out[runner] += 1
        return runner

    async def release(self, runner: str) -> None:
        if self.watch.state_at(trio.current_time()) is StreamState.RECOVERING:
            self.released_while_listing += 1
        released = await self.scenario.http.delete(f"/runners/{runner}")
        if released.status_code == 204:
            self.watch.released.add(runner)

    async def execute(self, runner: str) -> None:
        sent = trio.current_time()
        prepared = await self.scenario.http.post(f"/runners/{runner}/execute", json={"command": "echo ok"})
        answered = trio.current_time()
        if prepared.status_code == 500 and prepared.json().get("errorCode") == "NOMAD_UNREACHABLE":
            self.refused_waits.append(answered - sent)
            return
        if prepared.status_code == 410:
            self.gone.append(f"{runner}: execution 410")
        if prepared.status_code != 200:
            return
        self.let_through.append(("execution", sent, answered))
        connecting = trio.current_time()
        opened: list[float] = []
        try:
            messages = await self.scenario.read_execution(
                prepared.json()["websocketUrl"], opened=lambda: opened.append(trio.current_time())
            )
        except trio_websocket.ConnectionRejected as refused:
            if refused.status_code == 410:
                self.gone.append(f"{runner}: WebSocket 410")
                return
            # The upgrade waits at the gate too, and is refused as a claim is: nothing ran.
            if refused.status_code != 500 or b"NOMAD_UNREACHABLE" not in (refused.body or b""):
                raise
            self.refused_waits.append(trio.current_time() - connecting)
            return
        self.let_through.append(("execution's WebSocket", connecting, opened[0]))
        self.executions += 1
        if terminal_messages(messages) != EXIT_0:
            self.killed.append(terminal_messages(messages))


async def one_client_cycle(load: Load) -> None:
    runner = await load.claim()
    if runner is not None:
        await load.execute(runner)
        await load.release(runner)


async def hold_and_give_back(load: Load, holding: int, deadline: float) -> None:
    """Hold ``holding`` runners while the stream is up; once the daemon lists at a reconnect, give
    them back one every RELEASE_EVERY, and claim as many again once the stream is up."""
    scenario = load.scenario
    held: list[str] = []
    while trio.current_time() < deadline:
        while len(held) < holding and scenario.service.gate.state is StreamState.UP:
            runner = await load.claim()
            if runner is None:
                break
            held.append(runner)
        while scenario.service.gate.state is not StreamState.RECOVERING and trio.current_time() < deadline:
            await trio.sleep(_LOOK_EVERY)
        async with trio.open_nursery() as releases:
            for n, runner in enumerate(held):
                releases.start_soon(_release_after, load, runner, n * RELEASE_EVERY)
        held = []
        while scenario.service.gate.state is not StreamState.UP and trio.current_time() < deadline:
            await trio.sleep(_LOOK_EVERY)
    for runner in held:
        await load.release(runner)


async def _release_after(load: Load, runner: str, delay: float) -> None:
    await trio.sleep(delay)
    await load.release(runner)


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05, response_latency=LATENCY)
    async with open_scenario("stream_flapping", args.seed, config) as scenario:
        warm = await scenario.create_environment(args.runners)
        scenario.check("pool_warm_s", warm is not None, warm, 60)
        watch = DaemonWatch(scenario.service)
        watch.install()
        load = Load(scenario, watch)
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
            nursery.start_soon(hold_and_give_back, load, max(1, min(HELD, args.runners // 2)), deadline)
            while trio.current_time() < deadline:
                nursery.start_soon(one_client_cycle, load)
                await trio.sleep(1 / args.rate)
        scenario.event("flapping over", cuts=cuts, executions=load.executions)
        scenario.event("refused by the gate", count=len(load.refused_waits), overloaded=load.overloaded)
        # The stream may still wait out its reconnect backoff (at most its cap); from its return, the
        # pool is whole within 10 s.
        up = await scenario.wait_for(lambda: scenario.service.gate.state is StreamState.UP, within=60)
        strength = await scenario.wait_for(lambda: scenario.idle() == args.runners, within=60)
        watch.remove()
        scenario.check("no_execution_killed", not load.killed, len(load.killed), 0)
        released_checks(scenario, load, watch)
        scenario.check("claimed_runners_never_gone", not load.gone, load.gone[:3] or 0, "no 410")
        gate_checks(scenario, load, watch)
        scenario.check("executions_ran", load.executions > 0, load.executions, "> 0")
        scenario.check(
            "stream_up_after_s", up is not None and up <= STREAM_BACKOFF_CAP + 2, up, STREAM_BACKOFF_CAP + 2
        )
        scenario.check("pool_at_strength_after_s", strength is not None and strength <= 10, strength, 10)
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


def gate_checks(scenario: Scenario, load: Load, watch: DaemonWatch) -> None:
    """New work goes through the gate only while the stream is up, and is refused only after the
    gate's whole wait."""
    passed = [
        f"{what} at +{sent - watch.changes[0][0]:.2f}s (answered in {answered - sent:.3f}s)"
        for what, sent, answered in load.let_through
        if not watch.up_during(sent, answered)
    ]
    value = passed[:3] or len(load.let_through)
    scenario.check("let_through_only_with_the_stream_up", not passed, value, "the gate up during each")
    wait = Settings().admission.wait_timeout  # the default the daemon runs at
    early = [round(w, 2) for w in load.refused_waits if w < wait * 0.95]
    scenario.check("refused_only_after_the_gates_wait", not early, early, f">= {wait} s")


def released_checks(scenario: Scenario, load: Load, watch: DaemonWatch) -> None:
    """A runner given back is gone for good, and the load gave some back while a listing ran."""
    back = sorted(watch.back, key=watch.back.__getitem__)
    value = back[:3] or len(watch.released)
    scenario.check("released_runner_never_back_in_the_pool", not back, value, "none of the released")
    twice = sorted(runner for runner, count in load.handed_out.items() if count > 1)
    value = twice[:3] or len(load.handed_out)
    scenario.check("no_runner_handed_out_twice", not twice, value, "each once")
    given = load.released_while_listing
    scenario.check("runners_given_back_while_the_daemon_listed", given > 0, given, "> 0")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the stream flaps")
    parser.add_argument("--rate", type=float, default=10.0, help="executions a second")


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], 10, options))
