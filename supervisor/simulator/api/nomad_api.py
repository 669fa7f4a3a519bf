"""Nomad's HTTP API on one simulated server: the routes, their parameters and Nomad's answers.

Errors are ``text/plain`` with Nomad's status codes and texts (nomad-api.md §6 and §9): 400 for bad
input, 403 for ACL, 404 for unknown objects (with the query's index headers, as Nomad sets them
first), 405 ``Invalid method``, and the 500s Nomad uses for server-side validation and while the
cluster has no leader. Query parameters are read with Go's parsers (``query.py``), bodies decoded as
Go decodes them before anything else (``request_types.py``), and a job is canonicalized and
validated as Nomad's server does it (``jobs.py``). While a fault puts the servers in trouble
(trouble.py), some requests are answered late, or 500 as a cluster in trouble answers them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import orjson
import trio

from ..acl.capabilities import AclRoutes
from ..acl.variables_api import VariableRoutes
from ..agents.client_api import ExecRoute, check_token
from ..handle import ClusterHandle, SimServer
from ..http.errors import NomadError
from ..http.filters import ALLOC_FIELDS, JOB_FIELDS, NODE_FIELDS, Predicate, compile_filter
from ..http.query import QueryOptions, go_parse_bool, go_quote, parse_query, query_bool, query_int
from ..http.request_types import (
    JOB_REGISTER_REQUEST,
    NODE_UPDATE_DRAIN_REQUEST,
    NODE_UPDATE_ELIGIBILITY_REQUEST,
    decode_request,
)
from ..http.server import Request, Response, StreamReply, WebSocketReply, json_response, text_response
from ..http.trouble import Verdict
from ..state.broker import TopicFilter
from ..state.encode import (
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
from ..state.objects import SimAlloc, SimJob
from .jobspec_api import JobspecRoutes
from .more_api import MoreRoutes

__all__ = ["NomadAPI"]

_Item = TypeVar("_Item")
Handler = Callable[[Request, dict[str, str]], Awaitable[Response | StreamReply | WebSocketReply]]

_MAX_WAIT: Final = 300.0
# The refusals of a write that the leader's RPC makes (not the agent's own, which parse the request).
_REFUSED_BY_THE_LEADER: Final = re.compile(
    r"^\d+ errors? occurred:|^Enforcing job modify index|scheduling eligibility|^node not found$"
)
_ATOI: Final = re.compile(r"[+-]?[0-9]+")
_UNTROUBLED: Final = Verdict()


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
                return table.get(method) or table.get("*"), params, True
        return None, {}, False


class NomadAPI:
    """The request handler of one server."""

    def __init__(self, cluster: ClusterHandle, server: SimServer) -> None:
        self.cluster = cluster
        self.server = server
        self.state = cluster.state
        self.config = cluster.config
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
        MoreRoutes(
            cluster,
            server,
            blocking=self._blocking,
            headers=self._headers,
            require_leader=self._require_leader,
        ).add_routes(add)
        cluster.control.add_routes(add)
        AclRoutes(cluster).add_routes(add)
        JobspecRoutes(cluster).add_routes(add)

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
            text = self._as_forwarded(request, error.text) if error.status == 500 else error.text
            reply = Response(error.status, text.encode(), headers=error.headers)
        if trouble.error is not None and isinstance(reply, Response) and reply.status < 300:
            reply = text_response(500, trouble.error)  # applied, and the answer lost on its way
        if isinstance(reply, Response) and self.config.response_latency > 0:
            # The answer was computed; it reaches the client this much later (network, load).
            await trio.sleep(self.config.response_latency)
        return reply

    # -- shared helpers -------------------------------------------------------------------------

    def _trouble(self, request: Request) -> Verdict:
        """What the servers' trouble (a fault) does to this request."""
        trouble = self.config.trouble
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

    def _as_forwarded(self, request: Request, text: str) -> str:
        """A follower forwards a write to the leader, whose refusal comes back as an RPC error:
        Nomad's connection pool prefixes it (``helper/pool``), and the agent answers it as it is."""
        leader = self.cluster.leader
        if request.method == "GET" or leader is None or leader == self.server.name:
            return text
        return f"rpc error: {text}" if _REFUSED_BY_THE_LEADER.search(text) else text

    def _require_leader(self, request: Request) -> None:
        """A write reaches the leader, or fails as Nomad's does without one."""
        if self.cluster.leader is None:
            raise NomadError(500, "No cluster leader")

    def _headers(self, index: int) -> tuple[tuple[str, str], ...]:
        return (
            ("X-Nomad-Index", str(index)),
            ("X-Nomad-KnownLeader", "true" if self.cluster.leader else "false"),
            ("X-Nomad-LastContact", "0"),
        )

    async def _blocking(self, options: QueryOptions, current_index: Callable[[], int]) -> int:
        """Wait as a blocking query asks (``index`` > 0, ``wait``, 300 s when 0 or more); returns the
        index to answer with. Without a leader only a ``stale`` read is answered."""
        if self.cluster.leader is None and not options.stale:
            raise NomadError(500, "No cluster leader")
        if options.index > 0:
            wait = min(options.wait, _MAX_WAIT) if options.wait > 0 else _MAX_WAIT
            wait += self.state.rng.uniform(0, wait / 16)
            with trio.move_on_after(wait):
                while current_index() <= options.index:
                    await self.cluster.wait_for_write()
        return max(current_index(), 1)

    def _not_found(self, text: str, index: int) -> NomadError:
        """A read's 404: the query's meta headers are set before it, as Nomad's ``setMeta``."""
        return NomadError(404, text, self._headers(index))

    def _namespace(self, request: Request) -> str:
        return request.arg("namespace") or "default"

    @staticmethod
    def _paginate(
        options: QueryOptions,
        predicate: Predicate | None,
        items: Iterable[_Item],
        key: Callable[[_Item], str],
    ) -> tuple[list[_Item], str]:
        """The ``filter``'s matches from ``next_token`` on, ``per_page`` of them, and the next
        token. As Nomad's paginator does, the items are read and the filter evaluated only until
        the page is full."""
        per_page = options.per_page
        token = options.next_token if per_page else ""
        if token:
            items = (item for item in items if key(item) >= token)
        selected = iter(items) if predicate is None else (item for item in items if predicate(item))
        if per_page <= 0:
            return list(selected), ""
        page = list(itertools.islice(selected, per_page + 1))
        if len(page) <= per_page:
            return page, ""
        return page[:per_page], key(page[per_page])

    # -- jobs -----------------------------------------------------------------------------------

    async def list_jobs(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/jobs``: job stubs by prefix, ``meta``, ``filter`` and pages; a blocking query."""
        options = parse_query(request)
        meta = bool(query_bool(request, "meta"))
        predicate = compile_filter(options.filter, JOB_FIELDS)
        index = await self._blocking(options, lambda: self.state.table_index["jobs"])
        namespace, prefix = self._namespace(request), options.prefix
        jobs = sorted(
            (
                j
                for (ns, job_id), j in self.state.every_job()
                if (namespace == "*" or ns == namespace) and job_id.startswith(prefix)
            ),
            key=lambda j: (j.namespace, j.id),
        )
        page, next_token = self._paginate(options, predicate, jobs, lambda j: j.id)
        body = [self._encoded_job_stub(j, meta) for j in page]
        headers = self._headers(index) + ((("X-Nomad-NextToken", next_token),) if next_token else ())
        return _json_list(body, headers)

    def _encoded_job_stub(self, job: SimJob, meta: bool) -> bytes:
        allocs = self.state.job_allocs((job.namespace, job.id))
        version = (job.modify_index, max((a.modify_index for a in allocs), default=0))
        cached = job.stub_cache.get(meta)
        if cached is None or cached[0] != version:
            cached = (version, orjson.dumps(job_stub(job, self._summary(job), meta=meta)))
            job.stub_cache[meta] = cached
        return cached[1]

    def _summary(self, job: Any) -> dict[str, dict[str, int]]:
        summary = empty_summary([g.get("Name", "") for g in job.task_groups])
        for alloc in self.state.job_allocs((job.namespace, job.id)):
            group = summary.setdefault(alloc.task_group, empty_summary([alloc.task_group])[alloc.task_group])
            group[summary_state(alloc)] += 1
        return summary

    async def get_job(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/job/:id``: the full job, or 404 ``job not found``; a blocking query."""
        key = (self._namespace(request), params["job_id"])
        index = await self._blocking(
            parse_query(request),
            lambda: j.modify_index if (j := self.state.job(key)) else self.state.table_index["jobs"],
        )
        job = self.state.job(key)
        if job is None:
            raise self._not_found("job not found", index)
        return json_response(job_full(job, self.config.region), headers=self._headers(index))

    async def register_job(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/jobs`` and ``/v1/job/:id``: the agent decodes and checks the request
        (400s), the leader canonicalizes, validates (500s) and registers the job."""
        body = decode_request(request.body, JOB_REGISTER_REQUEST)
        job = body.get("Job")
        if job is None:
            raise NomadError(400, "Job must be specified")
        if job.get("ID") is None:
            raise NomadError(400, "Job ID hasn't been provided")
        if "job_id" in params and job["ID"] != params["job_id"]:
            raise NomadError(400, "Job ID does not match name")
        if job.get("Type") == "system" and any(
            g.get("Scaling") is not None for g in job.get("TaskGroups") or []
        ):
            raise NomadError(400, "Task groups with job type system do not support scaling blocks")
        if (body.get("EvalPriority") or 0) and not 1 <= body["EvalPriority"] <= 100:
            raise NomadError(400, "Eval priority must be between 1 and 100 inclusively")
        # The query's namespace first, then the request's, then the job's (namespaceForJob).
        namespace = request.arg("namespace") or body.get("Namespace") or job.get("Namespace") or "default"
        region = self._job_region(request, body, job)
        self._require_leader(request)
        result = self.cluster.jobs.register(
            job,
            namespace,
            region=region,
            enforce_index=bool(body.get("EnforceIndex")),
            job_modify_index=body.get("JobModifyIndex") or 0,
        )
        return json_response(result, headers=self._headers(result["Index"]))

    def _job_region(self, request: Request, body: dict[str, Any], job: dict[str, Any]) -> str:
        """The agent's ``regionForJob``: the request body's region, the query's, the job's; "global"
        or none is the agent's own."""
        region = body.get("Region") or request.arg("region") or job.get("Region") or ""
        return self.config.region if region in ("", "global") else str(region)

    async def deregister_job(self, request: Request, params: dict[str, str]) -> Response:
        """``DELETE /v1/job/:id``: stop the job, or purge it; an unknown job is a 200 no-op."""
        purge = bool(query_bool(request, "purge"))
        query_bool(request, "global")
        eval_priority = query_int(request, "eval_priority")
        query_bool(request, "no_shutdown_delay", shown='"no_shutdown_delay"q')
        if eval_priority is not None and eval_priority > 0 and not 1 <= eval_priority <= 100:
            raise NomadError(400, "Eval priority must be between 1 and 100 inclusively")
        self._require_leader(request)
        result = self.cluster.jobs.deregister(self._namespace(request), params["job_id"], purge=purge)
        return json_response(result, headers=self._headers(result["Index"] or self.state.index))

    async def job_allocations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/job/:id/allocations``: the job's allocation stubs (``all`` versions; a value
        ``ParseBool`` refuses is false, as the agent ignores the error)."""
        try:
            all_versions = go_parse_bool(request.arg("all"))
        except ValueError:
            all_versions = False
        index = await self._blocking(parse_query(request), lambda: self.state.table_index["allocs"])
        key = (self._namespace(request), params["job_id"])
        job = self.state.job(key)
        allocs = list(self.state.job_allocs(key))
        if not all_versions and job is not None:
            allocs = [a for a in allocs if a.create_index >= job.create_index]
        body = [alloc_stub(a, resources=False) for a in sorted(allocs, key=lambda a: a.create_index)]
        return json_response(body, headers=self._headers(index))

    # -- allocations ----------------------------------------------------------------------------

    async def list_allocations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/allocations``: allocation stubs by prefix, ``filter``, ``resources``,
        ``task_states`` and pages."""
        options = parse_query(request)
        resources = bool(query_bool(request, "resources"))
        task_states = query_bool(request, "task_states") is not False
        predicate = compile_filter(options.filter, ALLOC_FIELDS)
        index = await self._blocking(options, lambda: self.state.table_index["allocs"])
        namespace, prefix = self._namespace(request), options.prefix
        by_id = self.state.allocs
        allocs = (
            a
            for a in map(by_id.__getitem__, sorted(by_id))
            if (namespace == "*" or a.namespace == namespace) and a.id.startswith(prefix)
        )
        page, next_token = self._paginate(options, predicate, allocs, lambda a: a.id)
        body = [_encoded_alloc_stub(a, resources, task_states) for a in page]
        headers = self._headers(index) + ((("X-Nomad-NextToken", next_token),) if next_token else ())
        return _json_list(body, headers)

    async def get_allocation(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/allocation/:id``: the full allocation with its job, or 404 ``alloc not found``."""
        alloc_id = params["alloc_id"]
        index = await self._blocking(
            parse_query(request),
            lambda: a.modify_index if (a := self.state.alloc(alloc_id)) else self.state.table_index["allocs"],
        )
        alloc = self.state.alloc(alloc_id)
        if alloc is None:
            raise self._not_found("alloc not found", index)
        return json_response(alloc_full(alloc, with_job=True), headers=self._headers(index))

    async def stop_allocation(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /v1/allocation/:id/stop``: stop the allocation and place a replacement; 404
        ``allocation not found`` (without index headers) for one Nomad does not know."""
        try:
            go_parse_bool(request.arg("no_shutdown_delay") or "false")
        except ValueError as error:
            raise NomadError(500, f"no_shutdown_delay value is not a boolean: {error}") from None
        self._require_leader(request)
        alloc = self.state.alloc(params["alloc_id"])
        if alloc is None:
            raise NomadError(404, "allocation not found")
        result = self.cluster.jobs.stop_allocation(alloc)
        return json_response(result, headers=self._headers(result["Index"]))

    # -- nodes ----------------------------------------------------------------------------------

    async def list_nodes(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/nodes``: node stubs by prefix and ``filter`` (``resources`` and ``os`` add
        fields); a blocking query."""
        options = parse_query(request)
        try:
            resources, os = bool(query_bool(request, "resources")), bool(query_bool(request, "os"))
        except NomadError as error:
            raise NomadError(400, f"Failed to parse node list fields: {error.text}") from None
        predicate = compile_filter(options.filter, NODE_FIELDS)
        index = await self._blocking(options, lambda: self.state.table_index["nodes"])
        prefix = options.prefix
        nodes = sorted((n for n in self.state.every_node() if n.id.startswith(prefix)), key=lambda n: n.id)
        if predicate is not None:
            nodes = [n for n in nodes if predicate(n)]
        version = self.config.nomad_version
        body = [node_stub(n, version, resources=resources, os=os) for n in nodes]
        return json_response(body, headers=self._headers(index))

    async def get_node(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/node/:id``: the full node, or 404 ``node not found``."""
        node_id = params["node_id"]
        index = await self._blocking(
            parse_query(request),
            lambda: n.modify_index if (n := self.state.node(node_id)) else self.state.table_index["nodes"],
        )
        node = self.state.node(node_id)
        if node is None:
            raise self._not_found("node not found", index)
        return json_response(node_full(node), headers=self._headers(index))

    async def node_allocations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/node/:id/allocations``: the node's full allocations; ``[]`` for a node Nomad
        does not know (``Node.GetAllocs`` does not look the node up)."""
        index = await self._blocking(parse_query(request), lambda: self.state.table_index["allocs"])
        node_id = params["node_id"]
        allocs = sorted(
            (a for a in self.state.every_alloc() if a.node_id == node_id), key=lambda a: a.create_index
        )
        return json_response([alloc_full(a, with_job=True) for a in allocs], headers=self._headers(index))

    def _node_for_write(self, node_id: str, node_event: object) -> Any:
        """The node a drain or eligibility write names, checked as the leader checks it (500s)."""
        if node_event is not None:
            raise NomadError(500, "node event must not be set")
        node = self.state.node(node_id)
        if node is None:
            raise NomadError(500, "node not found")
        return node

    async def drain_node(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/node/:id/drain``: set a drain strategy (``DrainSpec``), or cancel it
        (null)."""
        body = decode_request(request.body, NODE_UPDATE_DRAIN_REQUEST)
        self._require_leader(request)
        node = self._node_for_write(params["node_id"], None)
        spec = body.get("DrainSpec")
        self.cluster.agents.drain(
            node,
            deadline_ns=None if spec is None else spec.get("Deadline") or 0,
            mark_eligible=bool(body.get("MarkEligible")),
            meta=body.get("Meta") or {},
            accessor="token:anonymous",
        )
        return json_response(self._node_update(node.modify_index), headers=self._headers(node.modify_index))

    async def node_eligibility(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/node/:id/eligibility``: set scheduling eligibility (the body's NodeID, if
        any, names the node; errors past decoding are 500s, as Nomad's)."""
        body = decode_request(request.body, NODE_UPDATE_ELIGIBILITY_REQUEST)
        self._require_leader(request)
        eligibility = body.get("Eligibility") or ""
        if body.get("NodeEvent") is not None:
            raise NomadError(500, "node event must not be set")
        if eligibility not in ("eligible", "ineligible"):
            raise NomadError(500, f"invalid scheduling eligibility {go_quote(eligibility)}")
        node = self._node_for_write(body.get("NodeID") or params["node_id"], None)
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
        """``GET /v1/evaluation/:id``: the evaluation, or 404 ``eval not found``."""
        index = await self._blocking(parse_query(request), lambda: self.state.table_index["evals"])
        evaluation = self.state.evaluation(params["eval_id"])
        if evaluation is None:
            raise self._not_found("eval not found", index)
        return json_response(eval_full(evaluation), headers=self._headers(index))

    async def status_leader(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/status/leader``: the leader's RPC address; without one, a stale read's "" or
        500 ``No cluster leader``."""
        if self.cluster.leader is None and not parse_query(request).stale:
            raise NomadError(500, "No cluster leader")
        leader = self.cluster.server(self.cluster.leader or "")
        return json_response(leader.rpc_address if leader else "")

    # -- the event stream -----------------------------------------------------------------------

    async def event_stream(self, request: Request, params: dict[str, str]) -> Response | StreamReply:
        """``GET /v1/event/stream``: NDJSON batches of this server's broker from ``index``, and
        heartbeats."""
        raw_index = request.arg("index") or "0"
        if not _ATOI.fullmatch(raw_index):
            raise NomadError(
                400, f"Unable to parse index: strconv.Atoi: parsing {go_quote(raw_index)}: invalid syntax"
            )
        index = int(raw_index)
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
        return StreamReply(source, hijack=self.config.hijacks_event_stream)
