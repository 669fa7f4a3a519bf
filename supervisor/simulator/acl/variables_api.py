"""Nomad's Variables routes on one simulated server (``command/agent/variable_endpoint.go``):
``GET /v1/vars``, ``GET|PUT|DELETE /v1/var/:path``, and the lock operations ``PUT
/v1/var/:path?lock-acquire``, ``?lock-renew`` and ``?lock-release``.

The body is a ``structs.VariableDecrypted`` decoded as Go decodes it (``request_types``):
``Namespace``, ``Path`` (the URL's wins), ``Items`` (string to string) and ``Lock`` (``ID``, and
``TTL``/``LockDelay`` as Go duration strings such as "15s" or integer nanoseconds); a body Go
refuses is a 400 with Go's text and nothing is applied. A conflict is a 409 whose body is the
conflicting variable; a delete is a 204 with no body; a method other than GET, PUT, POST and
DELETE on ``/v1/var/…`` is a 400 ``Invalid method``. Validation errors are ``variables.py``'s.
Reads are blocking queries on the variable's ModifyIndex, the list on the variables table's index;
query options Nomad cannot parse are answered with their error and ``failed to parse parameters``
after it, as the agent writes both.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..http.filters import Getter, compile_filter
from ..http.query import QueryOptions, go_quote, parse_query
from ..http.request_types import VARIABLE_DECRYPTED, decode_request
from ..http.server import Request, Response, json_response
from ..scheduling.validation import multierror_text
from ..state.encode import variable_full, variable_metadata
from .variables import Answer

__all__ = ["VARIABLE_FIELDS", "VariableRoutes"]

Blocking = Callable[[QueryOptions, Callable[[], int]], Awaitable[int]]
Headers = Callable[[int], tuple[tuple[str, str], ...]]

VARIABLE_FIELDS: Final[Mapping[str, Getter]] = {
    "Namespace": lambda v: v.namespace,
    "Path": lambda v: v.path,
    "CreateIndex": lambda v: v.create_index,
    "ModifyIndex": lambda v: v.modify_index,
    "CreateTime": lambda v: v.create_time,
    "ModifyTime": lambda v: v.modify_time,
}
_LOCK_OPERATIONS: Final = ("lock-renew", "lock-acquire", "lock-release")
_UINT: Final = re.compile(r"[0-9]+")


def _cas(request: Request) -> int | None:
    raw = request.arg("cas")
    if not raw:
        return None
    if not _UINT.fullmatch(raw) or int(raw) >= 2**64:
        reason = "invalid syntax" if not _UINT.fullmatch(raw) else "value out of range"
        raise NomadError(400, f"can not parse cas: strconv.ParseUint: parsing {go_quote(raw)}: {reason}")
    return int(raw)


def _read_options(request: Request) -> QueryOptions:
    """The read's options; what the agent's ``parse`` refuses it answers with its own text, then
    the endpoint's ``failed to parse parameters`` written after it."""
    try:
        return parse_query(request)
    except NomadError as error:
        raise NomadError(400, f"{error.text}failed to parse parameters") from None


def _lock_id(body: dict[str, Any]) -> str:
    lock = body.get("Lock")
    return str(lock.get("ID") or "") if isinstance(lock, dict) else ""


