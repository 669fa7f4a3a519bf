"""The async Nomad REST client: the only code that sends HTTP requests to Nomad.

Every failure leaves here as one of ``supervisor.base.errors``: transient ones (no answer, 5xx such as
"No cluster leader") are retried with backoff on the next server of ``settings.addresses``, up to
``settings.retry.attempts`` tries; terminal ones (400, 403, 404, and the 500s Nomad uses for
validation) are raised at once with Nomad's text. Every call we make is idempotent in Nomad
(re-registering an identical job makes no new version; deregistering an unknown job is a no-op), so
retrying writes is safe.
"""

from __future__ import annotations

import copy
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

import httpx
import orjson
import trio
from attrs import frozen
from loguru import logger

from ..base.entropy import Entropy
from ..base.errors import (
    NomadAddressUnreachable,
    NomadUnavailableError,
    SupervisorError,
    TerminalError,
    TransientError,
)
from ..base.network import Network, TcpNetwork
from .agents import AgentLocator, AgentRoute, NoAgents, agent_url
from .boundary import release_response, translate_status, translate_transport_errors
from .decode import structure, structure_lean_alloc_stubs, structure_list
from .events import EventCounts, EventStream, open_event_stream
from .exec import ExecSession, open_exec
from .models import (
    Allocation,
    AllocListStub,
    AllocStopResponse,
    Evaluation,
    Job,
    JobDeregisterResponse,
    JobListStub,
    JobRegisterResponse,
    Node,
    NodeListStub,
    NodeUpdateResponse,
)
from .settings import NomadSettings
from .transport import network_transport

__all__ = ["Indexed", "NomadClient"]

T = TypeVar("T")

# Nomad adds up to wait/16 of jitter to a blocking query.
_BLOCKING_JITTER: Final = 1 / 16


@frozen
class Indexed(Generic[T]):
    """A read's value with the ``X-Nomad-Index`` it was answered at."""

    value: T
    index: int


def _go_duration(seconds: float) -> str:
    return f"{max(0, round(seconds * 1000))}ms"


def _escape(path_segment: str) -> str:
    return quote(path_segment, safe="")


