"""The fault schedule: the servers' trouble and the containers lost to agents' restarts are drawn
from streams of their own, so that every seed keeps the faults it drew before; each window heals
before the quiet period and explains any failure in it."""

from __future__ import annotations

import random

import attrs
import pytest

from supervisor.dst.faults import KINDS, TROUBLE, Fault, FaultLog, plan_faults

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


@pytest.mark.parametrize("seed", range(1, 60))
def test_every_seed_keeps_its_faults_and_its_stream(seed: int) -> None:
    old, new = random.Random(seed), random.Random(seed)
    expected = schedule_before_trouble(old)
    planned = plan_faults(new, start=_START, end=_END)
    unlost = [attrs.evolve(f, lose_containers=0.0, report_delay=1.0) for f in planned]
    assert [f for f in unlost if f.kind != TROUBLE] == expected
    assert new.random() == old.random(), "what the seed draws next is what it drew before"


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
