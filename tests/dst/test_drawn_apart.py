"""The faults drawn apart, each from a stream of its own: stalled streams (clear of the faults that
end runners, healed before the quiet period) and graceful stops (back before it)."""

from __future__ import annotations

import random

from supervisor.dst.faults import KINDS, plan_faults
from supervisor.dst.graceful_stop import GracefulStopFault, plan_graceful_stops
from supervisor.dst.stalls import STALL, plan_stalls

_START, _END = 25.0, 210.0
_ENDS_RUNNERS = {
    k
    for k in KINDS
    if k not in ("server_restart", "leader_restart", "stream_cut", "stream_flapping", "daemon_kill")
}


def test_a_stall_takes_nothing_from_the_seeds_own_draws() -> None:
    for seed in range(1, 40):
        rng = random.Random(seed)
        faults = plan_faults(rng, start=_START, end=_END)
        after = rng.random()
        plan_stalls(seed, faults, servers=3, start=_START, end=_END)
        again = random.Random(seed)
        assert plan_faults(again, start=_START, end=_END) == faults
        assert again.random() == after


def test_stalls_outlast_the_heartbeat_deadline_heal_in_time_and_keep_clear_of_runner_faults() -> None:
    stalled = 0
    for seed in range(1, 200):
        faults = plan_faults(random.Random(seed), start=_START, end=_END)
        stalls = plan_stalls(seed, faults, servers=3, start=_START, end=_END)
        assert stalls == plan_stalls(seed, faults, servers=3, start=_START, end=_END), "the same draws"
        assert not plan_stalls(seed, faults, servers=1, start=_START, end=_END), "no server to move to"
        stalled += bool(stalls)
        for stall in stalls:
            assert stall.kind == STALL
            assert 45.0 + 10.0 < stall.duration <= 120.0
            assert stall.at >= _START
            assert stall.at + stall.duration <= _END - 5.0
            for fault in faults:
                if fault.kind in _ENDS_RUNNERS:
                    assert fault.at + fault.duration + 40.0 < stall.at or fault.at > stall.at + 60.0
    assert 0.05 < stalled / 199 < 0.5


def test_graceful_stops_are_drawn_apart_and_leave_time_to_come_back() -> None:
    stopped = 0
    for seed in range(1, 200):
        stops = plan_graceful_stops(seed, start=_START, end=_END)
        assert stops == plan_graceful_stops(seed, start=_START, end=_END)
        stopped += bool(stops)
        for stop in stops:
            assert isinstance(stop, GracefulStopFault)
            assert _START <= stop.at <= _END - 40.0, "its budget (15 s) and downtime end in time"
            assert 1 <= stop.executions <= 3
            assert stop.exec_delay > 2.0 + 0.5, "stopping its commands outlasts the budget"
            assert "executions=" in stop.describe()
    assert 0.3 < stopped / 199 < 0.7
