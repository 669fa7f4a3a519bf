"""``supervisor.nomad.locks`` against the simulated cluster, whose locks follow Nomad's semantics
(tests/simulator/test_variables.py): a held lock is None to another acquirer, a lapsed lock refuses
renewal, a release frees the lock at once, and a lock outlives a leader's restart.

Rules: trio_mode; ``autojump_clock`` where time passes, with ``trio.current_time()`` asserted and a
``trio.fail_after`` cap on the virtual clock; the cluster's servers listen on 127.0.0.1 port 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from supervisor.base.errors import NomadUnavailableError
from supervisor.nomad import NomadClient, NomadSettings, RetryPolicy
from supervisor.nomad.locks import VariableLocks
from supervisor.simulator import SimConfig, SimulatedCluster
from tests.simulator.conftest import make_client


@pytest.fixture
async def cluster(nursery: trio.Nursery) -> SimulatedCluster:
    started: SimulatedCluster = await nursery.start(SimulatedCluster(SimConfig(seed=11)).run)
    return started


@pytest.fixture
async def client(cluster: SimulatedCluster) -> AsyncIterator[NomadClient]:
    async with make_client(cluster) as nomad:
        yield nomad


@pytest.fixture
def locks(client: NomadClient) -> VariableLocks:
    return VariableLocks(client)


async def test_one_holder_at_a_time(locks: VariableLocks, cluster: SimulatedCluster) -> None:
    first = await locks.acquire("supervisor/leader", ttl=15, lock_delay=15)
    assert first is not None
    assert await locks.acquire("supervisor/leader", ttl=15, lock_delay=15) is None, "held by another"
    variable = cluster.state.variables[("default", "supervisor/leader")]
    assert variable.lock is not None
    assert variable.lock.id == first
    assert (variable.lock.ttl_ns, variable.lock.lock_delay_ns) == (15 * 10**9, 15 * 10**9)
    assert await locks.renew("supervisor/leader", first)
    await locks.release("supervisor/leader", first)
    second = await locks.acquire("supervisor/leader", ttl=15, lock_delay=15)
    assert second not in (None, first), "free at once after a release"


async def test_durations_reach_nomad_as_go_durations(locks: VariableLocks, cluster: SimulatedCluster) -> None:
    await locks.acquire("supervisor/odd", ttl=90, lock_delay=0.5)
    lock = cluster.state.variables[("default", "supervisor/odd")].lock
    assert lock is not None
    assert (lock.ttl_ns, lock.lock_delay_ns) == (90 * 10**9, 500 * 10**6)


async def test_a_lapsed_lock_is_lost_and_blocks_acquires_for_its_delay(
    autojump_clock: trio.abc.Clock, locks: VariableLocks
) -> None:
    lock_id = await locks.acquire("supervisor/lapse", ttl=10, lock_delay=20)
    assert lock_id is not None
    start = trio.current_time()
    with trio.fail_after(120):
        await trio.sleep_until(start + 19)
        assert await locks.renew("supervisor/lapse", lock_id), "Nomad's timer runs twice the TTL"
        renewed_at = trio.current_time()
        await trio.sleep_until(renewed_at + 21)
        assert not await locks.renew("supervisor/lapse", lock_id)
        assert await locks.acquire("supervisor/lapse", ttl=10, lock_delay=20) is None, "in its LockDelay"
        await trio.sleep_until(renewed_at + 41)
        assert await locks.acquire("supervisor/lapse", ttl=10, lock_delay=20) not in (None, lock_id)
    assert trio.current_time() == pytest.approx(start + 60)


async def test_release_of_a_lock_no_longer_held_is_quiet(locks: VariableLocks, client: NomadClient) -> None:
    lock_id = await locks.acquire("supervisor/gone", ttl=10, lock_delay=10)
    assert lock_id is not None
    await locks.release("supervisor/gone", "an-old-id")
    assert await locks.renew("supervisor/gone", lock_id), "a wrong release leaves the holder alone"
    await locks.release("supervisor/gone", lock_id)
    await locks.release("supervisor/gone", lock_id)
    await locks.release("supervisor/never", lock_id)
    assert not await locks.renew("supervisor/never", lock_id), "no such variable"
    assert not await locks.renew("supervisor/gone", lock_id), "released"


async def test_the_lock_outlives_a_leader_restart(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    settings = NomadSettings(
        addresses=tuple(cluster.addresses), retry=RetryPolicy(attempts=6, base_delay=1.0, max_delay=2.0)
    )
    async with NomadClient(settings, random_fraction=lambda: 0.99) as nomad:
        locks = VariableLocks(nomad)
        lock_id = await locks.acquire("supervisor/raft", ttl=10, lock_delay=10)
        assert lock_id is not None
        async with httpx.AsyncClient(base_url=cluster.addresses[1]) as http:
            await http.post(f"/sim/v1/servers/{cluster.leader}/restart", json={"downtime_s": 5})
        with trio.fail_after(60):
            await trio.sleep(0.1)
            assert await locks.renew("supervisor/raft", lock_id), "retried until a new leader answers"
        assert cluster.leader is not None
        assert await locks.acquire("supervisor/raft", ttl=10, lock_delay=10) is None


async def test_without_a_leader_the_error_is_transient(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    async with httpx.AsyncClient(base_url=cluster.addresses[1]) as http:
        await http.post(f"/sim/v1/servers/{cluster.leader}/restart", json={"downtime_s": 5})
    await trio.sleep(0.1)
    async with make_client(cluster) as nomad:
        nomad.rotate_address()
        with pytest.raises(NomadUnavailableError, match="No cluster leader"):
            await VariableLocks(nomad).acquire("supervisor/none", ttl=10, lock_delay=10)


@pytest.mark.parametrize(
    ("path", "ttl", "delay", "reason"),
    [
        ("bad path", 15.0, 15.0, "no Nomad variable path"),
        ("ok", 5.0, 15.0, "TTL lies in"),
        ("ok", 90000.0, 15.0, "TTL lies in"),
        ("ok", 15.0, -1.0, "delay is not negative"),
    ],
)
async def test_arguments_outside_nomads_bounds_are_refused_before_any_request(
    locks: VariableLocks, cluster: SimulatedCluster, path: str, ttl: float, delay: float, reason: str
) -> None:
    index = cluster.state.index
    with pytest.raises(ValueError, match=reason):
        await locks.acquire(path, ttl=ttl, lock_delay=delay)
    assert cluster.state.index == index
