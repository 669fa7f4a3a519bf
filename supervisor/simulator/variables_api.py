"""Nomad's Variables routes on one simulated server (``command/agent/variable_endpoint.go``):
``GET /v1/vars``, ``GET|PUT|DELETE /v1/var/:path``, and the lock operations ``PUT
/v1/var/:path?lock-acquire``, ``?lock-renew`` and ``?lock-release``.

The body is a Variable as Nomad's API writes it: ``Namespace``, ``Path`` (the URL's wins), ``Items``
(string to string) and ``Lock`` (``ID``, and ``TTL``/``LockDelay`` as Go duration strings such as
"15s" or "1m30s", or integer nanoseconds). A conflict is a 409 whose body is the current variable,
the other errors are Nomad's text answers (see ``variables.py``). Reads are blocking queries on the
variable's ModifyIndex, the list on the variables table's index.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from fractions import Fraction
from typing import Any, Final

import orjson

from .encode import variable_full, variable_metadata
from .filters import Getter, compile_filter
from .handle import ClusterHandle
from .http import Request, Response, json_response
from .jobs import NomadError
from .variables import Answer

__all__ = ["VARIABLE_FIELDS", "VariableRoutes", "parse_go_duration_ns"]

Blocking = Callable[[Request, Callable[[], int]], Awaitable[int]]
Headers = Callable[[int], tuple[tuple[str, str], ...]]

VARIABLE_FIELDS: Final[Mapping[str, Getter]] = {
    "Namespace": lambda v: v.namespace,
    "Path": lambda v: v.path,
    "CreateIndex": lambda v: v.create_index,
    "ModifyIndex": lambda v: v.modify_index,
    "CreateTime": lambda v: v.create_time,
    "ModifyTime": lambda v: v.modify_time,
}
_LOCK_OPERATIONS: Final = ("lock-acquire", "lock-renew", "lock-release")
_DURATION: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_UNITS_NS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


def parse_go_duration_ns(text: str) -> int:
    """Go's ``time.ParseDuration`` in integer nanoseconds: a sign, then "1m30s", "500ms", or "0"."""
    body = text[1:] if text[:1] in ("-", "+") else text
    if body == "0":
        return 0
    total, position = Fraction(0), 0
    for match in _DURATION.finditer(body):
        if match.start() != position or match.group(1) in ("", "."):
            break
        total += Fraction(match.group(1)) * _UNITS_NS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise NomadError(400, f'time: invalid duration "{text}"')
    return -int(total) if text.startswith("-") else int(total)


