"""The API's side of ``/metrics``: the endpoint that serves the daemon's metrics, and an ASGI
middleware that counts each HTTP request by method, route template and status, and times it.

A request is counted by the template of the route that took it (``/api/v1/runners/{runner_id}``),
never by its path, so that a runner's ID is no series of its own: the template starlette's router
put in the scope, else (a request answered before routing, such as a 401) the first of ``routes``
that matches its path, else ``UNMATCHED``. A WebSocket is not counted: its connection lasts as long
as its execution.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..ops.metrics import CONTENT_TYPE, UNMATCHED, DaemonMetrics

__all__ = ["CountRequests", "route_template", "serve_metrics"]


def serve_metrics(metrics: DaemonMetrics) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of ``GET /metrics``: ``metrics`` in Prometheus' text format, without a token."""

    async def endpoint(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    return endpoint


def route_template(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that took (or would take) the request: see the module's docstring."""
    routed = scope.get("route")
    if isinstance(routed, Route):
        return routed.path
    for route in routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE and isinstance(route, Route):
            return route.path
    return UNMATCHED


class CountRequests:
    """An ASGI middleware: ``app``'s HTTP requests counted into ``metrics`` once answered, with the
    time from their arrival to the end of their answer on trio's clock."""

    def __init__(self, app: ASGIApp, metrics: DaemonMetrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self._metrics = metrics
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection, counting it if it is an HTTP request."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = trio.current_time()
        status = 0

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        except Exception:
            status = status or 500  # the server answers what the app left unanswered
            raise
        finally:
            # A request cancelled before its answer (the connection cut) was never answered.
            if status:
                elapsed = trio.current_time() - arrived
                self._metrics.observe_request(
                    scope["method"], route_template(scope, self._routes), status, elapsed
                )
