"""The checks of ``supervisor check`` that ask Nomad about the cluster: its servers, leader and
version, the event stream, the client agents' HTTP ports, the scheduler's configuration, and the
nodes the runner jobs can be placed on. (The token's capabilities: check_token.py.)"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Final, cast

import attrs
import httpx
import orjson
import trio

from ..base.errors import (
    ConfigError,
    NomadNotFound,
    NomadPermissionDenied,
    NomadRequestError,
    NomadUnavailableError,
    SupervisorError,
)
from ..base.network import Network
from ..core.config import Settings
from ..core.environments import DEFAULT_SHAPE, ExecutionEnvironment, runner_job
from ..core.job_template import JobShape
from ..effects.job_template_file import JobChecker, job_refusals, job_shape, read_job_template
from ..nomad import NomadClient, NomadSettings, RetryPolicy
from ..nomad.acl_rules import glob_matches
from ..nomad.boundary import translate_status
from ..nomad.events import topic_params
from .check_result import CheckResult, Status

__all__ = [
    "NEWEST_TESTED",
    "OLDEST_SUPPORTED",
    "STREAM_TOPICS",
    "check_agents",
    "check_event_stream",
    "check_leader",
    "check_nodes",
    "check_runner_jobs",
    "check_scheduler",
    "check_servers",
    "check_version",
    "runner_needs",
]

# The Nomad versions the client and the simulated cluster are built against (nomad-api.md).
OLDEST_SUPPORTED: Final = (1, 10)
NEWEST_TESTED: Final = (2, 0)
# The informer's subscription.
STREAM_TOPICS: Final = {"Job": "*", "Allocation": "*", "Node": "*"}
# How many agents' ports are tried at once.
_AGENTS_AT_ONCE: Final = 16
_VERSION: Final = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def _reason(error: BaseException) -> str:
    """What went wrong, without the request's name the client puts first."""
    cause = error.__cause__
    if cause is not None and str(cause):
        return f"{type(cause).__name__}: {cause}"
    body = getattr(error, "body", "")
    return body.strip() or str(error)


async def _get(client: NomadClient, path: str) -> Any:
    response = await client.request("GET", path, namespaced=False)
    return orjson.loads(response.content)


# -- servers, leader, version ---------------------------------------------------------------------


async def check_servers(
    nomad: NomadSettings, *, network: Network | None = None, embedded: bool = False
) -> tuple[CheckResult, list[str]]:
    """Each configured server answers HTTP (any answer counts; no leader is the next check's);
    returns the result and the addresses that answered."""
    answering, silent = [], []
    for address in nomad.addresses:
        single = attrs.evolve(nomad, addresses=(address,), retry=RetryPolicy(attempts=1))
        async with NomadClient(single, network=network) as client:
            try:
                await client.request("GET", "/v1/status/leader", namespaced=False)
            except NomadUnavailableError as exc:
                if exc.status_code is None:
                    silent.append(f"{address} ({_reason(exc)})")
                    continue
            except NomadRequestError:
                pass
        answering.append(address)
    where = "the embedded simulated cluster (no nomad.address, no NOMAD_ADDR)" if embedded else "Nomad"
    servers = "the embedded simulated cluster's servers" if embedded else "Nomad server"
    if not answering:
        result = CheckResult(
            "nomad servers",
            Status.FAIL,
            f"no {servers} answers: {'; '.join(silent)}.",
            fix="start Nomad, or point nomad.address (or NOMAD_ADDR) at a Nomad server's HTTP address "
            "(http://HOST:4646; https:// with TLS).",
        )
    elif silent:
        result = CheckResult(
            "nomad servers",
            Status.WARN,
            f"{len(answering)} of {len(nomad.addresses)} servers answer; not {'; '.join(silent)}: each "
            "request that goes there fails once before the next server is tried.",
            fix="start that server, or take it out of nomad.address.",
        )
    else:
        result = CheckResult("nomad servers", Status.OK, f"{where} answers at {', '.join(answering)}.")
    return result, answering