def _go_kind(value: object) -> str:
    """The JSON kind Go's decoder names in its errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _decode(request: Request) -> dict[str, Any]:
    """The request's Variable, as Nomad's ``decodeBody`` reads it (errors are 400s)."""
    if not request.body.strip():
        raise NomadError(400, "Request body is empty")
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise NomadError(400, f"Failed to decode request body: {exc}") from None
    if not isinstance(body, dict):
        raise NomadError(
            400, f"json: cannot unmarshal {_go_kind(body)} into Go value of type VariableDecrypted"
        )
    return body


def _items(body: dict[str, Any]) -> dict[str, str]:
    items = body.get("Items")
    if items is None:
        return {}
    field = "Go struct field VariableDecrypted.Items"
    if not isinstance(items, dict):
        raise NomadError(400, f"json: cannot unmarshal {_go_kind(items)} into {field} of type VariableItems")
    for value in items.values():
        if not isinstance(value, str):
            raise NomadError(400, f"json: cannot unmarshal {_go_kind(value)} into {field} of type string")
    return items


def _lock(body: dict[str, Any]) -> dict[str, Any]:
    lock = body.get("Lock")
    return lock if isinstance(lock, dict) else {}


def _duration_ns(lock: dict[str, Any], name: str) -> int:
    """A lock duration as VariableLock's UnmarshalJSON reads it: a Go duration string or integer
    nanoseconds; any other JSON value leaves it unset (0, then the default)."""
    value = lock.get(name)
    if isinstance(value, str):
        return parse_go_duration_ns(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    return 0


def _cas(request: Request) -> int | None:
    raw = request.arg("cas")
    if not raw:
        return None
    if not raw.isdigit():
        raise NomadError(400, f'can not parse cas: strconv.ParseUint: parsing "{raw}": invalid syntax')
    return int(raw)


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
        add("/v1/var/", "GET PUT POST DELETE", self.missing_path)
        add("/v1/var/{path*}", "GET", self.get_variable)
        add("/v1/var/{path*}", "PUT POST", self.put_variable)
        add("/v1/var/{path*}", "DELETE", self.delete_variable)

    def _answer(self, answer: Answer) -> Response:
        headers = self._headers(answer.index)
        if answer.body is None:
            return Response(answer.status, b"", headers=headers)
        return json_response(answer.body, status=answer.status, headers=headers)

    @staticmethod
    def _namespace(request: Request, body: dict[str, Any] | None = None) -> str:
        """The body's namespace if it names one (Nomad's Apply uses it first), else the query's."""
        named = body.get("Namespace") if body else None
        return named if isinstance(named, str) and named else request.arg("namespace") or "default"

    async def missing_path(self, request: Request, params: dict[str, str]) -> Response:
        """``/v1/var/`` with no path."""
        raise NomadError(400, "missing variable path")

    async def list_variables(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/vars``: the metadata (no items) by ``prefix``, ``filter`` and pages."""
        index = await self._blocking(request, lambda: self.cluster.state.table_index["variables"])
        found = self.variables.listing(request.arg("namespace") or "default", request.arg("prefix"))
        predicate = compile_filter(request.arg("filter"), VARIABLE_FIELDS)
        if predicate is not None:
            found = [v for v in found if predicate(v)]
        headers = self._headers(index)
        raw = request.arg("per_page")
        if raw:
            try:
                per_page = int(raw)
            except ValueError:
                raise NomadError(400, f"Failed to parse per_page: {raw}") from None
            token = request.arg("next_token")
            found = [v for v in found if f"{v.namespace}.{v.path}" >= token] if token else found
            if 0 < per_page < len(found):
                following = found[per_page]
                headers += (("X-Nomad-NextToken", f"{following.namespace}.{following.path}"),)
                found = found[:per_page]
        return json_response([variable_metadata(v) for v in found], headers=headers)

    async def get_variable(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/var/:path``: the variable with its items and lock, or 404."""
        namespace, path = self._namespace(request), params["path"]
        state = self.cluster.state
        index = await self._blocking(
            request,
            lambda: (
                v.modify_index
                if (v := self.variables.get(namespace, path))
                else state.table_index["variables"]
            ),
        )
        variable = self.variables.get(namespace, path)
        if variable is None:
            raise NomadError(404, "variable not found")
        return json_response(variable_full(variable), headers=self._headers(index))

    async def put_variable(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT /v1/var/:path``: set the items, with ``cas``, or one lock operation."""
        self._require_leader(request)
        operations = [op for op in _LOCK_OPERATIONS if request.has_arg(op)]
        if len(operations) > 1:
            raise NomadError(400, "only one lock operation can be performed at a time")
        cas = _cas(request)
        if operations and cas is not None:
            raise NomadError(400, "CAS can't be used with lock operations")
        body = _decode(request)
        namespace, path = self._namespace(request, body), params["path"]
        items, lock = _items(body), _lock(body)
        raw_id = lock.get("ID")
        lock_id = raw_id if isinstance(raw_id, str) else ""
        if not operations:
            if not items:
                raise NomadError(400, "variable missing required Items object")
            return self._answer(self.variables.upsert(namespace, path, items, lock_id=lock_id, cas=cas))
        if operations[0] == "lock-acquire":
            answer = self.variables.acquire(
                namespace,
                path,
                items,
                ttl_ns=_duration_ns(lock, "TTL"),
                lock_delay_ns=_duration_ns(lock, "LockDelay"),
                lock_id=lock_id,
            )
            return self._answer(answer)
        if not lock_id:
            raise NomadError(400, "missing lock ID")
        if operations[0] == "lock-renew":
            # Renewal is addressed by the write request's namespace, the query's.
            return self._answer(self.variables.renew(self._namespace(request), path, lock_id))
        if items:
            raise NomadError(400, "lock release operation doesn't take variable items")
        return self._answer(self.variables.release(namespace, path, lock_id))

    async def delete_variable(self, request: Request, params: dict[str, str]) -> Response:
        """``DELETE /v1/var/:path``: 204 (also for a variable that does not exist), or a conflict."""
        self._require_leader(request)
        cas = _cas(request)
        return self._answer(self.variables.delete(self._namespace(request), params["path"], cas=cas))
