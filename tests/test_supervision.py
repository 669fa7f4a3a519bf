"""Restart policy as data, on trio's virtual clock: what supervise does with each kind of child."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from supervisor.base.backoff import Backoff, BackoffPolicy
from supervisor.tree.supervision import ChildSpec, Restart, RestartIntensity, supervise


class Child:
    """Reports ready, then raises (``crashes`` times) or returns."""

    def __init__(self, crashes: int = 0) -> None:
        self.starts: list[float] = []
        self.crashes = crashes

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        self.starts.append(trio.current_time())
        task_status.started("ready")
        await trio.sleep(1)
        if len(self.starts) <= self.crashes:
            raise RuntimeError(f"crash {len(self.starts)}")


def fixed_backoff() -> Backoff:
    return Backoff(BackoffPolicy(2.0, 2.0), random_fraction=lambda: 1.0)


async def test_a_crashed_child_is_restarted_after_its_backoff(autojump_clock: trio.abc.Clock) -> None:
    child, escalated = Child(crashes=2), list[str]()
    intensity = RestartIntensity(5, 30.0)
    spec = ChildSpec[None]("flaky", lambda _parts, _tier: child.run, Restart.TRANSIENT)
    async with trio.open_nursery() as nursery:
        run = partial(supervise, spec, child.run, intensity, escalated.append, backoff=fixed_backoff())
        assert await nursery.start(run) == "ready"
    assert child.starts == [0.0, 3.0, 6.0], "each crash after 1 s, each restart 2 s later"
    assert intensity.total == 2
    assert escalated == [], "a transient child that returns is done"


async def test_a_permanent_child_is_restarted_even_when_it_returns(autojump_clock: trio.abc.Clock) -> None:
    child, escalated = Child(), list[str]()
    spec = ChildSpec[None]("loop", lambda _parts, _tier: child.run, Restart.PERMANENT)
    with trio.move_on_after(10):
        await supervise(
            spec, child.run, RestartIntensity(100, 30.0), escalated.append, backoff=fixed_backoff()
        )
    assert child.starts == [0.0, 3.0, 6.0, 9.0]


async def test_a_temporary_child_stays_down(autojump_clock: trio.abc.Clock) -> None:
    child, escalated = Child(crashes=5), list[str]()
    spec = ChildSpec[None]("once", lambda _parts, _tier: child.run, Restart.TEMPORARY)
    await supervise(spec, child.run, RestartIntensity(), escalated.append)
    assert child.starts == [0.0]


async def test_past_the_intensity_the_supervisor_escalates_instead_of_restarting(
    autojump_clock: trio.abc.Clock,
) -> None:
    child, escalated = Child(crashes=100), list[str]()
    intensity = RestartIntensity(2, 30.0)
    spec = ChildSpec[None]("broken", lambda _parts, _tier: child.run)
    await supervise(spec, child.run, intensity, escalated.append, backoff=fixed_backoff())
    assert len(child.starts) == 3, "two restarts allowed, the third is one too many"
    assert escalated == ["broken kept failing"]
    assert trio.current_time() == 7.0, "the third crash, 1 s after the second restart"


async def test_restarts_spread_wider_than_the_period_are_allowed(autojump_clock: trio.abc.Clock) -> None:
    intensity = RestartIntensity(2, 10.0)
    assert [intensity.allow(t) for t in (0.0, 1.0, 20.0, 21.0, 22.0)] == [True, True, True, True, False]


async def test_a_crash_before_the_child_is_ready_reaches_the_caller() -> None:
    async def broken(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        raise RuntimeError("bad configuration")

    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="bad configuration")):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                supervise,
                ChildSpec[None]("broken", lambda _parts, _tier: broken),
                broken,
                RestartIntensity(),
                print,
            )


async def test_nothing_is_restarted_once_the_daemon_is_stopping(autojump_clock: trio.abc.Clock) -> None:
    child, escalated = Child(crashes=5), list[str]()
    stopping = trio.Event()

    async def stop_soon() -> None:
        await trio.sleep(0.5)
        stopping.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_soon)
        spec = ChildSpec[None]("api", lambda _parts, _tier: child.run)
        await supervise(spec, child.run, RestartIntensity(), escalated.append, stopping=stopping.is_set)
    assert child.starts == [0.0], "it crashed after the stop began: over"
    assert escalated == []


async def test_a_child_that_ends_before_it_is_ready_fails_its_start() -> None:
    async def quitter(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        return

    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match=r"without calling task_status\.started")):
        async with trio.open_nursery() as nursery:
            spec = ChildSpec[None]("quitter", lambda _parts, _tier: quitter)
            await nursery.start(supervise, spec, quitter, RestartIntensity(), print)


async def test_a_crash_that_meets_its_tiers_cancellation_stays_in_the_tree() -> None:
    """A child's task crashes in the very step its tier is cancelled: the child's nursery raises
    both at once; the crash is logged and the cancellation ends the tier, nothing escapes it."""
    go = trio.Event()

    async def child(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async def bomb() -> None:
            await go.wait()
            raise RuntimeError("crashed as its tier was cancelled")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(bomb)
            task_status.started()
            await trio.sleep_forever()

    spec = ChildSpec[None]("hold", lambda _parts, _tier: child, Restart.TEMPORARY)
    with trio.CancelScope() as tier:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(supervise, spec, child, RestartIntensity(), list[str]().append))
            go.set()
            tier.cancel()
    assert tier.cancelled_caught, "the cancellation reached its scope; the crash did not pass it"
