"""The simulation's checks of a promise, on their own: what they call broken and what not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import trio
from attrs import define, field

from supervisor.dst.checks import EVENT_BOUND, Checks
from supervisor.dst.faults import FaultLog
from supervisor.dst.trace import Trace
from supervisor.dst.truth import Truth
from supervisor.simulator.state.objects import SimNode
from supervisor.simulator.state.store import Write


def _checks() -> Checks:
    return Checks(cast(Any, None), FaultLog(), Trace(trio.current_time))


async def test_two_daemons_acting_at_one_write_break_promise_7_once_per_overlap() -> None:
    checks = _checks()
    checks.wrote(["daemon-1"])
    checks.wrote(["daemon-2"])  # a takeover: one at a time
    assert checks.violations == []
    checks.wrote(["daemon-1", "daemon-2"])
    checks.wrote(["daemon-1", "daemon-2"])
    checks.wrote(["daemon-2"])
    checks.wrote(["daemon-2", "daemon-1"])
    assert [v.promise for v in checks.violations] == ["7 at most one daemon acts"] * 2


async def test_what_a_client_may_try_again_is_said_in_poseidons_codes() -> None:
    assert Checks.for_now(503, '{"errorCode":"STANDBY"}')
    assert Checks.for_now(500, '{"errorCode":"NOMAD_UNREACHABLE"}')
    assert not Checks.for_now(500, '{"message":"internal error"}')
    assert not Checks.for_now(404, '{"errorCode":"STANDBY"}')


@define
class _Cluster:
    """Just what Truth reads of a cluster: its state's jobs, allocations, clock and write hooks."""

    state: _State


@define
class _State:
    time: float = 0.0
    jobs: dict[Any, Any] = field(factory=dict)
    allocs_by_job: dict[Any, Any] = field(factory=dict)
    after_write: list[Callable[[Write], None]] = field(factory=list)

    def now(self) -> float:
        return self.time

    def write(self, node: SimNode, at: float) -> None:
        self.time = at
        tx = Write("NodeDrain")
        tx.touch(node)
        for hook in self.after_write:
            hook(tx)


def test_truth_knows_since_when_a_node_drains_until_its_drain_ends() -> None:
    state = _State()
    truth = Truth(cast(Any, _Cluster(state)))
    node = SimNode("n1", "worker-01", "dc1", "10.0.0.1", "10.0.0.1:4646")
    state.write(node, 5.0)
    assert truth.drain_began("worker-01") is None
    node.drain_strategy = {"Deadline": 10**10}
    state.write(node, 7.0)
    state.write(node, 9.0)  # still draining: it began at 7
    assert truth.drain_began("worker-01") == 7.0
    node.drain_strategy = None
    state.write(node, 12.0)
    assert truth.drain_began("worker-01") is None


@define
class _DrainingTruth:
    """A truth in which every runner is alive on worker-01, which drains since ``began``."""

    began: float | None

    def is_alive(self, runner: str) -> bool:
        return True

    def node_of(self, runner: str) -> str:
        return "worker-01"

    def drain_began(self, node: str) -> float | None:
        return self.began


async def test_a_runner_on_a_node_draining_longer_than_the_event_bound_breaks_promise_2b() -> None:
    now = trio.current_time()
    checks = Checks(cast(Any, _DrainingTruth(now - EVENT_BOUND - 1.0)), FaultLog(), Trace(trio.current_time))
    checks.claimed("10-a", 10, asked=now)
    assert [v.promise for v in checks.violations] == ["2b a claimed runner's node does not drain"]


async def test_a_drain_that_began_within_the_event_bound_before_the_claim_was_asked_is_forgiven() -> None:
    now = trio.current_time()
    # The claim waited 4 s (at the gate, for its mark): the drain began 8 s before it was asked.
    checks = Checks(cast(Any, _DrainingTruth(now - 12.0)), FaultLog(), Trace(trio.current_time))
    checks.claimed("10-a", 10, asked=now - 4.0)
    assert checks.violations == []
    undrained = Checks(cast(Any, _DrainingTruth(None)), FaultLog(), Trace(trio.current_time))
    undrained.claimed("10-a", 10, asked=now)
    assert undrained.violations == []
