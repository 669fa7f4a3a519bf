"""What a relist promises the node tracker and the alerter: whatever came before it.

For any history of the cluster, delivered as events with duplicates, replays of older events (before
and after the listing), and lost stretches, the state after those events and a listing equals the
state built from the listing alone. The pool's own form of this property is in
``test_pool_properties.py``. The examples are kept small so that the test command stays fast; raise
``HYPOTHESIS_MAX_EXAMPLES`` to run them longer.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.core.nodes import NodeTracker
from supervisor.core.runners import PoolStats
from supervisor.effects.alerter import AlertStates
from supervisor.nomad import Node, NodeEvent, NodeListStub

EXAMPLES = settings(max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "300")), deadline=None)
NODES = ("n1", "n2", "n3")
STATUSES = ("initializing", "ready", "down", "disconnected")

# One change to a node: which node, and what it becomes (None: purged from Nomad).
changes = st.tuples(
    st.sampled_from(NODES),
    st.one_of(
        st.none(),
        st.tuples(st.sampled_from(STATUSES), st.booleans(), st.booleans(), st.booleans()),
    ),
)


def _node(node_id: str, status: str, eligible: bool, drain: bool, index: int, *, restart: bool) -> Node:
    return Node(
        id=node_id,
        name=node_id,
        status=status,
        scheduling_eligibility="eligible" if eligible else "ineligible",
        drain=drain,
        modify_index=index,
        events=[NodeEvent(message="Node re-registered" if restart else "Node heartbeat")],
    )


def _view(tracker: NodeTracker) -> dict[str, tuple[str, bool, bool]]:
    """What a listing can tell: each node's status, eligibility and drain (not its drain's deadline,
    which only the Node itself carries)."""
    return {n.id: (n.status, n.eligible, n.draining) for n in tracker.nodes.values()}


@EXAMPLES
@given(st.lists(changes, max_size=25), st.data())
def test_events_then_a_listing_leave_the_node_tracker_as_the_listing_alone(
    history: list[tuple[str, tuple[str, bool, bool, bool] | None]], data: st.DataObject
) -> None:
    cluster: dict[str, Node] = {}
    events: list[tuple[str, Node, int]] = []
    for index, (node_id, change) in enumerate(history, start=10):
        if change is None:
            cluster.pop(node_id, None)
            continue
        status, eligible, drain, restart = change
        kind = "NodeRegistration" if restart or node_id not in cluster else "NodeStreamEvent"
        cluster[node_id] = _node(node_id, status, eligible, drain, index, restart=restart)
        events.append((kind, cluster[node_id], index))
    listing_index = 10 + len(history)
    listing = [
        NodeListStub(
            id=n.id,
            name=n.name,
            status=n.status,
            scheduling_eligibility=n.scheduling_eligibility,
            drain=n.drain,
            modify_index=n.modify_index,
        )
        for n in cluster.values()
    ]

    tracker = NodeTracker()
    delivered: list[tuple[str, Node, int]] = []
    for event in events:
        for _ in range(data.draw(st.integers(0, 2), label="copies (0: lost)")):
            tracker.apply_event(*event)
            delivered.append(event)
        replay = data.draw(st.booleans(), label="replay an older event")
        if replay and delivered:
            tracker.apply_event(*data.draw(st.sampled_from(delivered)))
    tracker.replace(listing, listing_index)
    for _ in range(data.draw(st.integers(0, 3), label="replays after the listing")):
        if events:
            tracker.apply_event(*data.draw(st.sampled_from(events)))

    alone = NodeTracker()
    alone.replace(listing, listing_index)
    assert _view(tracker) == _view(alone)
    assert {n.id for n in tracker.draining_nodes()} == {n.id for n in alone.draining_nodes()}


def _stats(idle: int) -> PoolStats:
    return PoolStats(environment_id=1, size=10, idle=idle, used=0)


@EXAMPLES
@given(st.lists(st.tuples(st.floats(0.1, 50), st.integers(0, 10), st.booleans()), min_size=1, max_size=30))
def test_the_alerter_after_any_history_decides_as_from_its_last_depleted_stretch_alone(
    observations: list[tuple[float, int, bool]],
) -> None:
    """An alerter that saw everything, and one that saw only the stretch since the pool was last
    healthy, agree on every decision in that stretch: what came before a recovery is forgotten."""
    everything = AlertStates(threshold=0.5, reload_timeout=60)
    now = 0.0
    timeline = []
    for gap, idle, reload in observations:
        now += gap
        timeline.append((now, idle, reload))
    last_healthy = max((i for i, (_, idle, _) in enumerate(timeline) if idle >= 5), default=-1)
    stretch = AlertStates(threshold=0.5, reload_timeout=60)
    for i, (at, idle, reload) in enumerate(timeline):
        due = everything.update({1: _stats(idle)}, at)
        if i > last_healthy:
            assert stretch.update({1: _stats(idle)}, at) == due
        if due and reload:
            everything.reloaded(1, at)
            if i > last_healthy:
                stretch.reloaded(1, at)
    assert everything.depleting_since == stretch.depleting_since
