"""The routes a Nomad client calls beyond the supervisor's own (nomad-api.md §9): evaluations and
why a placement failed, a job's summary and versions, raft peers, regions, namespaces, the agent's
self, forced GC and node purge; registered on a server's router together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..handle import ClusterHandle, SimServer
from ..http.server import Request
from .agent_api import AgentRoutes
from .evaluations_api import EvaluationRoutes
from .job_history_api import JobHistoryRoutes
from .server_helpers import Blocking, Headers, ServerHelpers

__all__ = ["MoreRoutes"]


class MoreRoutes:
    """Every route of this module's kin, with the server's helpers."""

    def __init__(
        self,
        cluster: ClusterHandle,
        server: SimServer,
        *,
        blocking: Blocking,
        headers: Headers,
        require_leader: Callable[[Request], None],
    ) -> None:
        helpers = ServerHelpers(blocking, headers, require_leader)
        self._routes = (
            EvaluationRoutes(cluster, helpers),
            JobHistoryRoutes(cluster, helpers),
            AgentRoutes(cluster, server, helpers),
        )

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add every route to a server's router."""
        for routes in self._routes:
            routes.add_routes(add)
