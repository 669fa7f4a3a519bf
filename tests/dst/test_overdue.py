"""Promises 8 and 9's deadlines: a due end's slack, moved past every fault window in its way."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.dst.faults import FaultLog
from supervisor.dst.overdue import BOUND, Overdue, _Due, execution_id_of
from supervisor.dst.walk_away import walk_away_drawn


class _Truth:
    def node_of(self, runner: str) -> str:
        return "worker-01"


def overdue(log: FaultLog) -> Overdue:
    truth: Any = _Truth()
    return Overdue(truth, log, lambda promise, details: None)


def test_the_execution_id_comes_from_its_websocket_url() -> None:
    url = "ws://127.0.0.1:7200/api/v1/runners/10-x/websocket?executionID=abc-123"
    assert execution_id_of(url) == "abc-123"
    assert execution_id_of("ws://127.0.0.1:7200/api/v1/runners/10-x/websocket") == ""


def test_without_a_fault_the_deadline_is_the_slack_away() -> None:
    assert overdue(FaultLog()).deadline(_Due("e", "10-r", 100.0, BOUND)) == 100.0 + BOUND


def test_a_fault_in_the_way_moves_the_deadline_past_its_window_and_its_aftermath() -> None:
    log = FaultLog()
    log.add("daemon_kill", 102.0, 110.0)  # its window ends 30 s after it heals
    log.add("agent_restart", 160.0, 170.0, nodes=frozenset({"worker-01"}))
    log.add("agent_restart", 100.0, 300.0, nodes=frozenset({"worker-02"}))  # another node's
    deadline = overdue(log).deadline(_Due("e", "10-r", 100.0, 25.0))
    assert deadline == pytest.approx(170.0 + 30.0 + 25.0), "each window in the way moves it again"


def test_a_fault_before_the_end_or_after_the_deadline_moves_nothing() -> None:
    log = FaultLog()
    log.add("server_restart", 10.0, 20.0)
    log.add("server_restart", 200.0, 210.0)
    assert overdue(log).deadline(_Due("e", "10-r", 100.0, BOUND)) == 100.0 + BOUND


def test_a_tenth_of_the_uses_walk_away_the_same_way_each_time() -> None:
    drawn = [walk_away_drawn(7, "s1", use) for use in range(0, 2000, 2)]
    walks = [walk for walk in drawn if walk is not None]
    assert 0.07 < len(walks) / len(drawn) < 0.13
    assert drawn == [walk_away_drawn(7, "s1", use) for use in range(0, 2000, 2)]
    assert all(0.2 <= w.cut_after <= 3.0 and 0.5 <= w.think <= 20.0 for w in walks)