class VariableRoutes:
    """The Variables routes; the server's blocking-query, header and leader helpers are passed in."""

    def __init__(
        self,
        cluster: ClusterHandle,
        *,
        blocking: Blocking,
        headers: Headers,
        require_leader: Callable[[Request], None],
    ) -> None:
        self.cluster = cluster
        self.variables = cluster.variables
        self._blocking = blocking
        self._headers = headers
        self._require_leader = require_leader

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add the routes to a server's router (``{path*}`` takes the rest of the URL, slashes and
        all)."""
        add("/v1/vars", "GET", self.list_variables)
        add("/v1/var/", "*", self.missing_path)
        add("/v1/var/{path*}", "GET", self.get_variable)
        add("/v1/var/{path*}", "PUT POST", self.put_variable)
        add("/v1/var/{path*}", "DELETE", self.delete_variable)
        add("/v1/var/{path*}", "*", self.invalid_method)

    def _answer(self, answer: Answer, *, lock_operation: bool = False) -> Response:
        # A lock operation's conflict is written before its index header is set: it has none.
        headers = () if lock_operation and answer.status == 409 else self._headers(answer.index)
        if answer.body is None:
            return Response(answer.status, b"", headers=headers)
        return json_response(answer.body, status=answer.status, headers=headers)

    @staticmethod
    def _namespace(request: Request, body: dict[str, Any] | None = None) -> str:
        """The body's namespace if it names one (Nomad's Apply uses it first), else the query's."""
        named = body.get("Namespace") if body else None
        return named if isinstance(named, str) and named else request.arg("namespace") or "default"

    async def missing_path(self, request: Request, params: dict[str, str]) -> Response:
        """``/v1/var/`` with no path, whatever the method."""
        raise NomadError(400, "missing variable path")

    async def invalid_method(self, request: Request, params: dict[str, str]) -> Response:
        """A method the variable endpoint does not serve: 400, not the 405 of other endpoints."""
        raise NomadError(400, "Invalid method")

    async def list_variables(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/vars``: the metadata (no items) by ``prefix``, ``filter`` and pages."""
        options = _read_options(request)
        predicate = compile_filter(options.filter, VARIABLE_FIELDS)
        index = await self._blocking(options, lambda: self.cluster.state.table_index["variables"])
        found = self.variables.listing(request.arg("namespace") or "default", options.prefix)
        if predicate is not None:
            found = [v for v in found if predicate(v)]
        headers = self._headers(index)
        if options.per_page:
            token = options.next_token
            found = [v for v in found if f"{v.namespace}.{v.path}" >= token] if token else found
            if 0 < options.per_page < len(found):
                following = found[options.per_page]
                headers += (("X-Nomad-NextToken", f"{following.namespace}.{following.path}"),)
                found = found[: options.per_page]
        return json_response([variable_metadata(v) for v in found], headers=headers)

    async def get_variable(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/var/:path``: the variable with its items and lock, or 404."""
        namespace, path = self._namespace(request), params["path"]
        state = self.cluster.state
        index = await self._blocking(
            _read_options(request),
            lambda: (
                v.modify_index
                if (v := self.variables.get(namespace, path))
                else state.table_index["variables"]
            ),
        )
        variable = self.variables.get(namespace, path)
        if variable is None:
            raise NomadError(404, "variable not found", self._headers(index))
        return json_response(variable_full(variable), headers=self._headers(index))

    async def put_variable(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT /v1/var/:path``: set the items, with ``cas``, or one lock operation; the request
        is checked and decoded by the agent (400s) before the leader applies it."""
        operations = [op for op in _LOCK_OPERATIONS if request.has_arg(op)]
        if len(operations) > 1:
            raise NomadError(400, "multiple lock operations")
        if operations and request.arg("cas"):
            raise NomadError(400, "CAS can't be used with lock operations")
        body = decode_request(request.body, VARIABLE_DECRYPTED)
        if not operations:
            return await self._upsert(request, body, params["path"])
        if operations[0] == "lock-renew":
            self._require_leader(request)
            return self._renew(request, body, params["path"])
        self._require_leader(request)
        namespace, path = self._namespace(request, body), params["path"]
        if operations[0] == "lock-acquire":
            lock = body.get("Lock") or {}
            answer = self.variables.acquire(
                namespace,
                path,
                body.get("Items") or {},
                ttl_ns=lock.get("TTL") or 0,
                lock_delay_ns=lock.get("LockDelay") or 0,
                lock_id=_lock_id(body),
            )
            return self._answer(answer, lock_operation=True)
        if not _lock_id(body):
            raise NomadError(400, "RPC Error:: 400,missing lock information")
        if body.get("Items") is not None:
            raise NomadError(400, "RPC Error:: 400,lock release operation doesn't take variable items")
        return self._answer(self.variables.release(namespace, path, _lock_id(body)), lock_operation=True)

    async def _upsert(self, request: Request, body: dict[str, Any], path: str) -> Response:
        items = body.get("Items") or {}
        if not items:
            raise NomadError(400, "variable missing required Items object")
        cas = _cas(request)
        self._require_leader(request)
        lock = body.get("Lock")
        if lock is not None and (lock["TTL"] or lock["LockDelay"]):
            refusal = "RPC Error:: 400,variable should not contain lock definition"
            raise NomadError(400, f"RPC Error:: 400,{refusal}")
        namespace = self._namespace(request, body)
        return self._answer(self.variables.upsert(namespace, path, items, lock_id=_lock_id(body), cas=cas))

    def _renew(self, request: Request, body: dict[str, Any], path: str) -> Response:
        """``?lock-renew``: addressed by the request's namespace (the query's), answered with the
        variable's metadata and no index header."""
        lock_id = _lock_id(body)
        if not lock_id:
            raise NomadError(500, multierror_text(["missing lock ID"]))
        answer = self.variables.renew(request.arg("namespace") or "default", path, lock_id)
        return json_response(answer.body)

    async def delete_variable(self, request: Request, params: dict[str, str]) -> Response:
        """``DELETE /v1/var/:path``: 204 with no body (also for a variable that does not exist), or
        a conflict."""
        cas = _cas(request)
        self._require_leader(request)
        return self._answer(self.variables.delete(self._namespace(request), params["path"], cas=cas))
