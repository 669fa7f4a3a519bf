"""Where each allocation's client agent listens, for exec straight to it, as Nomad's API client does.

Nomad's Go API client opens an exec session on the client agent that runs the allocation (the node's
``HTTPAddr``, over TLS when the node says so) and only when that agent cannot be reached goes through
a server, which forwards the session. A session the agent holds outlives any server's restart.

The client knows nothing of runners or nodes: the ``AgentLocator`` it is given says where an
allocation's agent listens (the runner pool, whose node tracker owns what is known of agents),
keeps the address Nomad gave for a node whose events did not say, and hears that an agent could not
be reached, so that exec goes straight to the servers until that node registers again (a new
generation): a start is delayed once per node, by the agent connect timeout, and no more.
"""

from __future__ import annotations

from typing import Protocol

from attrs import frozen

__all__ = ["AgentLocator", "AgentRoute", "NoAgents", "agent_url"]


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


class AgentLocator(Protocol):
    """Where allocations' agents listen, as the one who knows the nodes says."""

    def agent_route(self, alloc_id: str) -> AgentRoute | None:
        """The allocation's agent, if exec should try it: known, not down, not unreachable now."""
        ...

    def agent_learned(self, route: AgentRoute, http_addr: str, tls: bool) -> AgentRoute:
        """The address Nomad gave for the route's node, kept for this generation."""
        ...

    def agent_unreachable(self, route: AgentRoute) -> None:
        """The agent could not be reached: the servers serve its node until it registers again."""


class NoAgents:
    """The locator of a client that knows no runners: every exec goes through the servers."""

    def agent_route(self, alloc_id: str) -> AgentRoute | None:
        """None: no agent is known."""
        return None

    def agent_learned(self, route: AgentRoute, http_addr: str, tls: bool) -> AgentRoute:
        """The route with the address, kept nowhere."""
        return AgentRoute(route.node_id, route.generation, http_addr, tls)

    def agent_unreachable(self, route: AgentRoute) -> None:
        """Nothing to remember it in."""


def agent_url(route: AgentRoute) -> str:
    """The agent's base URL."""
    return f"{'https' if route.tls else 'http'}://{route.http_addr}"
