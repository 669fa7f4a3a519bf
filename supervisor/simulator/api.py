"""Nomad's HTTP API on one simulated server: the routes, their parameters and Nomad's answers.

Errors are ``text/plain`` with Nomad's status codes and texts (nomad-api.md §6): 400 for bad input,
403 for ACL, 404 for unknown objects, 405 ``Invalid method``, and the 500s Nomad uses for server-side
validation and while the cluster has no leader. While a fault puts the servers in trouble
(trouble.py), some requests are answered late, or 500 as a cluster in trouble answers them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import orjson
import trio

from .broker import TopicFilter
from .client_api import ExecRoute, check_token
from .encode import (
    alloc_full,
    alloc_stub,
    empty_summary,
    eval_full,
    job_full,
    job_stub,
    node_full,
    node_stub,
    summary_state,
)
from .filters import ALLOC_FIELDS, JOB_FIELDS, NODE_FIELDS, Getter, compile_filter
from .handle import ClusterHandle, SimServer
from .http import Request, Response, StreamReply, WebSocketReply, json_response, text_response
from .jobs import NomadError
from .objects import SimAlloc, SimJob
from .trouble import Verdict
from .variables_api import VariableRoutes

__all__ = ["NomadAPI", "parse_go_duration"]

_Item = TypeVar("_Item")
Handler = Callable[[Request, dict[str, str]], Awaitable[Response | StreamReply | WebSocketReply]]

_MAX_WAIT: Final = 300.0
_UNTROUBLED: Final = Verdict()
_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` for the forms Nomad clients send ("10s", "5m", "1m30s", "250ms")."""
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            raise ValueError(text)
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(text)
    return total


def _encoded_alloc_stub(alloc: SimAlloc, resources: bool, task_states: bool) -> bytes:
    """The stub's JSON, encoded once per change of the allocation: lists of 10,000 stay cheap."""
    cached = alloc.stub_cache.get((resources, task_states))
    if cached is None or cached[0] != alloc.modify_index:
        cached = (
            alloc.modify_index,
            orjson.dumps(alloc_stub(alloc, resources=resources, task_states=task_states)),
        )
        alloc.stub_cache[(resources, task_states)] = cached
    return cached[1]


def _json_list(items: list[bytes], headers: tuple[tuple[str, str], ...]) -> Response:
    return Response(200, (b"[", b",".join(items), b"]"), "application/json", headers)


class _Router:
    def __init__(self) -> None:
        self._routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = []

    def add(self, pattern: str, methods: str, handler: Handler) -> None:
        # "{name}" is one path segment; "{name*}" the rest of the path, slashes and all.
        pattern = re.sub(r"\{(\w+)\*\}", r"(?P<\1>.+)", pattern)
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")
        for existing, table in self._routes:
            if existing.pattern == regex.pattern:
                table.update(dict.fromkeys(methods.split(), handler))
                return
        self._routes.append((regex, dict.fromkeys(methods.split(), handler)))

    def match(self, method: str, path: str) -> tuple[Handler | None, dict[str, str], bool]:
        """The handler, its path parameters, and whether the path exists at all."""
        for regex, table in self._routes:
            found = regex.match(path)
            if found:
                params = {k: unquote(v) for k, v in found.groupdict().items()}
                return table.get(method), params, True
        return None, {}, False


