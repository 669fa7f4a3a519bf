"""The node tracker's decisions, as plain synchronous tests: Node events and listings in, changes out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from supervisor.core.nodes import AWAY_SECONDS, QUICK_SILENT_SECONDS, SILENT_SECONDS, NodeChanges, NodeTracker
from supervisor.nomad import DrainStrategy, Node, NodeEvent, NodeListStub


def node(
    status: str = "ready", *, message: str = "Node registered", drain: bool = False, **fields: Any
) -> Node:
    return Node(
        id="n1", name="worker-01", status=status, drain=drain, events=[NodeEvent(message=message)], **fields
    )


def registered(tracker: NodeTracker) -> None:
    assert tracker.apply_event("NodeRegistration", node("initializing", modify_index=5), 5) == NodeChanges()
    assert tracker.apply_event("NodeStreamEvent", node("ready", modify_index=6), 6) == NodeChanges()


def test_a_first_registration_is_no_restart() -> None:
    tracker = NodeTracker()
    registered(tracker)
    assert tracker.nodes["n1"].usable
    assert tracker.nodes["n1"].restarted_at == 0


def test_an_agent_that_registers_again_restarted_and_is_proven_once_ready() -> None:
    tracker = NodeTracker()
    registered(tracker)
    changes = tracker.apply_event("NodeRegistration", node("initializing", message="Node re-registered"), 40)
    assert changes.restarted == (("n1", 40),)
    assert not tracker.nodes["n1"].usable, "initializing"
    assert tracker.apply_event(
        "NodeStreamEvent", node("ready", message="Node re-registered"), 41
    ) == NodeChanges(ready_again=("n1",))
    assert tracker.nodes["n1"].usable
    assert tracker.apply_event("NodeStreamEvent", node("ready"), 42) == NodeChanges(), "once"


def test_a_re_registration_of_a_node_not_seen_before_is_a_restart() -> None:
    tracker = NodeTracker()
    changes = tracker.apply_event("NodeRegistration", node("initializing", message="Node re-registered"), 9)
    assert changes.restarted == (("n1", 9),), "the daemon started after the node's first registration"


def test_a_node_that_goes_down_and_comes_back() -> None:
    tracker = NodeTracker()
    registered(tracker)
    down = tracker.apply_event("NodeStreamEvent", node("down", message="Node heartbeat missed"), 20)
    assert down.restarted == (("n1", 20),), "its runners are suspect while its agent is away"
    back = tracker.apply_event("NodeStreamEvent", node("ready", message="Node reregistered by heartbeat"), 30)
    assert back.restarted == (("n1", 30),)
    assert back.ready_again == ("n1",)
    assert tracker.nodes["n1"].restarted_at == 30


def test_drains_from_events_and_listings() -> None:
    tracker = NodeTracker()
    registered(tracker)
    deadline = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    strategy = DrainStrategy(deadline_ns=3_600_000_000_000, force_deadline=deadline)
    began = tracker.apply_event("NodeDrain", node(drain=True, drain_strategy=strategy), 50)
    assert began == NodeChanges(began_draining=("n1",))
    assert tracker.draining("n1")
    assert tracker.nodes["n1"].force_deadline == deadline
    assert not tracker.nodes["n1"].usable
    assert (
        tracker.replace([NodeListStub(id="n1", name="worker-01", status="ready", drain=True)], 51)
        == NodeChanges()
    )
    ended = tracker.replace([NodeListStub(id="n1", name="worker-01", status="ready")], 60)
    assert ended == NodeChanges(stopped_draining=("n1",))
    assert [n.id for n in tracker.draining_nodes()] == []


def test_a_listing_sees_a_node_back_from_down_and_forgets_purged_nodes() -> None:
    tracker = NodeTracker()
    tracker.replace([NodeListStub(id="n1", status="down"), NodeListStub(id="n2", status="ready")], 10)
    changes = tracker.replace([NodeListStub(id="n1", status="ready")], 20)
    assert changes.restarted == (("n1", 20),)
    assert changes.ready_again == ("n1",)
    assert set(tracker.nodes) == {"n1"}


def test_a_replayed_first_registration_is_no_restart() -> None:
    tracker = NodeTracker()
    registered(tracker)
    replayed = tracker.apply_event("NodeRegistration", node("initializing", modify_index=5), 5)
    assert replayed == NodeChanges(), "a replay of an older state changes nothing"
    assert tracker.nodes["n1"].status == "ready"


def ready(node_id: str, *, drain: bool = False) -> NodeListStub:
    return NodeListStub(id=node_id, status="ready", scheduling_eligibility="eligible", drain=drain)


def two_ready_nodes() -> NodeTracker:
    tracker = NodeTracker()
    tracker.replace([ready("n1"), ready("n2")], 3)
    return tracker


def test_a_node_whose_agent_is_out_of_reach_is_avoided_for_a_while() -> None:
    tracker = two_ready_nodes()
    assert tracker.mark_away("n1", 100.0), "newly avoided"
    assert tracker.avoided(100.0) == ("n1",)
    assert not tracker.mark_away("n1", 110.0), "already avoided: the mark is extended"
    assert tracker.avoided(110.0 + AWAY_SECONDS - 1) == ("n1",)
    assert tracker.avoided(110.0 + AWAY_SECONDS) == (), "the mark lapses"
    assert not tracker.mark_away("n9", 100.0), "an unknown node"


def test_at_most_half_the_nodes_new_runners_could_use_are_avoided() -> None:
    tracker = NodeTracker()
    tracker.replace([ready(f"n{i}") for i in range(1, 6)] + [ready("n6", drain=True)], 3)
    assert tracker.mark_away("n1", 100.0)
    assert tracker.mark_away("n2", 100.0)
    assert not tracker.mark_away("n3", 100.0), "three of five agents out of reach: trouble everywhere"
    assert not tracker.mark_away("n6", 100.0), "Nomad places nothing on a draining node anyway"
    assert tracker.avoided(100.0) == ("n1", "n2")


def test_silent_agents_are_avoided_past_half_the_nodes_but_never_the_last() -> None:
    """Silence counts only while other agents report: four of five agents silent are four gone, and
    the runners waiting on them go elsewhere."""
    tracker = NodeTracker()
    tracker.replace([ready(f"n{i}") for i in range(1, 6)], 3)
    assert tracker.mark_away("n1", 100.0)
    assert tracker.mark_away("n2", 100.0)
    assert not tracker.mark_away("n3", 100.0), "a refusal marks no node past half"
    assert tracker.mark_away("n3", 100.0, silent=True)
    assert tracker.mark_away("n4", 100.0, silent=True)
    assert not tracker.mark_away("n5", 100.0, silent=True), "the last node Nomad could place on"
    assert tracker.avoided(100.0) == ("n1", "n2", "n3", "n4")


def test_a_mark_on_a_node_nomad_no_longer_places_on_does_not_count_toward_the_bound() -> None:
    tracker = NodeTracker()
    tracker.replace([ready("n1"), ready("n2"), ready("n3")], 3)
    assert tracker.mark_away("n1", 100.0)
    tracker.replace([ready("n1", drain=True), ready("n2"), ready("n3")], 4)
    assert tracker.mark_away("n2", 100.0, silent=True), "n3 stays open"
    assert not tracker.mark_away("n3", 100.0, silent=True), "the last node Nomad could place on"


def test_the_last_node_new_runners_could_use_is_never_avoided() -> None:
    tracker = two_ready_nodes()
    assert tracker.mark_away("n1", 100.0)
    assert not tracker.mark_away("n2", 100.0), "no node would be left"
    assert tracker.avoided(100.0) == ("n1",)
    tracker.replace([ready("n1"), ready("n2", drain=True)], 4)
    assert tracker.avoided(100.0) == (), "n2 drains: avoiding n1 would leave nothing"


def test_an_agent_that_registers_again_is_no_longer_avoided() -> None:
    tracker = two_ready_nodes()
    assert tracker.mark_away("n1", 100.0)
    tracker.apply_event(
        "NodeStreamEvent",
        node("down", message="Node heartbeat missed", scheduling_eligibility="eligible"),
        20,
    )
    assert tracker.avoided(101.0) == ("n1",), "down: Nomad places nothing there either"
    tracker.apply_event(
        "NodeStreamEvent",
        node("ready", message="Node reregistered by heartbeat", scheduling_eligibility="eligible"),
        30,
    )
    assert tracker.avoided(102.0) == (), "its agent is back"


def silent_at(tracker: NodeTracker, flowed: float) -> list[str]:
    """The silent agents when the stream has flowed ``flowed`` seconds, by a clock that reads the same."""
    return tracker.silent(flowed, flowed)


def test_an_agent_silent_about_an_allocation_placed_on_its_node_while_others_report_is_found() -> None:
    tracker = two_ready_nodes()
    tracker.waiting("r1", "n1", "a1", 100.0)
    tracker.heard("n2", 101.0)
    assert silent_at(tracker, 100.0 + QUICK_SILENT_SECONDS - 0.1) == [], "not silent long enough yet"
    assert silent_at(tracker, 100.0 + QUICK_SILENT_SECONDS) == ["n1"]
    tracker.waiting("r1", "n1", "a1", 104.0)
    assert silent_at(tracker, 100.0 + QUICK_SILENT_SECONDS) == ["n1"], "a1 still waits since 100"
    tracker.reported("r1", "a0")
    assert silent_at(tracker, 100.0 + QUICK_SILENT_SECONDS) == ["n1"], "an older allocation's report"
    tracker.reported("r1", "a1")
    assert silent_at(tracker, 200.0) == [], "n1's agent reported it"


def test_after_a_pause_of_the_stream_an_agent_has_time_to_send_a_failed_report_again() -> None:
    tracker = two_ready_nodes()
    tracker.waiting("r1", "n1", "a1", 100.0)
    tracker.stream_paused(101.0)
    tracker.heard("n2", 102.0)
    assert silent_at(tracker, 100.0 + SILENT_SECONDS - 0.1) == [], "its report may have failed in the pause"
    assert silent_at(tracker, 100.0 + SILENT_SECONDS) == ["n1"]
    tracker.waiting("r2", "n1", "a2", 101.0)
    tracker.reported("r1", "a1")
    tracker.heard("n2", 103.0)
    assert silent_at(tracker, 101.0 + QUICK_SILENT_SECONDS) == ["n1"], "placed as the stream went on"


def test_an_agent_that_reported_anything_since_the_placement_is_not_silent() -> None:
    tracker = two_ready_nodes()
    tracker.waiting("r1", "n1", "a1", 100.0)
    tracker.heard("n2", 101.0)
    tracker.heard("n1", 102.0)  # another allocation's: its agent is there, a1 merely slow
    assert silent_at(tracker, 120.0) == []


def test_silence_everywhere_proves_nothing_of_one_agent() -> None:
    tracker = two_ready_nodes()
    tracker.heard("n2", 99.0)
    tracker.waiting("r1", "n1", "a1", 100.0)
    tracker.waiting("r2", "n2", "a2", 100.0)
    assert silent_at(tracker, 120.0) == [], "no agent reported since: no leader, say, to apply it"


def test_a_mark_for_silence_is_lifted_by_any_report_of_the_agent_and_one_for_a_refusal_is_not() -> None:
    tracker = two_ready_nodes()
    assert tracker.mark_away("n1", 100.0, silent=True)
    tracker.heard("n1", 101.0)
    assert tracker.avoided(101.0) == (), "it reported: its silence was not absence"
    assert tracker.mark_away("n1", 102.0)
    tracker.heard("n1", 103.0)
    assert tracker.avoided(103.0) == ("n1",), "a report it made before the refusal may arrive after it"
    assert not tracker.mark_away("n1", 104.0, silent=True)
    tracker.heard("n1", 105.0)
    assert tracker.avoided(105.0) == ("n1",), "the refusal's mark, extended, is still a refusal's"


def test_a_silent_agent_already_avoided_or_on_a_node_nomad_places_nothing_on_is_not_found_again() -> None:
    tracker = two_ready_nodes()
    tracker.waiting("r1", "n1", "a1", 100.0)
    tracker.heard("n2", 101.0)
    assert tracker.mark_away("n1", 105.0)
    assert silent_at(tracker, 110.0) == []
    tracker.replace([ready("n1", drain=True), ready("n2")], 4)
    assert silent_at(tracker, 105.0 + AWAY_SECONDS + 1) == [], "n1 drains"
