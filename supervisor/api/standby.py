"""The API of a daemon with ``[ha]``: the active term's app, or the standby's answers; and
whether a load balancer may send this daemon traffic (``GET /api/v1/health/ready``).

A health-checked load balancer sends traffic to the active daemon only: the standby answers
``GET /api/v1/health`` (and everything else but ``GET /metrics``) 503 with ``errorCode: STANDBY``
and ``Retry-After``, and refuses WebSocket upgrades the same way. ``/metrics`` is served in either
role, with the role in it, so that Prometheus keeps scraping a standby. An execution's WebSocket
that was open when its daemon stepped down stays with the app that accepted it.

``/health/ready`` is 204 only while the daemon acts and serves claims: 503 ``STANDBY`` on a standby,
``STARTING`` until the term's first listing of Nomad is reconciled (a daemon without ``[ha]`` says so
before its term has begun too), ``STOPPING`` from the moment the graceful stop begins. Unlike
``/health`` it ignores the pools and the faults: a pool that refills, or an environment Nomad
refuses, is no reason to send the daemon's traffic elsewhere (there is no other daemon that acts).
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..ops.metrics import DaemonMetrics
from .http_metrics import CountRequests, serve_metrics

__all__ = ["READY_PATH", "STANDBY_MESSAGE", "RoleSwitch", "unready"]

STANDBY_MESSAGE: Final = "this supervisor is the standby; the active one serves (HA)"
READY_PATH: Final = "/api/v1/health/ready"
_STARTING: Final = "this supervisor is starting: its first listing of Nomad is not reconciled yet"
_STOPPING: Final = "this supervisor is stopping: it takes nothing new; send requests elsewhere"


def unready(*, synced: bool, stopping: bool) -> tuple[str, str] | None:
    """Why a term's daemon is not ready for a load balancer's traffic, as ``(errorCode, message)``;
    None when it is: its first listing of Nomad is reconciled and its stop has not begun."""
    if stopping:
        return "STOPPING", _STOPPING
    if not synced:
        return "STARTING", _STARTING
    return None


class RoleSwitch:
    """An ASGI app: ``app`` while this daemon is active (set by its term), the standby's answers
    while it is None (its HTTP requests counted into ``metrics``). Without ``ha``, None means that
    the daemon's one term has not begun: ``/health/ready`` then says ``STARTING``."""

    def __init__(self, retry_after: float, metrics: DaemonMetrics, *, ha: bool = True) -> None:
        self.app: ASGIApp | None = None
        self._ha = ha
        self._retry_after = str(max(1, round(retry_after)))
        self._metrics_route = Route("/metrics", serve_metrics(metrics), methods=["GET"])
        self._standby = CountRequests(self._answer_as_standby, metrics, [self._metrics_route])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        app = self.app
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif app is not None:
            await app(scope, receive, send)
        elif scope["type"] == "http":
            await self._standby(scope, receive, send)
        elif scope["type"] == "websocket":
            await receive()  # websocket.connect
            await self._answer(send, "websocket.http.response")

    async def _answer_as_standby(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._metrics_route.matches(scope)[0] is Match.FULL:
            await self._metrics_route.handle(scope, receive, send)
        elif not self._ha and scope["path"] == READY_PATH:
            await self._answer(send, "http.response", "STARTING", _STARTING)
        else:
            await self._answer(send, "http.response")

    async def _answer(
        self, send: Send, kind: str, code: str = "STANDBY", message: str = STANDBY_MESSAGE
    ) -> None:
        body = orjson.dumps({"message": message, "errorCode": code})
        headers: list[tuple[bytes, bytes]] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", self._retry_after.encode()),
        ]
        await send({"type": f"{kind}.start", "status": 503, "headers": headers})
        await send({"type": f"{kind}.body", "body": body})

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        """The terms' apps need no startup or shutdown of their own."""
        while True:
            message: dict[str, Any] = dict(await receive())
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
