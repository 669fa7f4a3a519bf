"""The fault schedule: the servers' trouble, the containers lost to agents' restarts, a pair's
partitions and the kills at a claim's answer are drawn from streams of their own, so that every
seed keeps the faults it drew before; each window heals before the quiet period and explains any
failure in it."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing
from attrs import define, field

from supervisor.base.network import MemoryNetwork
from supervisor.dst.faults import (
    CLAIM_KILL,
    KINDS,
    PARTITION,
    TROUBLE,
    Fault,
    FaultLog,
    plan_faults,
    run_faults,
)
from supervisor.dst.partition import MODES, PartitionableNetwork
from supervisor.dst.trace import Trace
from supervisor.simulator.state.objects import SimNode

_START, _END = 25.0, 210.0


def schedule_before_trouble(rng: random.Random) -> list[Fault]:
    """plan_faults as it was before the servers' trouble."""
    faults = []
    for _ in range(rng.randrange(2, 13)):
        at = round(rng.uniform(_START, _END - 30.0), 3)
        kind = rng.choice(KINDS)
        duration = round(min(rng.uniform(1.0, 40.0), _END - at - 5.0), 3)
        faults.append(Fault(at, kind, rng.randrange(1000), duration, round(rng.random(), 3)))
    return sorted(faults, key=lambda f: f.at)


@pytest.mark.parametrize("pair", [False, True])
@pytest.mark.parametrize("seed", range(1, 60))
def test_every_seed_keeps_its_faults_and_its_stream(seed: int, pair: bool) -> None:
    old, new = random.Random(seed), random.Random(seed)
    expected = schedule_before_trouble(old)
    planned = plan_faults(new, start=_START, end=_END, pair=pair)
    unlost = [attrs.evolve(f, lose_containers=0.0, report_delay=1.0) for f in planned]
    assert [f for f in unlost if f.kind not in (TROUBLE, PARTITION, CLAIM_KILL)] == expected
    assert new.random() == old.random(), "what the seed draws next is what it drew before"


def test_a_pair_keeps_the_faults_a_single_daemon_draws_and_adds_partitions() -> None:
    for seed in range(1, 100):
        single = plan_faults(random.Random(seed), start=_START, end=_END)
        pair = plan_faults(random.Random(seed), start=_START, end=_END, pair=True)
        assert [f for f in pair if f.kind != PARTITION] == single
        assert not any(f.kind == PARTITION for f in single)


def test_a_pairs_partitions_often_outlast_the_takeover_and_heal_in_time() -> None:
    outlasting, partitions = 0, 0
    for seed in range(1, 200):
        planned = [f for f in plan_faults(random.Random(seed), start=_START, end=_END, pair=True)]
        cuts = [f for f in planned if f.kind == PARTITION]
        assert 1 <= len(cuts) <= 2
        for fault in cuts:
            partitions += 1
            assert fault.cut in MODES
            assert fault.at >= _START
            assert fault.at + fault.duration <= _END - 5.0
            assert 5.0 <= fault.duration <= 60.0 or fault.at + fault.duration == _END - 5.0
            assert f"cut={fault.cut}" in fault.describe()
            # Takeover: the standby's lock once the active's lapsed (2 x TTL + LockDelay = 25 s).
            outlasting += fault.duration > 27.0 and fault.fraction < 0.75
    assert outlasting / partitions > 0.3


def test_every_seed_kills_a_daemon_at_a_claims_answer_once_or_twice_in_time() -> None:
    for seed in range(1, 200):
        kills = [f for f in plan_faults(random.Random(seed), start=_START, end=_END) if f.kind == CLAIM_KILL]
        assert 1 <= len(kills) <= 2
        for fault in kills:
            # Armed for 20 s at most, then back after its downtime: before the quiet period.
            assert _START <= fault.at <= _END - 30.0
            assert 1.0 <= fault.duration <= 10.0


def test_a_partition_explains_any_failure_in_it_and_its_aftermath() -> None:
    log = FaultLog()
    log.add(PARTITION, 100.0, 140.0)
    assert log.explains("worker-01", 120.0, 121.0) is not None
    assert log.explains("", 165.0, 166.0) is not None
    assert log.explains("worker-01", 171.0, 180.0) is None


def test_trouble_is_drawn_in_some_seeds_and_heals_in_time() -> None:
    troubled = 0
    for seed in range(1, 200):
        windows = [f for f in plan_faults(random.Random(seed), start=_START, end=_END) if f.kind == TROUBLE]
        troubled += bool(windows)
        for fault in windows:
            assert fault.trouble is not None
            assert fault.at >= _START
            assert fault.at + fault.duration <= _END - 5.0
            assert fault.duration == fault.trouble.duration <= 30.0
            assert fault.trouble.errors or fault.trouble.slow
            assert not fault.trouble.applied or fault.trouble.errors, "applied only where 500s are"
            assert "errors=" in fault.describe()
    assert 0.4 < troubled / 199 < 0.9


