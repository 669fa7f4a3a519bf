"""``supervisor check``: the configuration and the Nomad cluster, checked before the first student.

Each check is a small function that returns ``CheckResult`` values: OK, WARN (it works, at a cost the
detail names), FAIL (the daemon would not work; the fix says what to change) or SKIP (not run, and
why). ``run_checks`` runs them in order and hands each result to ``report`` as it comes;
``format_result`` writes its lines. The command exits 1 if any check failed, 0 otherwise; a
configuration that does not load never gets here (the command line exits 2, as ``supervisor run``
does).

The order: the configuration (every key, and where its value came from), the user students' code
runs as, the API's certificate and Sentry's variables when set, the embedded simulated cluster if
that is what runs, the servers, the leader, Nomad's version, the token and each capability the
daemon needs, the event stream, the client agents' HTTP ports (direct exec), the scheduler's
configuration, and the nodes the runner jobs can be placed on.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import trio

from ..base.errors import ConfigError
from ..base.loopback import is_loopback
from ..base.network import Network
from ..base.tls import server_context
from ..core.config import SECTIONS, Settings, section_values, variable_name
from ..core.environments import DEFAULT_SHAPE
from ..nomad import NomadClient, NomadSettings, RetryPolicy
from .check_nomad import (
    check_agents,
    check_event_stream,
    check_leader,
    check_nodes,
    check_runner_jobs,
    check_scheduler,
    check_servers,
    check_version,
)
from .check_result import CheckResult, Status, exit_code, format_result, summary
from .check_token import check_token
from .sentry import RATE, sentry_options

__all__ = [
    "CheckResult",
    "Status",
    "check",
    "configuration_result",
    "execution_user_result",
    "exit_code",
    "format_result",
    "run_checks",
    "sentry_result",
    "simulated_cluster_result",
    "summary",
    "tls_result",
    "value_sources",
]

# Keys whose values are written as *** wherever the check shows them.
SECRET_KEYS: Final = frozenset({"server.token", "nomad.token"})
# Nomad's own variables that fill the [nomad] keys left empty.
_NOMAD_ENVIRONMENT: Final = {
    "nomad.address": "NOMAD_ADDR",
    "nomad.token": "NOMAD_TOKEN",
    "nomad.namespace": "NOMAD_NAMESPACE",
    "nomad.ca_cert": "NOMAD_CACERT",
    "nomad.client_cert": "NOMAD_CLIENT_CERT",
    "nomad.client_key": "NOMAD_CLIENT_KEY",
}


# -- the configuration ----------------------------------------------------------------------------


def _file_keys(path: str | None) -> set[str]:
    """The ``section.key`` names the file sets (it loaded once already, so it reads)."""
    if path is None:
        return set()
    document = tomllib.loads(Path(path).read_text())
    keys = set()
    for section, table in document.items():
        for key, value in table.items() if isinstance(table, dict) else ():
            nested = value.items() if isinstance(value, dict) else ()  # [nomad.network]
            keys |= {f"{section}.{key}.{inner}" for inner, _ in nested} or {f"{section}.{key}"}
    return keys


def value_sources(settings: Settings, path: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """Where each ``section.key``'s value came from: ``default``, ``file`` or ``env NAME``; a
    [nomad] key left empty and filled by Nomad's own variable names that variable."""
    from_file = _file_keys(path)
    sources = {}
    for section, cls in SECTIONS.items():
        for key in attrs.fields(cls):
            name = f"{section}.{key.name}"
            variable = variable_name(section, key.name)
            if variable in environ:
                sources[name] = f"env {variable}"
            elif name in from_file:
                sources[name] = "file"
            elif environ.get(_NOMAD_ENVIRONMENT.get(name, "")):
                sources[name] = f"env {_NOMAD_ENVIRONMENT[name]}"
            else:
                sources[name] = "default"
    return sources


