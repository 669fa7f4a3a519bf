"""The node tracker at its edges, as plain synchronous tests: a node back for a listing, a silence
mark lifted by a report, and which agents are silent, in what order, at the exact bounds."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.core.nodes import QUICK_SILENT_SECONDS, NodeChanges, NodeTracker
from supervisor.nomad import Node, NodeEvent, NodeListStub


def tracker_of(*node_ids: str) -> NodeTracker:
    tracker = NodeTracker()
    tracker.replace(
        [NodeListStub(id=n, name=n, status="ready", scheduling_eligibility="eligible") for n in node_ids], 5
    )
    return tracker


def test_a_node_is_back_when_ready_with_no_restart_awaiting_its_return() -> None:
    tracker = tracker_of("n1")
    assert tracker.back("n1")
    assert not tracker.back("unknown")
    tracker.replace([NodeListStub(id="n1", status="initializing", scheduling_eligibility="eligible")], 6)
    assert not tracker.back("n1"), "its agent came back and is not ready yet"
    tracker.replace([NodeListStub(id="n1", status="ready", scheduling_eligibility="eligible")], 7)
    assert tracker.back("n1")


def test_a_node_first_seen_initializing_is_not_back() -> None:
    tracker = NodeTracker()
    tracker.replace([NodeListStub(id="n1", status="initializing")], 5)
    assert not tracker.nodes["n1"].awaiting_ready
    assert not tracker.back("n1")


def test_a_report_lifts_a_mark_its_silence_earned_at_once() -> None:
    tracker = tracker_of("n1", "n2", "n3")
    assert tracker.mark_away("n1", 0.0, silent=True)
    assert tracker.avoided(0.5) == ("n1",)
    tracker.heard("n1", 3.0)
    assert tracker.avoided(0.5) == ()
    assert tracker.nodes["n1"].heard_at == 3.0


def test_a_silence_mark_extended_by_silence_is_still_lifted_by_a_report() -> None:
    tracker = tracker_of("n1", "n2", "n3")
    assert tracker.mark_away("n1", 0.0, silent=True)
    assert not tracker.mark_away("n1", 1.0, silent=True), "extended, not new"
    tracker.heard("n1", 3.0)
    assert tracker.avoided(2.0) == ()


def test_a_mark_an_exec_refusal_earned_holds_after_a_report() -> None:
    tracker = tracker_of("n1", "n2", "n3")
    assert tracker.mark_away("n1", 0.0, silent=True)
    assert not tracker.mark_away("n1", 1.0)
    tracker.heard("n1", 3.0)
    assert tracker.avoided(2.0) == ("n1",)


def test_an_agent_is_silent_from_its_first_waiting_placement_while_another_reports() -> None:
    tracker = tracker_of("n1", "n2", "n3")
    tracker.waiting("r1", "n1", "a1", 1.0)
    tracker.waiting("r2", "n1", "a2", 6.0)
    tracker.heard("n2", 3.0)
    assert tracker.silent(20.0, 0.0) == ["n1"], "silent since 1.0, and n2 reported after that"


def test_the_longest_silent_come_first() -> None:
    tracker = tracker_of("a", "b", "c")
    tracker.waiting("r1", "a", "a1", 2.0)
    tracker.waiting("r2", "b", "a2", 1.0)
    tracker.heard("c", 4.0)
    assert tracker.silent(20.0, 0.0) == ["b", "a"]


def test_a_report_at_the_very_moment_of_the_placement_is_not_after_it() -> None:
    tracker = tracker_of("n1", "n2", "n3")
    tracker.waiting("r1", "n1", "a1", 1.0)
    tracker.heard("n2", 1.0)
    assert tracker.silent(20.0, 0.0) == []
    tracker.heard("n2", 1.5)
    assert tracker.silent(20.0, 0.0) == ["n1"]


def test_silence_counts_from_exactly_the_quick_bound() -> None:
    tracker = tracker_of("n1", "n2", "n3")
    tracker.waiting("r1", "n1", "a1", 1.0)
    tracker.heard("n2", 2.0)
    assert tracker.silent(1.0 + QUICK_SILENT_SECONDS - 0.001, 0.0) == []
    assert tracker.silent(1.0 + QUICK_SILENT_SECONDS, 0.0) == ["n1"]


def test_a_node_whose_mark_ends_now_can_be_silent_again_and_one_skipped_does_not_hide_others() -> None:
    tracker = tracker_of("n1", "n2", "n3", "n4")
    tracker.waiting("r0", "n4", "a0", 16.0)  # too recent to count: skipped
    tracker.waiting("r1", "n1", "a1", 1.0)
    tracker.heard("n2", 2.0)
    assert tracker.mark_away("n1", 0.0, silent=True)
    away_until = tracker.nodes["n1"].away_until
    assert tracker.silent(20.0, away_until - 0.001) == [], "still avoided"
    assert tracker.silent(20.0, away_until) == ["n1"]


# -- node events and listings at their edges ----------------------------------------------------


def event_node(
    status: str, message: str | None = "Node registered", modify_index: int = 0, **fields: Any
) -> Node:
    events = [NodeEvent(message=message)] if message is not None else []
    return Node(id="n1", name="n1", status=status, events=events, modify_index=modify_index, **fields)


def test_an_event_of_an_unknown_node_at_the_index_of_the_last_listing_is_ignored() -> None:
    tracker = NodeTracker()
    tracker.replace([], 10)
    assert tracker.apply_event("NodeRegistration", event_node("ready"), 10) == NodeChanges()
    assert "n1" not in tracker.nodes
    tracker.apply_event("NodeRegistration", event_node("ready"), 11)
    assert "n1" in tracker.nodes


def test_a_first_registration_without_events_is_no_restart_and_a_known_node_s_is() -> None:
    tracker = NodeTracker()
    assert tracker.apply_event("NodeRegistration", event_node("initializing", None, 5), 5) == NodeChanges()
    changes = tracker.apply_event("NodeRegistration", event_node("initializing", None, 9), 9)
    assert changes.restarted == (("n1", 9),)


def test_a_known_node_s_first_registration_replayed_later_is_no_restart() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", event_node("ready", modify_index=5), 5)
    assert tracker.apply_event("NodeRegistration", event_node("ready", modify_index=6), 6).restarted == ()


def test_an_eligible_node_is_placeable_after_its_event() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", event_node("ready", scheduling_eligibility="eligible"), 5)
    assert tracker.nodes["n1"].placeable


def test_a_replayed_event_changes_nothing_even_at_modify_index_1() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", event_node("initializing", modify_index=1), 1)
    tracker.replace([NodeListStub(id="n1", status="ready", modify_index=1)], 5)
    assert (
        tracker.apply_event("NodeRegistration", event_node("initializing", modify_index=1), 6)
        == NodeChanges()
    )
    assert tracker.nodes["n1"].status == "ready"


def test_a_duplicated_re_registration_restarts_the_node_once() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", event_node("ready", modify_index=5), 5)
    again = event_node("initializing", "Node re-registered", 40)
    assert tracker.apply_event("NodeRegistration", again, 40).restarted == (("n1", 40),)
    assert tracker.apply_event("NodeRegistration", again, 41) == NodeChanges()


@pytest.mark.parametrize("status", ["initializing", "disconnected", "down"])
def test_an_agent_that_leaves_makes_its_node_restarted(status: str) -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", event_node("ready", modify_index=5), 5)
    assert tracker.apply_event("NodeStreamEvent", event_node(status, "x", 6), 6).restarted == (("n1", 6),)


def test_a_drain_that_ends_by_an_event_is_told() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", event_node("ready", modify_index=5), 5)
    assert tracker.apply_event("NodeDrain", event_node("ready", "x", 6, drain=True), 6).began_draining == (
        "n1",
    )
    assert tracker.apply_event("NodeDrain", event_node("ready", "x", 7), 7).stopped_draining == ("n1",)


def test_an_agent_back_ready_is_no_longer_avoided_from_that_moment() -> None:
    tracker = tracker_of("n1", "n2", "n3")
    assert tracker.mark_away("n1", 0.0)
    tracker.apply_event("NodeStreamEvent", event_node("down", "x", 30), 30)
    tracker.apply_event(
        "NodeStreamEvent", event_node("ready", "x", 31, scheduling_eligibility="eligible"), 31
    )
    assert tracker.avoided(0.5) == ()


def test_a_listing_tells_every_node_restarted_ready_again_and_purged_while_draining() -> None:
    tracker = NodeTracker()
    tracker.replace(
        [
            NodeListStub(id="a", status="ready"),
            NodeListStub(id="b", status="ready"),
            NodeListStub(id="c", status="ready", drain=True),
        ],
        5,
    )
    down = tracker.replace([NodeListStub(id="a", status="down"), NodeListStub(id="b", status="down")], 6)
    assert down.restarted == (("a", 6), ("b", 6))
    assert down.stopped_draining == ("c",), "purged from Nomad while draining"
    back = tracker.replace([NodeListStub(id="a", status="ready"), NodeListStub(id="b", status="ready")], 7)
    assert sorted(back.ready_again) == ["a", "b"]