async def check_leader(client: NomadClient) -> CheckResult:
    """The cluster knows its leader (``/v1/status/leader``)."""
    try:
        leader = await client.leader(attempts=1)
    except SupervisorError as exc:
        leader, reason = "", _reason(exc)
    else:
        reason = "no leader elected"
    if leader:
        return CheckResult("cluster leader", Status.OK, f"{leader}.")
    return CheckResult(
        "cluster leader",
        Status.FAIL,
        f"the servers know no leader ({reason}): Nomad writes nothing without one.",
        fix="start a majority of the servers (bootstrap_expect of them), and see `nomad server members`.",
    )


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``"1.10.5"``, ``"v1.11.0-beta.1"``, ``"1.10.5+ent"`` as a tuple; None if it is none."""
    found = _VERSION.match(text.strip())
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def _agent_version(data: Any) -> str:
    """The version ``/v1/agent/self`` gives: ``config.Version.Version`` (with its prerelease), or the
    member's ``build`` tag."""
    config = data.get("config") if isinstance(data, dict) else None
    version = config.get("Version") if isinstance(config, dict) else None
    if isinstance(version, dict) and version.get("Version"):
        prerelease = version.get("VersionPrerelease") or ""
        return str(version["Version"]) + (f"-{prerelease}" if prerelease else "")
    if isinstance(version, str) and version:
        return version
    member = data.get("member") if isinstance(data, dict) else None
    tags = member.get("Tags") if isinstance(member, dict) else None
    return str(tags.get("build", "")) if isinstance(tags, dict) else ""


async def _clients_version(client: NomadClient) -> str:
    nodes = await _get(client, "/v1/nodes")
    versions = sorted({str(n.get("Version", "")) for n in nodes if isinstance(n, dict)} - {""})
    return versions[0] if len(versions) == 1 else ", ".join(versions)


async def check_version(client: NomadClient) -> CheckResult:
    """The server's version (``/v1/agent/self``'s ``config.Version``) is one we support; without it
    (no agent read, or not served), the client agents' versions from the node list."""
    source = "the server"
    try:
        version = _agent_version(await _get(client, "/v1/agent/self"))
    except SupervisorError as exc:
        why = (
            "the token may not read /v1/agent/self (agent read)"
            if isinstance(exc, NomadPermissionDenied)
            else f"/v1/agent/self: {_reason(exc)}"
        )
        try:
            version, source = await _clients_version(client), f"the client agents ({why})"
        except SupervisorError as inner:
            return CheckResult(
                "nomad version", Status.WARN, f"not known: {why}; /v1/nodes: {_reason(inner)}."
            )
    parsed = [parse_version(v) for v in version.split(", ")] if version else []
    if not parsed or None in parsed:
        return CheckResult("nomad version", Status.WARN, f"not known: {source} gave {version!r}.")
    oldest = min(v for v in parsed if v is not None)
    newest = max(v for v in parsed if v is not None)
    supported = f"{OLDEST_SUPPORTED[0]}.{OLDEST_SUPPORTED[1]} to {NEWEST_TESTED[0]}.{NEWEST_TESTED[1]}"
    if oldest[:2] < OLDEST_SUPPORTED:
        return CheckResult(
            "nomad version",
            Status.FAIL,
            f"{version} on {source}: older than {supported}, what this daemon speaks.",
            fix=f"upgrade Nomad to {OLDEST_SUPPORTED[0]}.{OLDEST_SUPPORTED[1]} or later.",
        )
    if newest[:2] > NEWEST_TESTED:
        return CheckResult(
            "nomad version",
            Status.WARN,
            f"{version} on {source}: newer than any tested ({supported}); read its upgrade notes on "
            "the event stream, exec and variables.",
        )
    return CheckResult("nomad version", Status.OK, f"{version} on {source}; supported: {supported}.")


# -- the event stream -----------------------------------------------------------------------------