class NomadAPI:
    """The request handler of one server."""

    def __init__(self, cluster: ClusterHandle, server: SimServer) -> None:
        self.cluster = cluster
        self.server = server
        self.state = cluster.state
        self.router = _Router()
        add = self.router.add
        add("/v1/jobs", "GET", self.list_jobs)
        add("/v1/jobs", "PUT POST", self.register_job)
        add("/v1/job/{job_id}", "GET", self.get_job)
        add("/v1/job/{job_id}", "PUT POST", self.register_job)
        add("/v1/job/{job_id}", "DELETE", self.deregister_job)
        add("/v1/job/{job_id}/allocations", "GET", self.job_allocations)
        add("/v1/allocations", "GET", self.list_allocations)
        add("/v1/allocation/{alloc_id}", "GET", self.get_allocation)
        add("/v1/allocation/{alloc_id}/stop", "PUT POST", self.stop_allocation)
        add("/v1/nodes", "GET", self.list_nodes)
        add("/v1/node/{node_id}", "GET", self.get_node)
        add("/v1/node/{node_id}/allocations", "GET", self.node_allocations)
        add("/v1/node/{node_id}/drain", "PUT POST", self.drain_node)
        add("/v1/node/{node_id}/eligibility", "PUT POST", self.node_eligibility)
        add("/v1/evaluation/{eval_id}", "GET", self.get_evaluation)
        add("/v1/status/leader", "GET", self.status_leader)
        add("/v1/event/stream", "GET", self.event_stream)
        add("/v1/client/allocation/{alloc_id}/exec", "GET", ExecRoute(cluster, forwarded_by=server.name).exec)
        VariableRoutes(
            cluster, blocking=self._blocking, headers=self._headers, require_leader=self._require_leader
        ).add_routes(add)
        cluster.control.add_routes(add)

    async def __call__(self, request: Request) -> Response | StreamReply | WebSocketReply:
        """Answer one request: route it, check the token, and turn a NomadError into Nomad's text answer."""
        handler, params, exists = self.router.match(request.method, request.path)
        if not exists:
            return text_response(404, "404 page not found")
        if handler is None:
            return text_response(405, "Invalid method")
        if (denied := check_token(self.cluster, request)) is not None:
            return denied
        trouble = self._trouble(request)
        if trouble.delay:
            await trio.sleep(trouble.delay)
        if trouble.error is not None and not trouble.applied:
            return text_response(500, trouble.error)
        try:
            reply = await handler(request, params)
        except NomadError as error:
            reply = text_response(error.status, error.text)
        if trouble.error is not None and isinstance(reply, Response) and reply.status < 300:
            reply = text_response(500, trouble.error)  # applied, and the answer lost on its way
        if isinstance(reply, Response) and self.cluster.config.response_latency > 0:
            # The answer was computed; it reaches the client this much later (network, load).
            await trio.sleep(self.cluster.config.response_latency)
        return reply

    # -- shared helpers -------------------------------------------------------------------------

    def _trouble(self, request: Request) -> Verdict:
        """What the servers' trouble (a fault) does to this request."""
        trouble = self.cluster.config.trouble
        if not trouble.windows:
            return _UNTROUBLED
        leader = self.cluster.server(self.cluster.leader or "")
        verdict = trouble.verdict(
            self.server.name,
            request.method,
            request.path,
            leader_rpc=leader.rpc_address if leader else "",
            leading=leader is self.server,
        )
        return verdict or _UNTROUBLED

    def _require_leader(self, request: Request) -> None:
        if self.cluster.leader is None and not request.has_arg("stale"):
            raise NomadError(500, "No cluster leader")

    def _headers(self, index: int) -> tuple[tuple[str, str], ...]:
        return (
            ("X-Nomad-Index", str(index)),
            ("X-Nomad-KnownLeader", "true" if self.cluster.leader else "false"),
            ("X-Nomad-LastContact", "0"),
        )

    async def _blocking(self, request: Request, current_index: Callable[[], int]) -> int:
        """Wait as a blocking query asks (``index`` > 0, ``wait``); returns the index to answer with."""
        self._require_leader(request)
        raw_index = request.arg("index", "0")
        try:
            index = int(raw_index)
        except ValueError:
            raise NomadError(400, "Invalid index") from None
        wait = _MAX_WAIT
        if request.has_arg("wait"):
            try:
                wait = min(parse_go_duration(request.arg("wait")), _MAX_WAIT)
            except ValueError:
                raise NomadError(400, "Invalid wait time") from None
        if index > 0:
            wait += self.state.rng.uniform(0, wait / 16)
            with trio.move_on_after(wait):
                while current_index() <= index:
                    await self.cluster.wait_for_write()
        return max(current_index(), 1)

    def _namespace(self, request: Request) -> str:
        return request.arg("namespace") or "default"

    @staticmethod
    def _paginate(
        request: Request, items: Iterable[_Item], key: Callable[[_Item], str], fields: Mapping[str, Getter]
    ) -> tuple[list[_Item], str]:
        """The ``filter``'s matches from ``next_token`` on, ``per_page`` of them, and the next
        token. As Nomad's paginator does, the items are read and the filter evaluated only until
        the page is full."""
        predicate = compile_filter(request.arg("filter"), fields)
        raw = request.arg("per_page")
        try:
            per_page = int(raw) if raw else 0
        except ValueError:
            raise NomadError(400, f"Failed to parse per_page: {raw}") from None
        token = request.arg("next_token") if raw else ""
        if token:
            items = (item for item in items if key(item) >= token)
        selected = iter(items) if predicate is None else (item for item in items if predicate(item))
        if per_page <= 0:
            return list(selected), ""
        page = list(itertools.islice(selected, per_page + 1))
        if len(page) <= per_page:
            return page, ""
        return page[:per_page], key(page[per_page])

    @staticmethod
    def _filtered(request: Request, items: list[_Item], fields: Mapping[str, Getter]) -> list[_Item]:
        predicate = compile_filter(request.arg("filter"), fields)
        return items if predicate is None else [item for item in items if predicate(item)]

    @staticmethod
    def _body(request: Request) -> Any:
        if not request.body.strip():
            raise NomadError(400, "Request body is empty")
        try:
            return orjson.loads(request.body)
        except orjson.JSONDecodeError as exc:
            raise NomadError(400, f"Failed to decode request body: {exc}") from None

    # -- jobs -----------------------------------------------------------------------------------

    async def list_jobs(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/jobs``: job stubs by prefix, ``meta``, ``filter`` and pages; a blocking query."""
        index = await self._blocking(request, lambda: self.state.table_index["jobs"])
        namespace, prefix = self._namespace(request), request.arg("prefix")
        jobs = sorted(
            (
                j
                for (ns, job_id), j in self.state.jobs.items()
                if (namespace == "*" or ns == namespace) and job_id.startswith(prefix)
            ),
            key=lambda j: (j.namespace, j.id),
        )
        page, next_token = self._paginate(request, jobs, lambda j: j.id, JOB_FIELDS)
        meta = request.arg("meta") in ("true", "1")
        body = [self._encoded_job_stub(j, meta) for j in page]
        headers = self._headers(index) + ((("X-Nomad-NextToken", next_token),) if next_token else ())
        return _json_list(body, headers)

    def _encoded_job_stub(self, job: SimJob, meta: bool) -> bytes:
        allocs = self.state.allocs_by_job.get((job.namespace, job.id), {})
        version = (job.modify_index, max((a.modify_index for a in allocs.values()), default=0))
        cached = job.stub_cache.get(meta)
        if cached is None or cached[0] != version:
            cached = (version, orjson.dumps(job_stub(job, self._summary(job), meta=meta)))
            job.stub_cache[meta] = cached
        return cached[1]

    def _summary(self, job: Any) -> dict[str, dict[str, int]]:
        summary = empty_summary([g.get("Name", "") for g in job.task_groups])
        for alloc in self.state.allocs_by_job.get((job.namespace, job.id), {}).values():
            group = summary.setdefault(alloc.task_group, empty_summary([alloc.task_group])[alloc.task_group])
            group[summary_state(alloc)] += 1
        return summary

    async def get_job(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/job/:id``: the full job, or 404 ``job not found``; a blocking query."""
        key = (self._namespace(request), params["job_id"])
        index = await self._blocking(
            request,
            lambda: j.modify_index if (j := self.state.jobs.get(key)) else self.state.table_index["jobs"],
        )
        job = self.state.jobs.get(key)
        if job is None:
            raise NomadError(404, "job not found")
        return json_response(job_full(job, self.cluster.config.region), headers=self._headers(index))

    async def register_job(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/jobs`` and ``/v1/job/:id``: register a job (the leader only)."""
        self._require_leader(request)
        body = self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("Job"), dict):
            raise NomadError(400, "Job must be specified")
        spec = body["Job"]
        if not spec.get("ID"):
            raise NomadError(400, "Job ID hasn't been provided")
        if "job_id" in params and spec["ID"] != params["job_id"]:
            raise NomadError(400, "Job ID does not match name")
        namespace = spec.get("Namespace") or self._namespace(request)
        result = self.cluster.jobs.register(spec, namespace)
        return json_response(result, headers=self._headers(result["Index"]))

    async def deregister_job(self, request: Request, params: dict[str, str]) -> Response:
        """``DELETE /v1/job/:id``: stop the job, or purge it; an unknown job is a 200 no-op."""
        self._require_leader(request)
        purge = request.arg("purge").lower() in ("true", "1", "t")
        result = self.cluster.jobs.deregister(self._namespace(request), params["job_id"], purge=purge)
        return json_response(result, headers=self._headers(result["Index"] or self.state.index))

    async def job_allocations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/job/:id/allocations``: the job's allocation stubs (``all`` versions)."""
        index = await self._blocking(request, lambda: self.state.table_index["allocs"])
        key = (self._namespace(request), params["job_id"])
        job = self.state.jobs.get(key)
        allocs = list(self.state.allocs_by_job.get(key, {}).values())
        if request.arg("all") not in ("true", "1") and job is not None:
            allocs = [a for a in allocs if a.create_index >= job.create_index]
        body = [alloc_stub(a, resources=False) for a in sorted(allocs, key=lambda a: a.create_index)]
        return json_response(body, headers=self._headers(index))

    # -- allocations ----------------------------------------------------------------------------

    async def list_allocations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/allocations``: allocation stubs by prefix, ``filter``, ``resources``,
        ``task_states`` and pages."""
        index = await self._blocking(request, lambda: self.state.table_index["allocs"])
        namespace, prefix = self._namespace(request), request.arg("prefix")
        by_id = self.state.allocs
        allocs = (
            a
            for a in map(by_id.__getitem__, sorted(by_id))
            if (namespace == "*" or a.namespace == namespace) and a.id.startswith(prefix)
        )
        page, next_token = self._paginate(request, allocs, lambda a: a.id, ALLOC_FIELDS)
        resources = request.arg("resources") in ("true", "1")
        task_states = request.arg("task_states") not in ("false", "0")
        body = [_encoded_alloc_stub(a, resources, task_states) for a in page]
        headers = self._headers(index) + ((("X-Nomad-NextToken", next_token),) if next_token else ())
        return _json_list(body, headers)

    def _alloc(self, alloc_id: str) -> SimAlloc:
        alloc = self.state.allocs.get(alloc_id)
        if alloc is None:
            raise NomadError(404, "alloc not found")
        return alloc

    async def get_allocation(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/allocation/:id``: the full allocation with its job, or 404 ``alloc not found``."""
        alloc_id = params["alloc_id"]
        index = await self._blocking(
            request,
            lambda: (
                a.modify_index if (a := self.state.allocs.get(alloc_id)) else self.state.table_index["allocs"]
            ),
        )
        return json_response(alloc_full(self._alloc(alloc_id), with_job=True), headers=self._headers(index))

    async def stop_allocation(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /v1/allocation/:id/stop``: stop the allocation and place a replacement."""
        self._require_leader(request)
        result = self.cluster.jobs.stop_allocation(self._alloc(params["alloc_id"]))
        return json_response(result, headers=self._headers(result["Index"]))

    # -- nodes ----------------------------------------------------------------------------------

    async def list_nodes(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/nodes``: node stubs by prefix and ``filter``; a blocking query."""
        index = await self._blocking(request, lambda: self.state.table_index["nodes"])
        prefix = request.arg("prefix")
        nodes = sorted((n for n in self.state.nodes.values() if n.id.startswith(prefix)), key=lambda n: n.id)
        nodes = self._filtered(request, nodes, NODE_FIELDS)
        body = [node_stub(n, self.cluster.config.nomad_version) for n in nodes]
        return json_response(body, headers=self._headers(index))

    def _node(self, node_id: str, *, status: int = 404) -> Any:
        node = self.state.nodes.get(node_id)
        if node is None:
            raise NomadError(status, "node not found")
        return node

    async def get_node(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/node/:id``: the full node, or 404 ``node not found``."""
        node_id = params["node_id"]
        index = await self._blocking(
            request,
            lambda: (
                n.modify_index if (n := self.state.nodes.get(node_id)) else self.state.table_index["nodes"]
            ),
        )
        return json_response(node_full(self._node(node_id)), headers=self._headers(index))

    async def node_allocations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/node/:id/allocations``: the node's full allocations."""
        index = await self._blocking(request, lambda: self.state.table_index["allocs"])
        node = self._node(params["node_id"])
        allocs = sorted(
            (a for a in self.state.allocs.values() if a.node_id == node.id), key=lambda a: a.create_index
        )
        return json_response([alloc_full(a, with_job=True) for a in allocs], headers=self._headers(index))

    async def drain_node(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/node/:id/drain``: set or cancel a drain strategy."""
        self._require_leader(request)
        body = self._body(request)
        if not isinstance(body, dict):
            raise NomadError(400, "Request body is empty")
        node = self._node(params["node_id"], status=500)
        spec = body.get("DrainSpec")
        deadline = None
        if spec is not None:
            if not isinstance(spec, dict) or not isinstance(spec.get("Deadline", 0), int):
                raise NomadError(400, "DrainSpec must be an object with an integer Deadline")
            deadline = int(spec.get("Deadline", 0))
        meta = body.get("Meta") or {}
        self.cluster.agents.drain(
            node,
            deadline_ns=deadline,
            mark_eligible=bool(body.get("MarkEligible")),
            meta=meta,
            accessor="token:anonymous",
        )
        return json_response(self._node_update(node.modify_index), headers=self._headers(node.modify_index))

    async def node_eligibility(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/node/:id/eligibility``: set scheduling eligibility (errors are 500s, as Nomad's)."""
        self._require_leader(request)
        body = self._body(request)
        node = self._node(params["node_id"], status=500)
        eligibility = body.get("Eligibility") if isinstance(body, dict) else None
        if eligibility not in ("eligible", "ineligible"):
            raise NomadError(500, f'invalid scheduling eligibility "{eligibility}"')
        if eligibility == "eligible" and node.drain_strategy is not None:
            raise NomadError(
                500, "can not set node's scheduling eligibility to eligible while it is draining"
            )
        self.cluster.agents.set_eligibility(node, eligibility == "eligible")
        return json_response(self._node_update(node.modify_index), headers=self._headers(node.modify_index))

    @staticmethod
    def _node_update(index: int) -> dict[str, Any]:
        return {"EvalCreateIndex": 0, "EvalIDs": None, "Index": index, "NodeModifyIndex": index}

    # -- evaluations and status -----------------------------------------------------------------

    async def get_evaluation(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/evaluation/:id``: the evaluation, or 404."""
        index = await self._blocking(request, lambda: self.state.table_index["evals"])
        evaluation = self.state.evals.get(params["eval_id"])
        if evaluation is None:
            raise NomadError(404, "eval not found")
        return json_response(eval_full(evaluation), headers=self._headers(index))

    async def status_leader(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/status/leader``: the leader's RPC address, or "" without one."""
        self._require_leader(request)
        leader = self.cluster.server(self.cluster.leader or "")
        return json_response(leader.rpc_address if leader else "")

    # -- the event stream -----------------------------------------------------------------------

    async def event_stream(self, request: Request, params: dict[str, str]) -> Response | StreamReply:
        """``GET /v1/event/stream``: NDJSON batches of this server's broker from ``index``, and
        heartbeats."""
        raw_index = request.arg("index", "0")
        try:
            index = int(raw_index)
        except ValueError:
            raise NomadError(
                400, f'Unable to parse index: strconv.Atoi: parsing "{raw_index}": invalid syntax'
            ) from None
        topics: dict[str, set[str]] = {}
        for value in request.args("topic"):
            parts = value.split(":")
            if len(parts) > 2:
                raise NomadError(400, f"Invalid topic query: {value}")
            topics.setdefault(parts[0], set()).add(parts[1] if len(parts) == 2 and parts[1] else "*")
        if not topics:
            topics = {"*": {"*"}}
        namespace = request.arg("namespace") or "default"
        topic_filter = TopicFilter({k: frozenset(v) for k, v in topics.items()}, frozenset({namespace}))
        subscription = self.server.broker.subscribe(topic_filter, index)
        source = self.cluster.stream_source(self.server, subscription)
        return StreamReply(source, hijack=self.cluster.config.hijacks_event_stream)
