"""The runner pool as the Nomad client's ``AgentLocator``: where each allocation's agent listens is
read from the pool's view, and what the client learns of agents goes through the pool's one entry."""

from __future__ import annotations

import trio

from ..core.evidence import AgentAddressLearned, AgentUnreachable, Moment
from ..core.orders import PoolDoor
from ..nomad.agents import AgentRoute

__all__ = ["PoolAgentLocator"]


class PoolAgentLocator:
    """Routes to agents, as the pool's node tracker knows them."""

    def __init__(self, pool: PoolDoor) -> None:
        self._pool = pool

    def agent_route(self, alloc_id: str) -> AgentRoute | None:
        """The allocation's agent, if exec should try it (``PoolView.agent_route``)."""
        return self._pool.view.agent_route(alloc_id)

    def agent_learned(self, route: AgentRoute, http_addr: str, tls: bool) -> AgentRoute:
        """The address Nomad gave for the route's node, kept for this generation."""
        self._pool.handle(AgentAddressLearned(route, http_addr, tls), Moment(trio.current_time()))
        return AgentRoute(route.node_id, route.generation, http_addr, tls)

    def agent_unreachable(self, route: AgentRoute) -> None:
        """The agent could not be reached: the servers serve its node until it registers again."""
        self._pool.handle(AgentUnreachable(route), Moment(trio.current_time()))