async def check_event_stream(client: NomadClient, settings: Settings) -> CheckResult:
    """The event stream with the daemon's topics opens and its first line (Nomad's ``{}``) comes
    within the request timeout: no proxy in between holds it back."""
    timeout = settings.nomad.request_timeout
    params: list[tuple[str, str | int | float | bool | None]] = [
        ("index", "0"),
        *topic_params(STREAM_TOPICS),
        *client.common_params().items(),
    ]
    topics = ", ".join(STREAM_TOPICS)
    fix = ""
    try:
        with trio.fail_after(timeout):
            async with client.http.stream(
                "GET",
                client.address + "/v1/event/stream",
                params=params,
                timeout=httpx.Timeout(timeout, read=None),
                extensions=client.request_extensions(),
            ) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    error = translate_status(response.status_code, text, "GET /v1/event/stream")
                    raise error or NomadUnavailableError("GET /v1/event/stream")
                async with aclosing(cast(AsyncGenerator[str, None], response.aiter_lines())) as lines:
                    async for _ in lines:
                        return CheckResult(
                            "event stream", Status.OK, f"opens with the topics {topics}, and flows."
                        )
        detail = (
            "Nomad closed it before its first line: from Nomad 1.11.2 this is how it refuses a token "
            "the topics' capabilities (see the token's lines)."
        )
    except trio.TooSlowError:
        detail = f"opened, but no line (not even Nomad's first heartbeat) within {timeout:g} s."
        fix = (
            "a proxy between this host and Nomad buffers responses: turn buffering off for /v1/event/stream."
        )
    except (SupervisorError, httpx.HTTPError) as exc:
        detail = f"does not open: {_reason(exc)}."
    return CheckResult("event stream", Status.FAIL, detail, fix=fix)


# -- direct exec ----------------------------------------------------------------------------------


def _host_port(http_addr: str) -> tuple[str, int] | None:
    host, _, port = http_addr.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


async def _agent_answers(network: Network, http_addr: str, within: float) -> bool:
    where = _host_port(http_addr)
    if where is None:
        return False
    with trio.move_on_after(within):
        try:
            stream = await network.connect(*where)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False


async def check_agents(client: NomadClient, settings: Settings) -> CheckResult:
    """Each ready node's client agent takes a connection on its HTTP port (``HTTPAddr``) within
    ``agent_connect_timeout``: where not, exec goes through the servers, which costs what the
    detail says."""
    mode, timeout = settings.nomad.direct_exec, settings.nomad.agent_connect_timeout
    server_cost = (
        "a server forwards each session, and its restart ends the sessions it forwards (the leader's, all)"
    )
    if mode == "never":
        return CheckResult(
            "direct exec", Status.OK, f"direct_exec = never: exec goes through the servers; {server_cost}."
        )
    try:
        stubs = await _get(client, "/v1/nodes")
        nodes = [await _get(client, f"/v1/node/{s['ID']}") for s in stubs if s.get("Status") == "ready"]
    except SupervisorError as exc:
        return CheckResult("direct exec", Status.SKIP, f"the nodes cannot be read: {_reason(exc)}.")
    if not nodes:
        return CheckResult("direct exec", Status.SKIP, "no ready node to try.")
    answers: dict[str, bool] = {}
    limiter = trio.CapacityLimiter(_AGENTS_AT_ONCE)

    async def attempt(node: Mapping[str, Any]) -> None:
        async with limiter:
            answers[node["Name"]] = await _agent_answers(client.network, node.get("HTTPAddr", ""), timeout)

    async with trio.open_nursery() as nursery:
        for node in nodes:
            nursery.start_soon(attempt, node)
    silent = [f"{n['Name']} ({n.get('HTTPAddr') or 'no HTTPAddr'})" for n in nodes if not answers[n["Name"]]]
    if not silent:
        return CheckResult(
            "direct exec",
            Status.OK,
            f"{len(nodes)} of {len(nodes)} client agents take connections on their HTTP port: exec goes "
            "to them directly.",
        )
    detail = (
        f"{len(silent)} of {len(nodes)} client agents do not take a connection within {timeout:g} s: "
        + ", ".join(silent)
    )
    fix = "open the agents' HTTP port (4646) from this host to the clients"
    if mode == "always":
        return CheckResult(
            "direct exec",
            Status.FAIL,
            f"{detail}; with direct_exec = always, exec there fails.",
            fix=f"{fix}, or set nomad.direct_exec = auto.",
        )
    return CheckResult(
        "direct exec",
        Status.WARN,
        f"{detail}. Exec there goes through the servers, after waiting {timeout:g} s for the agent once "
        f"each time it registers; {server_cost}.",
        fix=f"{fix}, or set nomad.direct_exec = never to skip the wait.",
    )


