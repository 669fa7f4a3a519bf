"""Where each node's agent listens, for exec straight to it, as the node tracker tells it
(``NodeTracker.agent_route``, ``agent_learned``, ``agent_unreachable``): an address from the node's
events or read from Nomad, kept for one generation of the agent (its last restart), and an agent out
of reach skipped until it registers again. Plain sync tests."""

from __future__ import annotations

from typing import Any

from supervisor.core.nodes import NodeTracker
from supervisor.nomad import Node, NodeEvent
from supervisor.nomad.agents import AgentRoute


def node(status: str = "ready", message: str = "Node registered", **fields: Any) -> Node:
    return Node(id="n1", name="worker-01", status=status, events=[NodeEvent(message=message)], **fields)


def restarted(tracker: NodeTracker, index: int) -> None:
    tracker.apply_event("NodeRegistration", node("initializing", "Node re-registered"), index)
    tracker.apply_event("NodeStreamEvent", node("ready", "Node re-registered"), index + 1)


def test_a_node_s_route_carries_the_address_and_tls_its_events_gave() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", node(http_addr="10.0.0.1:4646", tls_enabled=True), 5)
    assert tracker.agent_route("n1") == AgentRoute("n1", 0, "10.0.0.1:4646", True)


def test_an_event_without_an_address_keeps_the_one_known() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", node(http_addr="10.0.0.1:4646", tls_enabled=True), 5)
    tracker.apply_event("NodeStreamEvent", node(modify_index=6), 6)
    assert tracker.agent_route("n1") == AgentRoute("n1", 0, "10.0.0.1:4646", True)


def test_a_node_never_seen_has_a_route_without_an_address() -> None:
    assert NodeTracker().agent_route("n9") == AgentRoute("n9")


def test_a_down_node_has_no_route() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", node("down", http_addr="10.0.0.1:4646"), 5)
    assert tracker.agent_route("n1") is None


def test_an_address_read_from_nomad_serves_its_generation_only() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", node(), 5)
    route = tracker.agent_route("n1")
    assert route == AgentRoute("n1", 0)
    learned = tracker.agent_learned(route, "10.0.0.2:4646", True)
    assert learned == AgentRoute("n1", 0, "10.0.0.2:4646", True)
    assert tracker.agent_route("n1") == learned
    restarted(tracker, 20)
    assert tracker.agent_route("n1") == AgentRoute("n1", 20), "a new generation: read it again"


def test_an_address_learned_again_replaces_the_older_one() -> None:
    tracker = NodeTracker()
    tracker.agent_learned(AgentRoute("n1", 0), "10.0.0.2:4646", False)
    tracker.agent_learned(AgentRoute("n1", 0), "10.0.0.3:4646", True)
    tracker.agent_learned(AgentRoute("n2", 0), "10.0.0.9:4646", False)
    assert tracker.agent_route("n1") == AgentRoute("n1", 0, "10.0.0.3:4646", True)
    assert tracker.agent_route("n2") == AgentRoute("n2", 0, "10.0.0.9:4646", False)


def test_the_address_from_the_node_s_events_wins_over_one_read_from_nomad() -> None:
    tracker = NodeTracker()
    tracker.agent_learned(AgentRoute("n1", 0), "10.0.0.2:4646", False)
    tracker.apply_event("NodeRegistration", node(http_addr="10.0.0.1:4646"), 5)
    assert tracker.agent_route("n1") == AgentRoute("n1", 0, "10.0.0.1:4646", False)


def test_an_unreachable_agent_is_skipped_until_its_node_registers_again() -> None:
    tracker = NodeTracker()
    tracker.apply_event("NodeRegistration", node(http_addr="10.0.0.1:4646"), 5)
    tracker.agent_unreachable(AgentRoute("n1", 0))
    assert tracker.agent_route("n1") is None
    assert tracker.unreachable_agents() == ["n1"]
    restarted(tracker, 20)
    assert tracker.agent_route("n1") == AgentRoute("n1", 20, "10.0.0.1:4646", False)


def test_an_agent_unreachable_again_keeps_only_its_newest_generation() -> None:
    tracker = NodeTracker()
    tracker.agent_unreachable(AgentRoute("n1", 0))
    tracker.agent_unreachable(AgentRoute("n1", 20))
    tracker.agent_unreachable(AgentRoute("n2", 3))
    assert tracker.unreachable_agents() == ["n1", "n2"]
    assert tracker.agent_route("n1") == AgentRoute("n1"), "generation 0 is reachable again"
