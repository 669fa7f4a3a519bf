"""The daemon's one source of randomness: a seed fixes every fraction and UUID it draws, and a
daemon given a seeded source names its runners from it.

The daemon test runs on the real clock, as ``tests/daemon/`` does (the simulated cluster's agents
run real processes); it waits on the pool's state, never by sleeping, and is capped by
``trio.fail_after``. The others run no trio at all.
"""

from __future__ import annotations

import uuid

import httpx
import trio

from supervisor.base.entropy import Entropy
from supervisor.base.network import MemoryNetwork
from supervisor.core.config import ServerSettings, Settings
from supervisor.core.environments import ExecutionEnvironment, new_runner_id, runner_environment_id
from supervisor.core.pool import RunnerPool
from supervisor.nomad.transport import network_transport
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

ENVIRONMENT = {
    "image": "python:3.12-slim",
    "prewarmingPoolSize": 2,
    "cpuLimit": 100,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}


def draws(entropy: Entropy, count: int = 5) -> list[float | str]:
    """Fractions and UUIDs in turn, as the daemon's parts would draw them."""
    return [entropy.fraction() if n % 2 else entropy.uuid() for n in range(2 * count)]


def test_one_seed_gives_one_sequence() -> None:
    assert draws(Entropy.seeded(7)) == draws(Entropy.seeded(7))


def test_different_seeds_give_different_sequences() -> None:
    assert draws(Entropy.seeded(7)) != draws(Entropy.seeded(8))


def test_the_process_source_never_repeats_itself() -> None:
    first, second = Entropy(), Entropy()
    assert first.uuid() != second.uuid()
    assert draws(first) != draws(second)


def test_fractions_lie_in_the_unit_interval() -> None:
    for entropy in (Entropy(), Entropy.seeded(7)):
        assert all(0.0 <= entropy.fraction() < 1.0 for _ in range(1000))


def test_uuids_are_version_4() -> None:
    for entropy in (Entropy(), Entropy.seeded(7)):
        for _ in range(100):
            text = entropy.uuid()
            parsed = uuid.UUID(text)
            assert str(parsed) == text
            assert parsed.version == 4
            assert parsed.variant == uuid.RFC_4122


def test_a_seeded_pool_names_its_runners_from_the_seed() -> None:
    environment = ExecutionEnvironment(10, "python:3.12-slim", 3, 100.0, 256, False, ())
    pool = RunnerPool(entropy=Entropy.seeded(7))
    pool.set_environment(environment)
    expected = Entropy.seeded(7)
    assert list(pool.runners) == [new_runner_id(10, expected.uuid()) for _ in range(3)]
    assert all(runner_environment_id(runner_id) == 10 for runner_id in pool.runners)


async def first_runners(seed: int) -> list[str]:
    """The runners a fresh daemon seeded with ``seed`` makes for its first environment, against a
    fresh simulated cluster on a memory network."""
    network = MemoryNetwork()
    async with trio.open_nursery() as nursery:
        cluster = await nursery.start(SimulatedCluster(SimConfig(nodes=1), network=network).run)
        daemon = Daemon(
            Settings(server=ServerSettings(port=0)),
            environ={"NOMAD_ADDR": ",".join(cluster.addresses)},
            network=network,
            entropy=Entropy.seeded(seed),
        )
        with trio.fail_after(20):
            await nursery.start(daemon.run)
            api = daemon.addresses[0] + "/api/v1"
            async with httpx.AsyncClient(base_url=api, transport=network_transport(network)) as http:
                response = await http.put("/execution-environments/10", json=ENVIRONMENT)
                assert response.status_code == 201, response.text
            assert daemon.service is not None
            runners = list(daemon.service.pool.runners)
            daemon.stop()
            await daemon.ended.wait()
        nursery.cancel_scope.cancel("the test has its runners")
    return runners


async def test_a_daemon_seeded_alike_names_its_runners_alike() -> None:
    first, again, other = await first_runners(3), await first_runners(3), await first_runners(4)
    expected = Entropy.seeded(3)
    assert first == [new_runner_id(10, expected.uuid()) for _ in range(2)]
    assert again == first
    assert set(other).isdisjoint(first)