def test_the_same_seed_draws_the_same_trouble() -> None:
    first = plan_faults(random.Random(11), start=_START, end=_END)
    assert first == plan_faults(random.Random(11), start=_START, end=_END)


def test_a_window_of_trouble_explains_any_failure_in_it_and_its_aftermath() -> None:
    log = FaultLog()
    log.add(TROUBLE, 100.0, 110.0)
    assert log.explains("worker-01", 105.0, 106.0) is not None
    assert log.explains("worker-02", 135.0, 139.0) is not None
    assert log.explains("worker-02", 141.0, 150.0) is None


def test_some_agent_restarts_come_back_to_containers_gone_and_write_so_late() -> None:
    lost = 0
    for seed in range(1, 100):
        for fault in plan_faults(random.Random(seed), start=_START, end=_END):
            if fault.lose_containers:
                lost += 1
                assert fault.kind in ("agent_restart", "agent_drain_restart", "rolling_agents", "all_agents")
                assert 0.2 <= fault.lose_containers <= 1.0
                assert 0.5 <= fault.report_delay <= 15.0
                assert "lose_containers=" in fault.describe()
    assert lost >= 50, "about half of the agents' restarts, in 99 seeds"


@define(eq=False)
class _Slot:
    running: bool = True


@define(eq=False)
class _World:
    """What a kill at a claim's answer uses of the world: its hook, and a daemon's kill and start."""

    cluster: Any
    on_claim_answered: Callable[[Any], None] | None = None
    done: list[tuple[str, float]] = field(factory=list)

    def claim_answered(self, slot: _Slot) -> None:
        if self.on_claim_answered is not None:
            self.on_claim_answered(slot)

    def kill(self, slot: _Slot) -> None:
        slot.running = False
        self.done.append(("kill", trio.current_time()))

    async def start(self, slot: _Slot) -> None:
        await trio.lowlevel.checkpoint()
        slot.running = True
        self.done.append(("start", trio.current_time()))


def _world() -> _World:
    node = SimNode("n1", "worker-01", "dc1", "10.0.0.1", "10.0.0.1:4646")
    return _World(SimpleNamespace(agents=None, state=SimpleNamespace(nodes={node.id: node})))


async def test_a_kill_at_a_claims_answer_kills_the_daemon_that_answered_the_first_claim_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    world, slot, log = _world(), _Slot(), FaultLog()

    async def claims() -> None:
        world.claim_answered(slot)  # before the fault: nothing
        await trio.sleep(5.0)
        world.claim_answered(slot)
        world.claim_answered(slot)  # the same daemon's next answer, killed already
        await trio.sleep(10.0)
        world.claim_answered(slot)  # the fault is spent

    async with trio.open_nursery() as nursery:
        nursery.start_soon(claims)
        faults = [Fault(1.0, CLAIM_KILL, 0, 3.0)]
        nursery.start_soon(run_faults, cast(Any, world), faults, log, Trace(trio.current_time))
    assert world.done == [("kill", 5.0), ("start", 8.0)]
    assert log.active("daemon_kill", 7.0) is not None, "promise 3 knows the daemon was killed"


async def test_a_kill_at_a_claims_answer_that_meets_no_claim_is_disarmed_in_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    world, slot, log = _world(), _Slot(), FaultLog()
    with trio.fail_after(30.0):
        await run_faults(cast(Any, world), [Fault(1.0, CLAIM_KILL, 0, 3.0)], log, Trace(trio.current_time))
    assert trio.current_time() == 21.0
    world.claim_answered(slot)
    assert world.done == []


@define(eq=False)
class _PairSlot:
    network: PartitionableNetwork = field(factory=lambda: PartitionableNetwork(MemoryNetwork()))


@define(eq=False)
class _Pair:
    cluster: Any
    slots: list[_PairSlot] = field(factory=lambda: [_PairSlot(), _PairSlot()])

    def active_slot(self) -> _PairSlot:
        return self.slots[0]


async def test_a_partition_cuts_one_daemon_off_at_a_time_and_heals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pair, log = _Pair(_world().cluster), FaultLog()
    cuts = [Fault(1.0, PARTITION, 0, 30.0, 0.1, cut="hang"), Fault(10.0, PARTITION, 0, 30.0, 0.9, cut="fail")]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_faults, cast(Any, pair), cuts, log, Trace(trio.current_time))
        await trio.sleep(20.0)
        assert [s.network.mode for s in pair.slots] == ["hang", None], "the active; the standby spared"
    assert [s.network.mode for s in pair.slots] == [None, None]
    assert log.active(PARTITION, 25.0) is not None
    assert log.active(PARTITION, 5.0) is not None
