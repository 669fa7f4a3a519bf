"""The inactivity expiry: used runners idle past their timeout are destroyed at their deadline, and a
deadline set later than the loop's own wake-up does not wake it (each wake-up looks at every used
runner: a wake-up for each of thousands of claims held at once made a claim cost more the more there
were).

Virtual time (``autojump_clock``): deadlines are trio's clock's, from 0.
"""

from __future__ import annotations

import trio
import trio.testing

from supervisor.core.evidence import Moment
from supervisor.core.orders import Change, Claim, Destroy
from supervisor.core.pool import RunnerPool
from supervisor.core.pool_view import PoolView
from supervisor.core.runners import MarkUsed
from supervisor.effects.expiry import InactivityExpiry

from .test_pool import warm_pool


class _CountedView(PoolView):
    """The pool's view, counting the expiry's looks at every used runner."""

    looks = 0

    def expired(self, now: float) -> list[str]:
        self.looks += 1
        return super().expired(now)


def _claimed(pool: RunnerPool, timeout: int) -> str:
    actions = pool.handle(Claim(10, timeout), Moment(trio.current_time()))
    return next(a.runner_id for a in actions if isinstance(a, MarkUsed))


async def test_a_later_deadline_does_not_wake_the_loop_and_a_sooner_one_does(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    pool, _ = warm_pool()
    soon = _claimed(pool, timeout=100)
    view = _CountedView.sharing(pool)
    assert isinstance(view, _CountedView)
    destroyed: list[str] = []

    def tell(change: Change) -> None:
        assert isinstance(change, Destroy)
        destroyed.append(change.runner_id)
        pool.handle(change, Moment(trio.current_time()))

    expiry = InactivityExpiry(view, tell)
    await nursery.start(expiry.run)
    await trio.testing.wait_all_tasks_blocked()
    assert view.looks == 1
    late = _claimed(pool, timeout=300)
    expiry.deadline_set(300.0)
    await trio.testing.wait_all_tasks_blocked()
    assert view.looks == 1, "a deadline after the wake-up at 100 s is found then"
    expiry.deadline_set(50.0)
    await trio.testing.wait_all_tasks_blocked()
    assert view.looks == 2, "one before it is looked at now"
    await trio.sleep_until(100.0)
    await trio.testing.wait_all_tasks_blocked()
    assert destroyed == [soon]
    await trio.sleep_until(300.0)
    await trio.testing.wait_all_tasks_blocked()
    assert destroyed == [soon, late], "the later deadline, found at the wake-up before it, came"
    assert trio.current_time() == 300.0