# -- the scheduler and the nodes ------------------------------------------------------------------


async def check_scheduler(client: NomadClient) -> CheckResult:
    """The scheduler's configuration: ``spread`` ranks the emptiest node first, so a lost agent takes
    fewer runners with it (Poseidon's deployment asks for it), and memory oversubscription lets a
    runner use its ``memory_limit`` (MemoryMaxMB). Neither stops the daemon: each is a warning."""
    try:
        data = await _get(client, "/v1/operator/scheduler/configuration")
    except NomadPermissionDenied:
        return CheckResult(
            "scheduler",
            Status.SKIP,
            "the token may not read the scheduler's configuration (operator read): see `nomad operator "
            "scheduler get-config` (spread, and memory oversubscription on, are what runners want).",
        )
    except NomadNotFound:
        return CheckResult(
            "scheduler",
            Status.SKIP,
            "this Nomad does not serve /v1/operator/scheduler/configuration: see `nomad operator "
            "scheduler get-config` (spread, and memory oversubscription on, are what runners want).",
        )
    except SupervisorError as exc:
        return CheckResult("scheduler", Status.SKIP, f"its configuration cannot be read: {_reason(exc)}.")
    config = data.get("SchedulerConfig") if isinstance(data, dict) else None
    config = config if isinstance(config, dict) else {}
    algorithm = config.get("SchedulerAlgorithm") or "binpack"
    problems, fixes = [], []
    if algorithm != "spread":
        problems.append(
            f"scheduler_algorithm is {algorithm}: it fills one agent before the next, so a lost agent "
            "takes more runners with it"
        )
        fixes.append("-scheduler-algorithm=spread")
    if not config.get("MemoryOversubscriptionEnabled"):
        problems.append("memory oversubscription is off: runners get 50 MB, not their memory_limit")
        fixes.append("-memory-oversubscription=true")
    if not problems:
        return CheckResult("scheduler", Status.OK, "spread, with memory oversubscription on.")
    return CheckResult(
        "scheduler",
        Status.WARN,
        "; ".join(problems) + ".",
        fix=f"nomad operator scheduler set-config {' '.join(fixes)}",
    )


def runner_needs(
    settings: Settings, shape: JobShape = DEFAULT_SHAPE
) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """Where the runner jobs of the configured environments (or of any environment, with none
    configured), built from ``shape``'s template, may be placed: their datacenters, node pool and
    task drivers."""
    environments = settings.environments or (
        ExecutionEnvironment(0, "image", 0, 1.0, 64, network_access=False),
    )
    datacenters: set[str] = set()
    pools: set[str] = set()
    drivers: set[str] = set()
    for environment in environments:
        job = runner_job(environment, f"{environment.id}-check", shape=shape)
        datacenters.update(job.get("Datacenters") or ["*"])
        pools.add(job.get("NodePool") or "default")
        for group in job.get("TaskGroups") or []:
            if group.get("Count", 1) > 0:
                drivers.update(task["Driver"] for task in group.get("Tasks") or [])
    return tuple(sorted(datacenters)), ",".join(sorted(pools)), tuple(sorted(drivers))


