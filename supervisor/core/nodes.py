"""The drain-aware node tracker: which nodes are usable, which drain, and whose agent restarted.

Synchronous and without I/O, like the pool: it takes Node events and node listings, keeps for each
node its status, eligibility, drain strategy (with its force deadline) and the index of its last
(re)registration, and says what changed. The pool owns one and reacts to its changes.

An agent restart is seen in any of three ways (nomad-api.md §4): a ``NodeRegistration`` of a node
already known (every agent start registers again, event "Node re-registered"), a status that turns
``initializing``, or a ``down`` node that is ``ready`` again; a node that turns ``down`` (its agent
missed its heartbeats) counts too. Until something newer than that proves them, the node's runners
are suspect; once the node is ready again, a relist does.

Nomad learns that an agent is away only when its heartbeats stop for their TTL and grace (20 s or
more); until then it places new allocations there, and they wait. An exec that the server cannot
route to the agent ("no path to node") tells the daemon sooner: the tracker then marks the node
away for ``AWAY_SECONDS``, or until its agent is seen again (it registers again, an exec in one of
its runners runs, or it starts a task), and new runner jobs avoid it. An agent that has reported
nothing for a few seconds of the event stream's flow since a runner's allocation was placed on its
node, while other agents reported, is marked the same way: it is not there to receive it. Refusals
mark at most half the nodes Nomad could place on, silence any but the last.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final

from attrs import define, field, frozen

from ..nomad import Node, NodeListStub
from ..nomad.agents import AgentRoute

__all__ = [
    "AWAY_SECONDS",
    "NODE_EVENTS_KEPT",
    "QUICK_SILENT_SECONDS",
    "SILENT_SECONDS",
    "NodeChanges",
    "NodeTracker",
    "TrackedNode",
    "last_registration",
]

_REREGISTERED: Final = "Node re-registered"
# How long new runners avoid a node whose agent an exec could not reach, unless its agent is seen
# again first: Nomad's heartbeat TTL and grace on a small cluster (longer on a large one, where each
# new refusal renews the mark), after which Nomad itself places nothing on a node still away.
AWAY_SECONDS: Final = 30.0
# How long an agent may say nothing after a runner's allocation was placed on its node, by the event
# stream's flow. An agent reports an allocation once it has prepared it (its network: a bridge's
# namespace, and on a node's first such allocation the pause image) and its task begins ("Received"),
# usually within a second or two, batched every 200 ms. A report that fails (no leader) is sent again
# 5 to 10 s later, hence the longer wait when the stream paused since the placement. Silence longer
# than that, while other agents report, means it is not there; Nomad itself takes 20 s or more to tell.
QUICK_SILENT_SECONDS: Final = 5.0
SILENT_SECONDS: Final = 12.0


# How many events Nomad keeps of a node: past them, older ones are gone.
NODE_EVENTS_KEPT: Final = 10
_REGISTRATIONS: Final = ("Node registered", "Node re-registered")


def last_registration(node: Node) -> int:
    """The index of the node's last registration of its agent, from its events. When Nomad has
    dropped it (it keeps ten), the oldest event kept: the registration may be no older."""
    registered = [e.create_index for e in node.events if e.message in _REGISTRATIONS]
    if registered:
        return max(registered)
    if len(node.events) >= NODE_EVENTS_KEPT:
        return min(e.create_index for e in node.events)
    return 0


@define
class TrackedNode:
    """What the tracker knows of one node."""

    id: str
    name: str = ""
    status: str = ""
    eligible: bool = True
    draining: bool = False
    force_deadline: datetime | None = None
    http_addr: str = ""
    tls: bool = False
    # The index of the agent's last restart this tracker saw (0: none).
    restarted_at: int = 0
    # A restart whose runners wait for the node to be ready again to be proven.
    awaiting_ready: bool = False
    # The node's ModifyIndex as last seen: an older event is a replay, and changes nothing.
    modify_index: int = 0
    # The index of its agent's last registration, read from its events at the start of a term: a
    # restart this tracker did not see (0: none known).
    registered_index: int = 0
    # Until when new runners avoid the node: an exec could not reach its agent (0: not away).
    away_until: float = 0.0
    # When its agent last reported an allocation (an AllocationUpdated event), by the stream's flow.
    heard_at: float = 0.0
    # The mark (away_until) came from the agent's silence alone: any report of the agent lifts it.
    silence_mark: bool = False

    @property
    def usable(self) -> bool:
        """Runners here may take new work."""
        return self.status == "ready" and not self.draining

    @property
    def placeable(self) -> bool:
        """Nomad may place new allocations here."""
        return self.usable and self.eligible


@frozen
class NodeChanges:
    """What a node event or listing changed, for the pool to act on."""

    began_draining: tuple[str, ...] = ()
    stopped_draining: tuple[str, ...] = ()
    # Nodes whose agent restarted, with the index of the restart: their runners are suspect.
    restarted: tuple[tuple[str, int], ...] = ()
    # Restarted nodes that are ready again: a listing now can prove or dismiss their runners.
    ready_again: tuple[str, ...] = ()


def _agent_gone_or_back(previous: str, status: str) -> bool:
    """A status change that makes the node's runners suspect: its agent left, or came back."""
    if status == previous:
        return False
    return status in ("initializing", "down", "disconnected") or (previous == "down" and status == "ready")


