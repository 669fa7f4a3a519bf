"""Permanent faults are told once, at most once a minute while they last, and once when they end;
the stream's down time runs from its loss to its return, whatever the reconnects between.

Virtual time (``autojump_clock``): every duration below is exact.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
from loguru import logger

from supervisor.base.faults import RETOLD_EVERY, FaultKind, Faults
from supervisor.base.levels import StreamState
from supervisor.informer.admission import AdmissionGate


@pytest.fixture
def told() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO")
    yield lines
    logger.remove(sink)


async def test_a_fault_is_told_once_then_once_a_minute_then_once_when_it_ends(
    told: list[str], autojump_clock: trio.testing.MockClock
) -> None:
    faults = Faults()
    kind = FaultKind.TOKEN_REFUSED
    for _ in range(100):  # a retry every half second for 50 s
        faults.report(kind, "event stream", "Nomad refuses the token", "set nomad.token")
        await trio.sleep(0.5)
    assert told == ["Nomad refuses the token; set nomad.token"]
    assert faults.holds(kind, "event stream")
    assert faults.count(kind) == 1
    await trio.sleep(RETOLD_EVERY - 50)
    faults.report(kind, "event stream", "Nomad refuses the token", "set nomad.token")
    faults.report(kind, "event stream", "Nomad refuses the token", "set nomad.token")
    assert told[1:] == ["still, for 60s: Nomad refuses the token; set nomad.token"]
    faults.clear(kind, "event stream")
    faults.clear(kind, "event stream")
    assert told[2:] == ["no longer: Nomad refuses the token (it held 60s)"]
    assert faults.active() == []
    assert faults.count(kind) == 0


async def test_a_changed_reason_is_told_at_once_and_keeps_its_start(
    told: list[str], autojump_clock: trio.testing.MockClock
) -> None:
    faults = Faults()
    kind = FaultKind.ENVIRONMENT_REFUSED
    faults.report(kind, "10", "priority out of range", "mend it")
    await trio.sleep(5)
    fault = faults.report(kind, "10", "memory too small", "mend it")
    faults.report(kind, "11", "priority out of range", "mend it")
    assert told == [
        "priority out of range; mend it",
        "memory too small; mend it",
        "priority out of range; mend it",
    ]
    assert fault.since == 0
    assert faults.count(kind) == 2
    assert [f.subject for f in faults.active()] == ["10", "11"]


async def test_the_streams_down_time_outlasts_its_reconnect_attempts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(wait_timeout=5.0)
    assert gate.down_for(trio.current_time()) == 0  # down since the start
    gate.report(StreamState.RECOVERING)
    gate.report(StreamState.UP)
    assert gate.down_for(trio.current_time()) == 0
    await trio.sleep(10)
    gate.report(StreamState.DOWN)
    for _ in range(20):  # an attempt every 2 s, each refused
        await trio.sleep(1)
        gate.report(StreamState.RECOVERING)
        await trio.sleep(1)
        gate.report(StreamState.DOWN)
    assert gate.down_for(trio.current_time()) == 40
    assert trio.current_time() - gate.since == 0, "the state itself changed just now"
    gate.report(StreamState.UP)
    assert gate.down_for(trio.current_time()) == 0
