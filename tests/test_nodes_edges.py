"""The node tracker at its edges, as plain synchronous tests: a node back for a listing, a silence
mark lifted by a report, and which agents are silent, in what order, at the exact bounds."""

from __future__ import annotations

from supervisor.core.nodes import QUICK_SILENT_SECONDS, NodeTracker
from supervisor.nomad import NodeListStub


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
