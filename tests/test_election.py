"""The HA election (``supervisor.tree.election``) against the simulated cluster's Nomad locks, on an
autojump clock: one holder at a time; a standby takes over at once after a release and no sooner
than the lock's lapse after a holder vanished; a holder that cannot renew steps down before its TTL
has run out since its last accepted renewal."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio
import trio.testing

from supervisor.api.standby import RoleSwitch
from supervisor.base.errors import NomadUnavailableError
from supervisor.core.config import HaSettings
from supervisor.nomad import NomadClient
from supervisor.nomad.locks import VariableLocks
from supervisor.ops.metrics import DaemonMetrics
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.election import STEP_DOWN_MARGIN, LockElector
from tests.simulator.conftest import make_client

HA = HaSettings(enabled=True, ttl=10.0, lock_delay=5.0)


@pytest.fixture
async def cluster(nursery: trio.Nursery) -> SimulatedCluster:
    started: SimulatedCluster = await nursery.start(SimulatedCluster(SimConfig(seed=5)).run)
    return started


@pytest.fixture
async def client(cluster: SimulatedCluster) -> AsyncIterator[NomadClient]:
    async with make_client(cluster) as nomad:
        yield nomad


async def test_a_standby_takes_over_at_once_when_the_active_releases(
    client: NomadClient, autojump_clock: trio.testing.MockClock
) -> None:
    active, standby = LockElector(VariableLocks(client), HA), LockElector(VariableLocks(client), HA)
    acquired = await active.acquire()
    took = trio.Event()

    async def stand_by() -> None:
        await standby.acquire()
        took.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(active.hold, acquired)
        nursery.start_soon(stand_by)
        await trio.sleep(30)
        assert not took.is_set(), "the lock is held"
        released_at = trio.current_time()
        await active.release()
        with trio.fail_after(1):
            await took.wait()
        nursery.cancel_scope.cancel()
    assert trio.current_time() - released_at < 0.5, "woken by the release, not by its next try"


async def test_a_vanished_holder_is_replaced_only_after_the_lapse_and_its_delay(
    client: NomadClient, autojump_clock: trio.testing.MockClock
) -> None:
    """The holder stops renewing (killed): Nomad's leader lets the lock lapse twice its TTL after
    the last renewal, then keeps it for LockDelay; only then may another take it."""
    gone, standby = LockElector(VariableLocks(client), HA), LockElector(VariableLocks(client), HA)
    await gone.acquire()
    vanished = trio.current_time()
    with trio.fail_after(60):
        await standby.acquire()
    waited = trio.current_time() - vanished
    assert 2 * HA.ttl + HA.lock_delay <= waited <= 2 * HA.ttl + HA.lock_delay + HA.ttl / 3 + 1, waited


class _PartitionedLocks(VariableLocks):
    """Renewals fail as they do when Nomad cannot be reached, from ``cut`` on."""

    def __init__(self, client: NomadClient) -> None:
        super().__init__(client)
        self.cut = False
        self.accepted: list[float] = []

    async def renew(self, path: str, lock_id: str) -> bool:
        if self.cut:
            await trio.sleep(3)  # a request that times out
            raise NomadUnavailableError("no answer")
        renewed = await super().renew(path, lock_id)
        self.accepted.append(trio.current_time())
        return renewed


async def test_a_holder_that_cannot_renew_steps_down_before_its_ttl_runs_out(
    client: NomadClient, autojump_clock: trio.testing.MockClock
) -> None:
    locks = _PartitionedLocks(client)
    elector = LockElector(locks, HA)
    acquired = await elector.acquire()
    reason: list[str] = []
    async with trio.open_nursery() as nursery:

        async def cut_later() -> None:
            await trio.sleep(12)
            locks.cut = True

        nursery.start_soon(cut_later)
        with trio.fail_after(60):
            reason.append(await elector.hold(acquired))
    last_sent = locks.accepted[-1]  # answered at once here, so sent then
    stepped_down = trio.current_time()
    assert stepped_down - last_sent <= HA.ttl * (1 - STEP_DOWN_MARGIN) + 0.2
    assert "no renewal" in reason[0]
    lock = await VariableLocks(client).acquire(HA.lock_path, HA.ttl, HA.lock_delay)
    assert lock is None, "Nomad still keeps the lock from everyone when the holder steps down"


async def test_a_lock_taken_by_another_ends_the_hold(
    client: NomadClient, cluster: SimulatedCluster, autojump_clock: trio.testing.MockClock
) -> None:
    elector = LockElector(VariableLocks(client), HA)
    acquired = await elector.acquire()
    variable = cluster.state.variables[("default", HA.lock_path)]
    assert variable.lock is not None
    await VariableLocks(client).release(HA.lock_path, variable.lock.id)  # an operator's release
    with trio.fail_after(10):
        assert await elector.hold(acquired) == "the HA lock was lost"


class _UnreachableWhileWaiting(VariableLocks):
    """The standby's wait for a change fails as it does when Nomad cannot be reached (a
    partition), the first few times."""

    def __init__(self, client: NomadClient) -> None:
        super().__init__(client)
        self.failures = 3

    async def wait_for_change(self, path: str, index: int, *, wait: float) -> int:
        if self.failures:
            self.failures -= 1
            raise NomadUnavailableError("Server disconnected without sending a response")
        return await super().wait_for_change(path, index, wait=wait)


async def test_a_standby_cut_off_from_nomad_keeps_waiting_for_the_lock(
    client: NomadClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A partition must not end the standby (the daemon with it): it tries again each interval."""
    active = LockElector(VariableLocks(client), HA)
    await active.acquire()
    locks = _UnreachableWhileWaiting(client)
    standby = LockElector(locks, HA)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(standby.acquire)
        await trio.sleep(3 * standby.interval + 1)
        assert locks.failures == 0, "it kept trying through every failure"
        await active.release()
        await trio.sleep(standby.interval + 1)
        assert standby.lock_id is not None, "and took the lock once it was free"
        nursery.cancel_scope.cancel()


async def test_the_standby_answers_every_route_but_get_metrics_503_standby() -> None:
    switch = RoleSwitch(retry_after=3.3, metrics=DaemonMetrics(lambda: None))
    transport = httpx.ASGITransport(app=switch)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        for method, path in [("GET", "/api/v1/health"), ("POST", "/api/v1/runners"), ("POST", "/metrics")]:
            response = await http.request(method, path)
            assert response.status_code == 503
            assert response.json()["errorCode"] == "STANDBY"
            assert response.headers["retry-after"] == "3"
