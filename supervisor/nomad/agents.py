"""Where each allocation's client agent listens, for exec straight to it, as Nomad's API client does.

Nomad's Go API client opens an exec session on the client agent that runs the allocation (the node's
``HTTPAddr``, over TLS when the node says so) and only when that agent cannot be reached goes through
a server, which forwards the session. A session the agent holds outlives any server's restart.

The directory knows nothing of runners: ``locate`` (set by whoever does) maps an allocation to its
node, with the node's generation (bumped when its agent registers again) and the address it last
advertised. An agent that could not be reached is passed over, and exec goes straight to the
servers, until its node registers again (a new generation): its start is delayed once per node, by
the agent connect timeout, and no more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from attrs import define, field, frozen

__all__ = ["AgentDirectory", "AgentRoute"]


@frozen
class AgentRoute:
    """The node an allocation runs on, as far as the caller knows it."""

    node_id: str
    # Bumped whenever the node's agent registers again; an unreachable mark lasts one generation.
    generation: int = 0
    # The agent's address as the node advertised it (``HTTPAddr``), "" when not known yet.
    http_addr: str = ""
    tls: bool = False
    # A node that is down has no agent to reach (Nomad's client does not try).
    down: bool = False


@define
class AgentDirectory:
    """The allocations' agents: their addresses, and which could not be reached this generation."""

    locate: Callable[[str], AgentRoute | None] = lambda alloc_id: None
    # Addresses read from Nomad (``GET /v1/node/:id``) for nodes whose events did not say: by node
    # and generation.
    learned: dict[tuple[str, int], tuple[str, bool]] = field(factory=dict)
    unreachable: set[tuple[str, int]] = field(factory=set)
    # Exec sessions opened on each path ("agent", "server"), and those that went to a server after
    # their agent was tried ("fallback").
    sessions: Counter[str] = field(factory=Counter)

    def route(self, alloc_id: str) -> AgentRoute | None:
        """The allocation's agent, if exec should try it: known, not down, not unreachable now."""
        route = self.locate(alloc_id)
        if route is None or route.down or (route.node_id, route.generation) in self.unreachable:
            return None
        if not route.http_addr and (learned := self.learned.get((route.node_id, route.generation))):
            return AgentRoute(route.node_id, route.generation, learned[0], learned[1])
        return route

    def learn(self, route: AgentRoute, http_addr: str, tls: bool) -> AgentRoute:
        """The address Nomad gave for the route's node, kept for this generation."""
        self.learned = {k: v for k, v in self.learned.items() if k[0] != route.node_id}
        self.learned[(route.node_id, route.generation)] = (http_addr, tls)
        return AgentRoute(route.node_id, route.generation, http_addr, tls)

    def mark_unreachable(self, route: AgentRoute) -> None:
        """The agent could not be reached: the servers serve its node until it registers again."""
        self.unreachable = {key for key in self.unreachable if key[0] != route.node_id}
        self.unreachable.add((route.node_id, route.generation))

    def url(self, route: AgentRoute) -> str:
        """The agent's base URL."""
        return f"{'https' if route.tls else 'http'}://{route.http_addr}"