def _shown(name: str, value: Any) -> str:
    if name in SECRET_KEYS:
        return "***" if value else "''"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "[]"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def configuration_result(
    settings: Settings, path: str | None, environ: Mapping[str, str], nomad: NomadSettings | None
) -> CheckResult:
    """The configuration loaded: every key with its value and where the value came from."""
    sources = value_sources(settings, path, environ)
    width = max(len(name) for name in sources)
    lines = []
    for name, source in sources.items():
        section, _, key = name.rpartition(".")
        value = getattr(section_values(settings, section), key)
        if nomad is not None and source.startswith("env NOMAD_"):
            value = {"address": nomad.addresses}.get(key, getattr(nomad, key, value))
        lines.append(f"{name:<{width}}  {_shown(name, value):<24}  {source}")
    lines += [
        f"environments[{i}]: id {e.id}, image {e.image}, pool {e.prewarming_pool_size}  (file)"
        for i, e in enumerate(settings.environments)
    ]
    counts = {
        kind: sum(s.split()[0] == kind for s in sources.values()) for kind in ("file", "env", "default")
    }
    where = f"from {path}" if path else "no file"
    detail = (
        f"valid ({where}): {len(sources)} keys, {counts['file']} from the file, {counts['env']} from the "
        f"environment, {counts['default']} defaults; {len(settings.environments)} environments declared"
    )
    return CheckResult("configuration", Status.OK, detail, lines=tuple(lines))


def execution_user_result(settings: Settings) -> CheckResult:
    """Who students' code runs as: under ``[execution] unprivileged_wrapper``, or, with it empty, as
    the task's user (root in CodeOcean's images), which Poseidon never does."""
    wrapper = settings.execution.unprivileged_wrapper
    if wrapper.strip():
        return CheckResult(
            "execution user",
            Status.OK,
            f"executions, listings and downloads without privilegedExecution run under {wrapper!r}.",
        )
    return CheckResult(
        "execution user",
        Status.WARN,
        "execution.unprivileged_wrapper is empty: students' code, and the listings and downloads "
        "without privilegedExecution, run as the task's user, root in CodeOcean's images; nothing "
        "keeps their code from the files it was given read-only.",
        fix='set execution.unprivileged_wrapper = "/sbin/setuser user", as Poseidon runs them.',
    )


def tls_result(settings: Settings) -> CheckResult | None:
    """The API's certificate and key (``[server.tls]``), loaded as ``supervisor run`` would; None
    when the API serves plain HTTP."""
    tls = settings.server_tls
    if not tls.cert_file:
        return None
    try:
        server_context(tls.cert_file, tls.key_file, tls.min_version)
    except ConfigError as error:
        return CheckResult(
            "tls", Status.FAIL, f"{error}.", fix="point server.tls at a readable PEM chain and its key."
        )
    return CheckResult(
        "tls", Status.OK, f"the API serves TLS {tls.min_version} or later with {tls.cert_file}."
    )


def sentry_result(environ: Mapping[str, str]) -> CheckResult | None:
    """``supervisor check``'s line on Sentry; None when no ``SENTRY_*`` variable is set."""
    if not any(name.startswith("SENTRY_") for name in environ):
        return None
    fix = f"set {RATE} to a number from 0 (no tracing) to 1 (every request)."
    try:
        options = sentry_options(environ)
    except ConfigError as error:
        return CheckResult("sentry", Status.FAIL, f"{error}.", fix=fix)
    if not options.dsn:
        return CheckResult("sentry", Status.OK, "off: SENTRY_DSN is not set, nothing is reported.")
    try:
        import sentry_sdk  # noqa: F401
    except ImportError:
        return CheckResult(
            "sentry",
            Status.WARN,
            "SENTRY_DSN is set, but sentry-sdk is not installed: nothing is reported.",
            fix="pip install 'nomad-runner-supervisor[sentry]'.",
        )
    traced = (
        f"traces {options.traces_sample_rate:g} of the API's requests that come without a sample decision"
        if options.traces_sample_rate > 0
        else "no traces"
    )
    host = urlsplit(options.dsn).hostname or "?"
    return CheckResult(
        "sentry",
        Status.OK,
        f"reports errors to {host} as release {options.release}"
        f"{f', environment {options.environment}' if options.environment else ''}; {traced}.",
    )


