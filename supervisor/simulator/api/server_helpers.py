"""What a simulated server lends the routes other modules register on it: its blocking query, the
query-meta headers (``X-Nomad-Index``, ``X-Nomad-KnownLeader``, ``X-Nomad-LastContact``), and the
leader check of writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from attrs import frozen

from ..http.errors import NomadError
from ..http.query import QueryOptions, parse_query
from ..http.server import Request

__all__ = ["Blocking", "Headers", "ServerHelpers"]

Blocking = Callable[[QueryOptions, Callable[[], int]], Awaitable[int]]
Headers = Callable[[int], tuple[tuple[str, str], ...]]


@frozen
class ServerHelpers:
    """The server's helpers, as its router hands them out."""

    blocking: Blocking
    headers: Headers
    require_leader: Callable[[Request], None]

    async def read(self, request: Request, current_index: Callable[[], int]) -> tuple[QueryOptions, int]:
        """A read's options, parsed as Nomad's agent parses them, once the blocking query (if
        any) has returned; and the index to answer with."""
        options = parse_query(request)
        return options, await self.blocking(options, current_index)

    def not_found(self, text: str, index: int) -> NomadError:
        """A read's 404: the query's meta headers are set before it, as Nomad's ``setMeta`` is."""
        return NomadError(404, text, self.headers(index))