def _node_problem(
    node: Mapping[str, Any], datacenters: Sequence[str], pool: str, drivers: Sequence[str]
) -> str:
    """Why the runner jobs cannot be placed on ``node``; "" if they can."""
    if not any(glob_matches(dc, node.get("Datacenter", "")) for dc in datacenters):
        return f"in datacenter {node.get('Datacenter')}"
    if pool not in ("all", node.get("NodePool") or "default"):
        return f"in node pool {node.get('NodePool')}"
    if node.get("Status") != "ready":
        return str(node.get("Status") or "not ready")
    if node.get("SchedulingEligibility") != "eligible" or node.get("Drain"):
        return "draining" if node.get("Drain") else "ineligible"
    reported = node.get("Drivers") or {}
    for driver in drivers:
        info = reported.get(driver) or {}
        if not (info.get("Detected") and info.get("Healthy")):
            return f"no healthy {driver} driver"
    return ""


async def check_runner_jobs(client: JobChecker, settings: Settings) -> tuple[CheckResult, JobShape | None]:
    """The job template reads and can carry a runner, and Nomad takes the runner job and the
    template job of each configured environment (``/v1/validate/job``); returns the result and the
    runner jobs' shape (None when the template does not read)."""
    path = settings.nomad.job_template
    source = f"the job template {path}" if path else "Poseidon's job template"
    try:
        shape = job_shape(settings, await read_job_template(client, path) if path else None)
    except ConfigError as exc:
        return CheckResult("runner jobs", Status.FAIL, f"{exc}.", fix="mend nomad.job_template."), None
    except SupervisorError as exc:
        return CheckResult("runner jobs", Status.FAIL, f"{source} not parsed: {_reason(exc)}."), None
    try:
        refusals = await job_refusals(client, shape, settings.environments)
    except SupervisorError as exc:
        return CheckResult("runner jobs", Status.WARN, f"not validated by Nomad: {_reason(exc)}."), shape
    if refusals:
        fix = "mend [[environments]] or nomad.job_template."
        return CheckResult("runner jobs", Status.FAIL, f"{refusals[0]}.", fix=fix), shape
    jobs = (
        f"{len(settings.environments)} environments'" if settings.environments else "a sample environment's"
    )
    return CheckResult("runner jobs", Status.OK, f"from {source}: Nomad takes {jobs} jobs."), shape


async def check_nodes(
    client: NomadClient, settings: Settings, shape: JobShape = DEFAULT_SHAPE
) -> CheckResult:
    """Some node is ready and eligible, in the runner jobs' datacenters and node pool, with a
    healthy driver for their tasks."""
    datacenters, pool, drivers = runner_needs(settings, shape)
    wanted = f"datacenter {', '.join(datacenters)}, node pool {pool}, driver {', '.join(drivers)}"
    try:
        nodes = await _get(client, "/v1/nodes")
    except SupervisorError as exc:
        return CheckResult(
            "nodes", Status.FAIL, f"cannot be listed: {_reason(exc)}.", fix="give the token node read."
        )
    problems = {n.get("Name", n.get("ID", "?")): _node_problem(n, datacenters, pool, drivers) for n in nodes}
    usable = sorted(name for name, problem in problems.items() if not problem)
    others = sorted(f"{name} ({problem})" for name, problem in problems.items() if problem)
    if usable:
        rest = f"; not usable: {', '.join(others)}" if others else ""
        return CheckResult(
            "nodes",
            Status.OK,
            f"{len(usable)} ready and eligible for runner jobs ({wanted}): {', '.join(usable)}{rest}.",
        )
    return CheckResult(
        "nodes",
        Status.FAIL,
        f"no node can take runner jobs ({wanted}): {', '.join(others) or 'the cluster has no client node'}.",
        fix="start a client agent there with that driver (docker) enabled and healthy, and make it "
        "eligible (`nomad node eligibility -enable`).",
    )