class NomadClient:
    """One connection pool to a Nomad cluster; ``aclose()`` (or ``async with``) releases it.

    Every connection goes through ``network`` (real TCP by default); ``transport`` replaces the
    HTTP transport whole, for tests (``httpx.MockTransport``).
    """

    def __init__(
        self,
        settings: NomadSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        network: Network | None = None,
        random_fraction: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        # The retries' jitter: the daemon hands its Entropy's, which a simulation seeds.
        self._random_fraction = Entropy().fraction if random_fraction is None else random_fraction
        self._current = 0
        # Built once: loading the CA bundle costs milliseconds, too much for every exec session.
        self.ssl_context = settings.ssl_context()
        self._agent_ssl: ssl.SSLContext | None = None
        # Where each allocation's client agent listens; the runner service says how to find them.
        # Where allocations' agents listen (none known until a term's pool says: ``located``), and
        # exec sessions by the path they took: "agent", "server", and "fallback" (a server's, after
        # the agent could not be reached).
        self.agents: AgentLocator = NoAgents()
        self.exec_paths: Counter[str] = Counter()
        # The events its streams read, by topic and type (kept across streams, for /metrics).
        self.nomad_events = EventCounts()
        headers = {"User-Agent": "nomad-runner-supervisor"}
        if settings.token:
            headers["X-Nomad-Token"] = settings.token
        self.network: Network = network or TcpNetwork()
        self._http = httpx.AsyncClient(
            transport=transport or network_transport(self.network, self.ssl_context),
            timeout=httpx.Timeout(settings.request_timeout),
            headers=headers,
        )

    async def __aenter__(self) -> NomadClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    def located(self, locator: AgentLocator) -> NomadClient:
        """This client (its connection pool, settings, network and counts), told by ``locator``
        where each allocation's agent runs, for exec straight to it: a term's runner pool knows
        where its runners run. The original keeps its own locator, and is the one to close."""
        term = copy.copy(self)
        term.agents = locator
        return term

    @property
    def address(self) -> str:
        """The server the next request goes to: the last one that answered."""
        return self.settings.addresses[self._current]

    def rotate_address(self) -> None:
        """Move on to the next server, after this one failed."""
        self._current = (self._current + 1) % len(self.settings.addresses)

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared httpx client (connection pool, TLS, token header) for the stream reader."""
        return self._http

    def common_params(self, *, namespaced: bool = True) -> dict[str, str]:
        """The query parameters every request carries: namespace (where it applies) and region."""
        params: dict[str, str] = {}
        if namespaced and self.settings.namespace:
            params["namespace"] = self.settings.namespace
        if self.settings.region:
            params["region"] = self.settings.region
        return params

    def request_extensions(self) -> dict[str, Any]:
        """httpx extensions for every request: the TLS server name to check, when set."""
        if self.settings.tls_server_name:
            return {"sni_hostname": self.settings.tls_server_name}
        return {}

    # -- the one request path -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        namespaced: bool = True,
        http_timeout: float | None = None,
        attempts: int | None = None,
    ) -> httpx.Response:
        """Send one request, retrying transient failures (``attempts`` tries, by default the retry
        policy's); returns a 2xx response or raises."""
        what = f"{method} {path}"
        merged = {**self.common_params(namespaced=namespaced), **(params or {})}
        content = orjson.dumps(body) if body is not None else None
        attempt = 1
        while True:
            try:
                return await self._send_once(method, path, merged, content, http_timeout, what)
            except TransientError as exc:
                if attempt >= (attempts or self.settings.retry.attempts):
                    raise
                delay = self.settings.retry.delay(attempt, self._random_fraction())
                logger.debug(
                    "{} failed on {} ({}); retry {} in {:.2f}s", what, self.address, exc, attempt, delay
                )
                self.rotate_address()
                attempt += 1
                await trio.sleep(delay)

    async def _send_once(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        content: bytes | None,
        http_timeout: float | None,
        what: str,
    ) -> httpx.Response:
        with translate_transport_errors(what):
            response = await self._http.request(
                method,
                self.address + path,
                params=params,
                content=content,
                headers={"Content-Type": "application/json"} if content is not None else None,
                timeout=http_timeout if http_timeout is not None else httpx.USE_CLIENT_DEFAULT,
                extensions=self.request_extensions(),
            )
        release_response(response)
        if response.is_success:
            return response  # its body is not decoded as text: a listing's is tens of MB
        error = translate_status(response.status_code, response.text, what)
        if error is not None:
            raise error
        return response

    async def _read(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        index: int = 0,
        wait: float | None = None,
        namespaced: bool = True,
    ) -> tuple[Any, int]:
        query = dict(params or {})
        timeout = None
        if index > 0:
            query["index"] = str(index)
            if wait is not None:
                query["wait"] = _go_duration(wait)
            blocking = wait if wait is not None else 300.0
            timeout = blocking * (1 + _BLOCKING_JITTER) + self.settings.request_timeout
        response = await self.request("GET", path, params=query, namespaced=namespaced, http_timeout=timeout)
        return orjson.loads(response.content), int(response.headers.get("X-Nomad-Index", "0"))

    async def _read_pages(
        self,
        path: str,
        decode: Callable[[list[Any]], list[T]],
        *,
        params: Mapping[str, str],
        per_page: int | None,
        namespaced: bool = True,
    ) -> Indexed[list[T]]:
        """Every page of a list endpoint, each decoded as it comes; the index is the first page's,
        the earliest view."""
        query = dict(params)
        if per_page is not None:
            query["per_page"] = str(per_page)
        items: list[T] = []
        first_index = 0
        while True:
            response = await self.request("GET", path, params=query, namespaced=namespaced)
            items += decode(orjson.loads(response.content))
            first_index = first_index or int(response.headers.get("X-Nomad-Index", "0"))
            next_token = response.headers.get("X-Nomad-NextToken", "")
            if not next_token or per_page is None:
                return Indexed(items, first_index)
            query["next_token"] = next_token

    # -- jobs -----------------------------------------------------------------------------------

    async def list_jobs(
        self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
    ) -> Indexed[list[JobListStub]]:
        """Job stubs whose ID starts with ``prefix``; with ``meta``, their meta too."""
        params = {"prefix": prefix} if prefix else {}
        if meta:
            params["meta"] = "true"
        return await self._read_pages(
            "/v1/jobs", lambda page: structure_list(page, JobListStub), params=params, per_page=per_page
        )

    async def get_job(self, job_id: str, *, index: int = 0, wait: float | None = None) -> Indexed[Job]:
        """The full job; a blocking query when ``index`` is given."""
        data, at = await self._read(f"/v1/job/{_escape(job_id)}", index=index, wait=wait)
        return Indexed(structure(data, Job), at)

    async def read_job(self, job_id: str) -> Indexed[dict[str, Any]]:
        """The job as Nomad answers it, undecoded (every field kept, for a write that changes one)."""
        data, at = await self._read(f"/v1/job/{_escape(job_id)}")
        if not isinstance(data, dict):
            raise TerminalError(f"GET /v1/job/{job_id} answered no object")
        return Indexed(data, at)

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        """Register (or update) ``job``, an api.Job in Nomad's JSON form."""
        response = await self.request("POST", "/v1/jobs", body={"Job": job})
        return structure(orjson.loads(response.content), JobRegisterResponse)

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        """Stop, or with ``purge`` delete, the job; index 0 for a job Nomad does not know."""
        params = {"purge": "true"} if purge else {}
        response = await self.request("DELETE", f"/v1/job/{_escape(job_id)}", params=params)
        return structure(orjson.loads(response.content), JobDeregisterResponse)

    async def parse_job(self, hcl: str) -> dict[str, Any]:
        """Nomad's own parse of an HCL2 jobspec (``POST /v1/jobs/parse``, not canonicalized): the
        job in Nomad's API JSON. A jobspec Nomad cannot parse is NomadRequestError (400) with its
        parse error."""
        body = {"JobHCL": hcl, "Canonicalize": False}
        response = await self.request("POST", "/v1/jobs/parse", body=body)
        job = orjson.loads(response.content)
        if not isinstance(job, dict):
            raise NomadUnavailableError(f"POST /v1/jobs/parse: not a job: {response.text[:200]!r}")
        return job

    async def validate_job(self, job: Mapping[str, Any]) -> list[str]:
        """What Nomad finds wrong with ``job`` (``PUT /v1/validate/job``, as ``nomad job validate``):
        its ``ValidationErrors``, or its ``Error`` alone; empty when Nomad would take it."""
        response = await self.request("PUT", "/v1/validate/job", body={"Job": job})
        answer = orjson.loads(response.content)
        if not isinstance(answer, dict):
            raise NomadUnavailableError(f"PUT /v1/validate/job: not an answer: {response.text[:200]!r}")
        errors = [str(e) for e in answer.get("ValidationErrors") or [] if str(e).strip()]
        error = str(answer.get("Error") or "").strip()
        return errors or ([error] if error else [])

    async def job_allocations(
        self, job_id: str, *, all_versions: bool = False, index: int = 0, wait: float | None = None
    ) -> Indexed[list[AllocListStub]]:
        """The job's allocation stubs (all versions with ``all_versions``); blocking with ``index``."""
        params = {"all": "true"} if all_versions else {}
        data, at = await self._read(
            f"/v1/job/{_escape(job_id)}/allocations", params=params, index=index, wait=wait
        )
        return Indexed(structure_list(data, AllocListStub), at)

    # -- allocations ----------------------------------------------------------------------------

    async def list_allocations(
        self,
        prefix: str = "",
        *,
        resources: bool = True,
        task_states: bool = True,
        filter: str = "",
        per_page: int | None = None,
        lean: bool = False,
    ) -> Indexed[list[AllocListStub]]:
        """Allocation stubs; ``filter`` is a Nomad filter expression, evaluated by Nomad against
        each full allocation. ``lean`` stubs keep only the fields decoded at once (the others read
        as zero values): with ``per_page``, a listing's memory is then one page at a time."""
        params = {"prefix": prefix} if prefix else {}
        if filter:
            params["filter"] = filter
        if resources:
            params["resources"] = "true"
        if not task_states:
            params["task_states"] = "false"

        def decode(page: list[Any]) -> list[AllocListStub]:
            return structure_lean_alloc_stubs(page) if lean else structure_list(page, AllocListStub)

        return await self._read_pages("/v1/allocations", decode, params=params, per_page=per_page)

    async def get_allocation(
        self, alloc_id: str, *, index: int = 0, wait: float | None = None
    ) -> Indexed[Allocation]:
        """The full allocation; a blocking query when ``index`` is given."""
        data, at = await self._read(f"/v1/allocation/{_escape(alloc_id)}", index=index, wait=wait)
        return Indexed(structure(data, Allocation), at)

    async def stop_allocation(self, alloc_id: str) -> AllocStopResponse:
        """Stop the allocation; Nomad migrates it, so a replacement is placed."""
        response = await self.request("POST", f"/v1/allocation/{_escape(alloc_id)}/stop")
        return structure(orjson.loads(response.content), AllocStopResponse)

    # -- nodes ----------------------------------------------------------------------------------

    async def list_nodes(
        self, prefix: str = "", *, index: int = 0, wait: float | None = None
    ) -> Indexed[list[NodeListStub]]:
        """Node stubs whose ID starts with ``prefix``; blocking with ``index``."""
        params = {"prefix": prefix} if prefix else {}
        data, at = await self._read("/v1/nodes", params=params, index=index, wait=wait, namespaced=False)
        return Indexed(structure_list(data, NodeListStub), at)

    async def get_node(self, node_id: str, *, index: int = 0, wait: float | None = None) -> Indexed[Node]:
        """The full node; a blocking query when ``index`` is given."""
        data, at = await self._read(f"/v1/node/{_escape(node_id)}", index=index, wait=wait, namespaced=False)
        return Indexed(structure(data, Node), at)

    async def drain_node(
        self, node_id: str, *, deadline: float | None, mark_eligible: bool = False, message: str = ""
    ) -> NodeUpdateResponse:
        """Start a drain with ``deadline`` seconds (0: none, negative: force), or cancel it with None."""
        spec = None
        if deadline is not None:
            deadline_ns = -1 if deadline < 0 else round(deadline * 1e9)
            spec = {"Deadline": deadline_ns, "IgnoreSystemJobs": False}
        body = {
            "DrainSpec": spec,
            "MarkEligible": mark_eligible,
            "Meta": {"message": message} if message else {},
        }
        response = await self.request(
            "POST", f"/v1/node/{_escape(node_id)}/drain", body=body, namespaced=False
        )
        return structure(orjson.loads(response.content), NodeUpdateResponse)

    async def set_eligibility(self, node_id: str, *, eligible: bool) -> NodeUpdateResponse:
        """Make the node eligible or ineligible for new placements."""
        body = {"Eligibility": "eligible" if eligible else "ineligible"}
        response = await self.request(
            "POST", f"/v1/node/{_escape(node_id)}/eligibility", body=body, namespaced=False
        )
        return structure(orjson.loads(response.content), NodeUpdateResponse)

    # -- evaluations, status --------------------------------------------------------------------

    async def get_evaluation(self, eval_id: str) -> Indexed[Evaluation]:
        """The evaluation."""
        data, at = await self._read(f"/v1/evaluation/{_escape(eval_id)}")
        return Indexed(structure(data, Evaluation), at)

    async def leader(self, *, attempts: int | None = None, http_timeout: float | None = None) -> str:
        """The leader's RPC address; "" while the cluster has none."""
        response = await self.request(
            "GET", "/v1/status/leader", namespaced=False, attempts=attempts, http_timeout=http_timeout
        )
        leader = orjson.loads(response.content)
        return leader if isinstance(leader, str) else ""

    # -- the event stream -----------------------------------------------------------------------

    @asynccontextmanager
    async def open_event_stream(
        self, topics: Mapping[str, str | list[str]], *, index: int = 0, **options: Any
    ) -> AsyncIterator[EventStream]:
        """Subscribe to ``topics`` (topic -> key or keys, ``*`` for all) from ``index``, inclusive.

        One connection to the current server, no retry: the caller reconnects (and should rotate
        servers with ``rotate_address``) on EventStreamError.
        """
        counts = self.nomad_events
        async with open_event_stream(self, topics, index=index, counts=counts, **options) as stream:
            yield stream

    # -- exec -----------------------------------------------------------------------------------

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[ExecSession]:
        """Run ``command`` in the allocation's task: on its client agent first (``direct_exec``
        "auto" or "always"), then through the servers. An agent or server that cannot be reached (so
        nothing ran) is passed over; a session that started is never retried."""
        mode = self.settings.direct_exec
        route = await self._agent_route(alloc_id) if mode != "never" else None
        if route is not None:
            started = False
            try:
                async with open_exec(
                    self,
                    alloc_id,
                    task=task,
                    command=command,
                    tty=tty,
                    address=agent_url(route),
                    ssl_context=self._agent_ssl_context() if route.tls else None,
                    tcp_timeout=self.settings.agent_connect_timeout,
                ) as session:
                    started = True
                    session.path = "agent"
                    self.exec_paths["agent"] += 1
                    yield session
                return
            except NomadAddressUnreachable as exc:
                if started:
                    raise
                self._agent_unreachable(route, exc)
                if mode == "always":
                    raise NomadUnavailableError(
                        f"exec in allocation {alloc_id}: its client agent cannot be reached"
                    ) from exc
            except (NomadUnavailableError, TerminalError) as exc:
                # Refused before the upgrade, or answered with an error status: nothing ran there.
                # The servers give the authoritative answer (a stale address may name another node).
                if started or mode == "always":
                    raise
                logger.info("exec in {} goes through the servers: its agent answered {}", alloc_id, exc)
        elif mode == "always":
            raise NomadUnavailableError(
                f"exec in allocation {alloc_id}: its client agent is not known or down"
            )
        async with self._exec_via_servers(alloc_id, task=task, command=command, tty=tty) as session:
            self.exec_paths["server"] += 1
            self.exec_paths["fallback"] += route is not None
            yield session

    def _agent_unreachable(self, route: AgentRoute, error: NomadAddressUnreachable) -> None:
        """The agent did not take the exec's connection within ``agent_connect_timeout``, so nothing
        was sent: it is passed over until its node registers again."""
        self.agents.agent_unreachable(route)
        logger.warning(
            "the client agent of node {} ({}) could not be reached ({!r}); exec goes through the "
            "servers until it registers again",
            route.node_id,
            route.http_addr,
            error.__cause__ or error,
        )

    async def _agent_route(self, alloc_id: str) -> AgentRoute | None:
        """The allocation's agent, with its address read from Nomad (once, in one try bounded by
        the agent connect timeout) if no event gave it yet."""
        route = self.agents.agent_route(alloc_id)
        if route is None or route.http_addr:
            return route
        try:
            # Any server answers a stale read, with or without a leader; the next one if it cannot.
            response = await self.request(
                "GET",
                f"/v1/node/{_escape(route.node_id)}",
                params={"stale": ""},
                namespaced=False,
                attempts=2,
                http_timeout=self.settings.agent_connect_timeout,
            )
            node = structure(orjson.loads(response.content), Node)
        except SupervisorError as exc:
            logger.debug("the address of node {} could not be read: {}", route.node_id, exc)
            return None
        if not node.http_addr or node.status == "down":
            return None
        return self.agents.agent_learned(route, node.http_addr, node.tls_enabled)

    def _agent_ssl_context(self) -> ssl.SSLContext | None:
        if self._agent_ssl is None:
            self._agent_ssl = self.settings.ssl_context(
                checked_name=self.settings.agent_tls_name, always=True
            )
        return self._agent_ssl

    @asynccontextmanager
    async def _exec_via_servers(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool
    ) -> AsyncIterator[ExecSession]:
        for attempt in range(len(self.settings.addresses)):
            started = False
            try:
                async with open_exec(self, alloc_id, task=task, command=command, tty=tty) as session:
                    started = True
                    yield session
                return
            except NomadUnavailableError:
                if started or attempt == len(self.settings.addresses) - 1:
                    raise
                logger.debug("exec via {} failed to connect; trying the next server", self.address)
                self.rotate_address()