@define
class NodeTracker:
    """Every node's status, eligibility, drain and last restart, from events and listings."""

    nodes: dict[str, TrackedNode] = field(factory=dict)
    # The index of the newest listing applied: it showed every node that existed then.
    listed_index: int = 0
    # No node is away after this time.
    _away_until: float = field(default=0.0, init=False)
    # Runners whose allocation is placed on a node and not reported by its agent yet: runner ID ->
    # (node, allocation, since when by the stream's flow).
    _waiting: dict[str, tuple[str, str, float]] = field(factory=dict, init=False)
    # Agents an exec could not connect to, by node and generation (the index of the agent's last
    # restart): the servers serve them until the node registers again. And the addresses read from
    # Nomad for nodes whose events did not say, by node and generation.
    _unreachable_agents: set[tuple[str, int]] = field(factory=set, init=False)
    _learned_addresses: dict[tuple[str, int], tuple[str, bool]] = field(factory=dict, init=False)
    # When the event stream last went on after a pause, by its flow.
    _paused_at: float = field(default=0.0, init=False)

    def draining(self, node_id: str) -> bool:
        """Whether the node drains now."""
        node = self.nodes.get(node_id)
        return node is not None and node.draining

    def registered_since(self, node_id: str, index: int) -> int:
        """The index of the node's last known registration of its agent (read at the start of the
        term, or seen since) if it came after ``index`` (its client's last write of an allocation;
        0 when unknown), else 0: a restart of which a runner adopted now carries no proof."""
        node = self.nodes.get(node_id)
        registered = max(node.registered_index, node.restarted_at) if node is not None else 0
        return registered if registered > index else 0

    def back(self, node_id: str) -> bool:
        """Whether the node is ready with no restart awaiting its return: a listing begun now can
        prove or dismiss the runners its agent's restart made suspect."""
        node = self.nodes.get(node_id)
        return node is not None and node.status == "ready" and not node.awaiting_ready

    def mark_away(self, node_id: str, now: float, *, silent: bool = False) -> bool:
        """An exec could not reach the node's agent at ``now`` (or, ``silent``, the agent said
        nothing of an allocation placed there): new runners avoid the node for ``AWAY_SECONDS`` (a
        mark already there is extended). Returns whether the node is newly avoided. A node Nomad
        places nothing on is not marked, nor the last one it could place on. An exec's refusal
        marks no node past half of those: most agents refusing at once is trouble everywhere (all
        of them restarting), and crowding new runners onto the few others would only slow their
        starts. Silence has no such bound: it counts only while other agents report, so the silent
        ones are gone, however many they are."""
        node = self.nodes.get(node_id)
        if node is None or not node.placeable:
            return False
        if node.away_until > now:
            node.away_until = now + AWAY_SECONDS
            node.silence_mark = node.silence_mark and silent
            self._away_until = max(self._away_until, node.away_until)
            return False
        placeable = [n for n in self.nodes.values() if n.placeable]
        away = sum(1 for n in placeable if n.away_until > now)
        if away + 1 >= len(placeable) or (not silent and 2 * (away + 1) > len(placeable)):
            return False
        node.away_until = now + AWAY_SECONDS
        node.silence_mark = silent
        self._away_until = max(self._away_until, node.away_until)
        return True

    def agent_reached(self, node_id: str) -> None:
        """Something its agent did since proves it reachable: new runners may go there again."""
        node = self.nodes.get(node_id)
        if node is not None:
            node.away_until = 0.0

    def heard(self, node_id: str, flowed: float) -> None:
        """The node's agent reported one of its allocations when the stream had flowed ``flowed``
        seconds (see ``silent``): it is there, and a mark its silence earned is lifted (one an
        exec's refusal earned holds: a report the agent made before that refusal may reach the
        daemon after it)."""
        node = self.nodes.get(node_id)
        if node is not None:
            node.heard_at = flowed
            if node.silence_mark:
                node.away_until, node.silence_mark = 0.0, False

    def waiting(self, runner_id: str, node_id: str, alloc_id: str, flowed: float) -> None:
        """The runner's allocation is placed on the node, and its agent has not reported it yet
        (since the stream had flowed ``flowed`` seconds, unless that allocation waited already)."""
        known = self._waiting.get(runner_id)
        if known is None or known[1] != alloc_id:
            self._waiting[runner_id] = (node_id, alloc_id, flowed)

    def reported(self, runner_id: str, alloc_id: str) -> None:
        """The agent reported the runner's allocation: it no longer waits for that agent."""
        known = self._waiting.get(runner_id)
        if known is not None and known[1] == alloc_id:
            del self._waiting[runner_id]

    def done_waiting(self, runner_id: str) -> None:
        """The runner runs, or is gone: nothing of it waits for an agent."""
        self._waiting.pop(runner_id, None)

    def stream_paused(self, flowed: float) -> None:
        """The event stream went on at ``flowed`` after a pause (it was down, or nothing was
        written: a leader's election, say), in which an agent's report may have failed."""
        self._paused_at = flowed

    def silent(self, flowed: float, now: float) -> list[str]:
        """The nodes whose agent has reported nothing for ``QUICK_SILENT_SECONDS`` of the event
        stream's flow since an allocation of a runner was placed there (``SILENT_SECONDS`` if the
        stream paused since), while another agent reported since: that agent is not there to
        receive it. Placements and reports are timed by the stream's flow (``flowed``: how far it
        has come, in seconds, where a pause counts for little), not by the clock: when nothing is
        written, a leader's election say, no agent is silent. Nodes already avoided at ``now``, or
        where Nomad places nothing, are left out; the longest silent come first."""
        first: dict[str, float] = {}
        for node_id, _, placed in self._waiting.values():
            node = self.nodes.get(node_id)
            needed = SILENT_SECONDS if placed < self._paused_at else QUICK_SILENT_SECONDS
            if flowed - placed < needed or node is None or node.heard_at > placed:
                continue
            if node.placeable and node.away_until <= now:
                first[node_id] = min(first.get(node_id, placed), placed)
        return [
            node_id
            for node_id, placed in sorted(first.items(), key=lambda item: item[1])
            if any(n.heard_at > placed for n in self.nodes.values() if n.id != node_id)
        ]

    # -- where agents listen, for exec straight to them --------------------------------------------

    def agent_route(self, node_id: str) -> AgentRoute | None:
        """The node's agent, if exec should try it: not down, and not found out of reach since it
        last registered; with the address its events gave, or the one read from Nomad."""
        node = self.nodes.get(node_id)
        if node is None:
            route = AgentRoute(node_id)
        else:
            route = AgentRoute(
                node.id, node.restarted_at, node.http_addr, node.tls, down=node.status == "down"
            )
        if route.down or (route.node_id, route.generation) in self._unreachable_agents:
            return None
        if not route.http_addr and (learned := self._learned_addresses.get((node_id, route.generation))):
            return AgentRoute(node_id, route.generation, *learned)
        return route

    def agent_learned(self, route: AgentRoute, http_addr: str, tls: bool) -> AgentRoute:
        """The address Nomad gave for the route's node, kept for this generation."""
        self._learned_addresses = {k: v for k, v in self._learned_addresses.items() if k[0] != route.node_id}
        self._learned_addresses[(route.node_id, route.generation)] = (http_addr, tls)
        return AgentRoute(route.node_id, route.generation, http_addr, tls)

    def agent_unreachable(self, route: AgentRoute) -> None:
        """The agent could not be reached: the servers serve its node until it registers again."""
        self._unreachable_agents = {k for k in self._unreachable_agents if k[0] != route.node_id}
        self._unreachable_agents.add((route.node_id, route.generation))

    def unreachable_agents(self) -> list[str]:
        """The nodes whose agent could not be reached since it last registered."""
        return sorted(node_id for node_id, _ in self._unreachable_agents)

    def avoided(self, now: float) -> tuple[str, ...]:
        """The nodes new runners avoid at ``now``: none if that would leave no usable node."""
        if self._away_until <= now:
            return ()  # no mark holds: the common case, on every claim and registration
        away = tuple(n.id for n in self.nodes.values() if n.away_until > now)
        if not away or not any(n.placeable and n.away_until <= now for n in self.nodes.values()):
            return ()
        return away

    def draining_nodes(self) -> list[TrackedNode]:
        """Every node that drains now."""
        return [n for n in self.nodes.values() if n.draining]

    def apply_event(self, event_type: str, node: Node, index: int) -> NodeChanges:
        """A Node event (``NodeRegistration``, ``NodeStreamEvent``, ``NodeDrain``, ...) at ``index``."""
        known = self.nodes.get(node.id)
        if known is not None and 0 < node.modify_index <= known.modify_index:
            return NodeChanges()  # replayed or duplicated: that state was applied already
        if known is None and index <= self.listed_index:
            return NodeChanges()  # a newer listing did not show the node: it is gone since
        # A registration is an agent's restart unless its node event says it is the node's first;
        # a replayed first registration (a stream resumed early) must not make runners suspect.
        last_message = node.events[-1].message if node.events else ""
        reregistered = event_type == "NodeRegistration" and (
            last_message == _REREGISTERED or (known is not None and not last_message)
        )
        tracked = known or TrackedNode(node.id)
        was_draining, previous_status = tracked.draining, tracked.status
        tracked.modify_index = max(tracked.modify_index, node.modify_index)
        tracked.name, tracked.http_addr = node.name, node.http_addr or tracked.http_addr
        tracked.tls = node.tls_enabled if node.http_addr else tracked.tls
        tracked.eligible = node.eligible
        tracked.draining = node.drain
        tracked.force_deadline = node.drain_strategy.force_deadline if node.drain_strategy else None
        restarted = reregistered or (
            known is not None
            and node.status != previous_status
            and _agent_gone_or_back(previous_status, node.status)
        )
        return self._changes(tracked, was_draining, node.status, restarted, index)

    def replace(
        self, listed: Iterable[NodeListStub], index: int, registered: dict[str, int] | None = None
    ) -> NodeChanges:
        """The whole set from a listing at ``index``: status, eligibility and drain of every node;
        with ``registered``, the index of each one's last registration of its agent."""
        began: list[str] = []
        stopped: list[str] = []
        restarted: list[tuple[str, int]] = []
        ready: list[str] = []
        seen: set[str] = set()
        self.listed_index = max(self.listed_index, index)
        for stub in listed:
            seen.add(stub.id)
            tracked = self.nodes.get(stub.id) or TrackedNode(stub.id)
            was_draining, previous_status = tracked.draining, tracked.status
            tracked.modify_index = max(tracked.modify_index, stub.modify_index)
            tracked.name, tracked.eligible, tracked.draining = stub.name, stub.eligible, stub.drain
            known = max(tracked.registered_index, tracked.restarted_at)
            tracked.registered_index = (registered or {}).get(stub.id, tracked.registered_index)
            # A registration newer than any known: its agent restarted while no event was seen.
            unseen = tracked.registered_index > known > 0
            came_back = bool(previous_status) and (
                _agent_gone_or_back(previous_status, stub.status) or unseen
            )
            changes = self._changes(tracked, was_draining, stub.status, came_back, index)
            began += changes.began_draining
            stopped += changes.stopped_draining
            restarted += changes.restarted
            ready += changes.ready_again
        for node_id in set(self.nodes) - seen:  # purged from Nomad
            if self.nodes.pop(node_id).draining:
                stopped.append(node_id)
        return NodeChanges(tuple(began), tuple(stopped), tuple(restarted), tuple(ready))

    def _changes(
        self, tracked: TrackedNode, was_draining: bool, status: str, restarted: bool, index: int
    ) -> NodeChanges:
        self.nodes[tracked.id] = tracked
        tracked.status = status
        restarts: tuple[tuple[str, int], ...] = ()
        if restarted:
            tracked.restarted_at = max(tracked.restarted_at, index)
            tracked.awaiting_ready = True
            restarts = ((tracked.id, index),)
        ready: tuple[str, ...] = ()
        if tracked.awaiting_ready and status == "ready":
            tracked.awaiting_ready = False
            tracked.away_until = 0.0  # its agent is back
            ready = (tracked.id,)
        return NodeChanges(
            began_draining=(tracked.id,) if tracked.draining and not was_draining else (),
            stopped_draining=(tracked.id,) if was_draining and not tracked.draining else (),
            restarted=restarts,
            ready_again=ready,
        )