def simulated_cluster_result(settings: Settings, *, loopback: bool) -> CheckResult:
    """The embedded simulated cluster (no Nomad address anywhere): a laptop's cluster, whose exec
    runs commands as local processes; off loopback ``supervisor run`` refuses it."""
    detail = (
        "the embedded simulated cluster (no nomad.address, no NOMAD_ADDR): commands run as local "
        "processes of this user, not in containers; for development only."
    )
    fix = "point nomad.address (or NOMAD_ADDR) at a Nomad cluster for anything but development."
    if loopback:
        return CheckResult("nomad", Status.WARN, detail, fix=fix)
    return CheckResult(
        "nomad",
        Status.FAIL,
        f"{detail} supervisor run refuses it on server.address {settings.server.address}, off loopback.",
        fix="point nomad.address (or NOMAD_ADDR) at a Nomad cluster.",
    )


# -- running them all -----------------------------------------------------------------------------


def _token_source(source: str) -> str:
    if source == "file":
        return "nomad.token in the configuration file"
    return source.removeprefix("env ")


async def run_checks(
    settings: Settings,
    nomad: NomadSettings,
    *,
    path: str | None,
    environ: Mapping[str, str],
    report: Callable[[CheckResult], None],
    network: Network | None = None,
    embedded: bool = False,
) -> list[CheckResult]:
    """Every check in order, each result handed to ``report`` as it comes. Once no server answers,
    the checks that need Nomad are skipped."""
    results: list[CheckResult] = []

    def add(*found: CheckResult) -> None:
        for result in found:
            results.append(result)
            report(result)

    add(configuration_result(settings, path, environ, None if embedded else nomad))
    add(execution_user_result(settings))
    if (tls := tls_result(settings)) is not None:
        add(tls)
    if (sentry := sentry_result(environ)) is not None:
        add(sentry)
    if embedded:
        add(simulated_cluster_result(settings, loopback=is_loopback(settings.server.address)))
    servers, answering = await check_servers(nomad, network=network, embedded=embedded)
    add(servers)
    if not answering:
        add(CheckResult("the rest", Status.SKIP, "not run: they need a Nomad server that answers."))
        return results
    # One try per server, the ones that answered first: the checks say what fails, they do not wait.
    ordered = (*answering, *(a for a in nomad.addresses if a not in answering))
    pinned = attrs.evolve(nomad, addresses=ordered, retry=RetryPolicy(attempts=len(ordered)))
    token_source = _token_source(value_sources(settings, path, environ)["nomad.token"])
    async with NomadClient(pinned, network=network) as client:
        add(await check_leader(client))
        add(await check_version(client))
        token = await check_token(client, settings, source=token_source)
        add(*token)
        if token[0].status is Status.FAIL:
            add(CheckResult("the rest", Status.SKIP, "not run: they need a token that Nomad knows."))
            return results
        add(await check_event_stream(client, settings))
        add(await check_agents(client, settings))
        add(await check_scheduler(client))
        jobs, shape = await check_runner_jobs(client, settings)
        add(jobs)
        add(await check_nodes(client, settings, shape or DEFAULT_SHAPE))
    return results


async def check(
    settings: Settings,
    nomad: NomadSettings | None,
    *,
    path: str | None,
    environ: Mapping[str, str],
    report: Callable[[CheckResult], None],
) -> list[CheckResult]:
    """Every check against the configured Nomad; with none configured (``nomad`` None), against the
    embedded simulated cluster that ``supervisor run`` would start, as the first lines say."""
    if nomad is not None:
        return await run_checks(settings, nomad, path=path, environ=environ, report=report)
    from ..simulator import SimConfig, SimulatedCluster

    async with trio.open_nursery() as nursery:
        cluster: SimulatedCluster = await nursery.start(SimulatedCluster(SimConfig(nodes=2)).run)
        embedded = settings.nomad_settings({"NOMAD_ADDR": ",".join(cluster.addresses)})
        assert embedded is not None
        results = await run_checks(
            settings, embedded, path=path, environ=environ, report=report, embedded=True
        )
        nursery.cancel_scope.cancel("the checks are done")
    return results
