"""The fault-injection API under ``/sim/v1``, on every simulated server's port (DESIGN.md §4.4).

It causes only what Nomad's own API cannot: agent and server restarts, the all-agents restart of the
field, a cut of every event stream, a task dying by OOM or crash, an image re-pushed under its tag.
Operators' actions (drain, eligibility, stopping jobs) go through Nomad's API. Bad input gets a 400
with a message; unknown names get a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..http.server import Request, Response, json_response
from ..state.images import ImageError

__all__ = ["ControlAPI"]


def _body(request: Request) -> dict[str, Any]:
    if not request.body.strip():
        return {}
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise NomadError(400, f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise NomadError(400, "request body must be a JSON object")
    return body


def _number(body: dict[str, Any], name: str, default: float, *, upper: float | None = None) -> float:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise NomadError(400, f"{name} must be a non-negative number, got {value!r}")
    if upper is not None and value > upper:
        raise NomadError(400, f"{name} must be at most {upper}, got {value!r}")
    return float(value)


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise NomadError(400, f"{name} must be true or false, got {value!r}")
    return value


class ControlAPI:
    """The fault-injection routes under ``/sim/v1``."""

    def __init__(self, cluster: ClusterHandle) -> None:
        self.cluster = cluster

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add the ``/sim/v1`` routes to a server's router."""
        add("/sim/v1/state", "GET", self.state)
        add("/sim/v1/nodes/restart-all", "POST", self.restart_all)
        add("/sim/v1/nodes/{name}/restart", "POST", self.restart_node)
        add("/sim/v1/nodes/{name}/http", "POST", self.agent_http)
        add("/sim/v1/servers/{name}/restart", "POST", self.restart_server)
        add("/sim/v1/streams/cut", "POST", self.cut_streams)
        add("/sim/v1/allocations/{alloc_id}/fail", "POST", self.fail_allocation)
        add("/sim/v1/images", "POST", self.push_image)

    async def state(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /sim/v1/state``."""
        return json_response(self.cluster.describe())

    async def restart_node(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /sim/v1/nodes/{name}/restart``."""
        body = _body(request)
        node = self.cluster.state.node_by_name(params["name"])
        if node is None:
            raise NomadError(404, f"no node named {params['name']!r}")
        self.cluster.agents.restarts.restart_agent(
            node,
            downtime=_number(body, "downtime_s", 10.0),
            drain_on_shutdown=_flag(body, "drain_on_shutdown"),
            drain_deadline=_number(body, "drain_deadline_s", 3600.0),
            recreate_containers=_flag(body, "recreate_containers"),
            lose_containers=_number(body, "lose_containers", 0.0, upper=1.0),
            report_delay=_number(body, "report_delay_s", 1.0),
        )
        return json_response({"node": node.name, "id": node.id})

    async def agent_http(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /sim/v1/nodes/{name}/http`` ``{"reachable": bool}``: a firewall between the
        daemon and the node's agent, or none."""
        body = _body(request)
        reachable = body.get("reachable")
        if not isinstance(reachable, bool):
            raise NomadError(400, "reachable must be true or false")
        if not await self.cluster.set_agent_reachable(params["name"], reachable):
            raise NomadError(404, f"no node named {params['name']!r}")
        return json_response({"node": params["name"], "reachable": reachable})

    async def restart_all(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /sim/v1/nodes/restart-all``."""
        body = _body(request)
        self.cluster.agents.restarts.restart_all(
            downtime=_number(body, "downtime_s", 10.0),
            lose_fraction=_number(body, "lose_fraction", 0.0, upper=1.0),
            lose_containers=_number(body, "lose_containers", 0.0, upper=1.0),
            report_delay=_number(body, "report_delay_s", 1.0),
        )
        return json_response({"nodes": len(self.cluster.state.nodes)})

    async def restart_server(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /sim/v1/servers/{name}/restart``."""
        body = _body(request)
        if self.cluster.server(params["name"]) is None:
            raise NomadError(404, f"no server named {params['name']!r}")
        was_leader = self.cluster.leader == params["name"]
        self.cluster.restart_server(params["name"], downtime=_number(body, "downtime_s", 5.0))
        return json_response({"server": params["name"], "was_leader": was_leader})

    async def cut_streams(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /sim/v1/streams/cut``."""
        return json_response({"cut": self.cluster.cut_streams()})

    async def fail_allocation(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /sim/v1/allocations/{id}/fail``."""
        body = _body(request)
        reason = body.get("reason", "crash")
        if reason not in ("oom", "crash"):
            raise NomadError(400, f'reason must be "oom" or "crash", got {reason!r}')
        alloc = self.cluster.state.allocs.get(params["alloc_id"])
        if alloc is None:
            raise NomadError(404, "alloc not found")
        try:
            self.cluster.agents.fail(alloc, reason)
        except ValueError as exc:
            raise NomadError(409, str(exc)) from None
        return json_response({"allocation": alloc.id, "reason": reason})

    async def push_image(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /sim/v1/images`` ``{"image": "name:tag", "digest": "sha256:..."}``: the tag now
        points to that digest; nodes keep what they pulled until a task pulls again."""
        body = _body(request)
        unknown = sorted(set(body) - {"image", "digest"})
        if unknown:
            raise NomadError(400, f'unknown field {unknown[0]!r}: the body is {{"image", "digest"}}')
        try:
            reference, previous, digest = self.cluster.state.images.push(
                body.get("image"), body.get("digest")
            )
        except ImageError as exc:
            raise NomadError(400, str(exc)) from None
        return json_response({"image": reference, "previous": previous, "digest": digest})
