"""The settings: each section a frozen attrs class, each key with its default, its rule and its line of
documentation (``config_rules.setting``). This is the one source of what a key is: the loader
structures files and variables into these classes, ``supervisor config example`` writes them out,
and a value outside its rule cannot be made.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from attrs import field, frozen

from ..nomad import NomadSettings
from ..nomad.locks import MAX_LOCK_TTL, MIN_LOCK_TTL
from ..nomad.settings import DIRECT_EXEC_MODES
from .config_rules import (
    NOT_EMPTY,
    POSITIVE,
    Rule,
    absolute_path,
    at_least,
    between,
    one_of,
    required,
    setting,
    up_to,
)
from .environments import MAX_AMOUNT, MAX_ID, ExecutionEnvironment

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MIN_SECRET_LENGTH",
    "SECRET_TOKEN",
    "AdmissionSettings",
    "AlertSettings",
    "EnvironmentEntry",
    "ExecutionSettings",
    "FactorySettings",
    "HaSettings",
    "HealthSettings",
    "LogSettings",
    "NetworkSettings",
    "NomadSection",
    "ServerSettings",
    "Settings",
    "SupervisionSettings",
    "TlsSettings",
    "WatcherSettings",
]

LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")
# A token shorter than this is refused when the configuration loads: it is no secret, and masking
# it in the log would give it away.
MIN_SECRET_LENGTH: Final = 6
# The largest prewarming pool an environment may ask for.
MAX_POOL_SIZE: Final = 10_000

_COUNT: Final = at_least(1)
_SECONDS: Final = "seconds"
_NOMAD_URL: Final = Rule(
    "an http:// or https:// URL",
    lambda v: isinstance(v, str) and urlsplit(v).scheme in ("http", "https") and bool(urlsplit(v).hostname),
)
_VARIABLE_PATH: Final = Rule(
    "letters, digits, -_~/ (ASCII, 128 at most); not nomad/",
    lambda v: (
        isinstance(v, str)
        and re.fullmatch(r"[a-zA-Z0-9\-_~/]{1,128}", v) is not None
        and not v.startswith("/")
        and v.split("/")[0] != "nomad"  # Nomad's own, but for its jobs' variables
    ),
)


def _network_or_any(value: object) -> bool:
    if value == "*":
        return True
    try:
        ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return False
    return isinstance(value, str)


_PROXY_ADDRESS: Final = Rule('an IP address, a network (CIDR) or "*"', _network_or_any)
# A token: none, or one long enough to be secret.
SECRET_TOKEN: Final = Rule(
    f"empty, or {MIN_SECRET_LENGTH} characters or more",
    lambda v: isinstance(v, str) and (not v or len(v) >= MIN_SECRET_LENGTH),
)


@frozen
class ServerSettings:
    """``[server]``: where the API listens, its token, the graceful stop's budget and the limits."""

    address: str = setting("127.0.0.1", "off loopback, a Nomad address is required")
    port: int = setting(7200, "", between(0, 65535))
    token: str = setting(
        "", "set: Poseidon-Token required (not on health and version)", SECRET_TOKEN, secret=True
    )
    version: str = setting("", "what GET /api/v1/version answers; empty: the package's version")
    graceful_timeout: float = setting(
        15.0, 'the whole stop\'s budget on SIGTERM/SIGINT (see "Stopping")', at_least(0), unit=_SECONDS
    )
    max_body: int = setting(64 * 1024 * 1024, "a request body larger is a 413", _COUNT, unit="bytes")
    max_message: int = setting(
        1024 * 1024, "one WebSocket message from a client; larger closes it (1009)", _COUNT, unit="bytes"
    )
    max_files: int = setting(10_000, "delete and copy entries in one PATCH of a runner's files", _COUNT)
    forwarded_allow_ips: tuple[str, ...] = setting(
        ("127.0.0.1", "::1"),
        'proxies whose X-Forwarded-Proto or Forwarded proto=https is believed (wss:// URLs); "*": any',
        _PROXY_ADDRESS,
        each=True,
    )
    header_timeout: float = setting(
        15.0,
        "a request line and headers not all read by then: the connection closes",
        POSITIVE,
        unit=_SECONDS,
    )
    body_timeout: float = setting(
        15.0,
        "a request body that sends nothing for this long, or is slower than body_min_rate over any such "
        "span: 408, the connection closes; a large body that waits this long for room: 503",
        POSITIVE,
        unit=_SECONDS,
    )
    body_min_rate: int = setting(
        1024,
        "the slowest request body taken, judged over each body_timeout waited for",
        at_least(0),
        unit="bytes/s",
    )
    idle_timeout: float = setting(
        60.0, "a keep-alive connection with no request begun is closed after this", POSITIVE, unit=_SECONDS
    )
    max_requests_per_connection: int = setting(
        1000, "a keep-alive connection closes after this many requests", _COUNT
    )
    max_connections: int = setting(
        10_000,
        "client connections open at once; past it, or past the descriptors left over fd_reserve, a new "
        "one is answered 503 and closed",
        _COUNT,
    )
    fd_reserve: int = setting(
        256, "file descriptors never taken by client connections (Nomad, files, the log)", at_least(16)
    )
    write_timeout: float = setting(
        30.0,
        "a response or WebSocket write that moves nothing for this long cuts its connection",
        POSITIVE,
        unit=_SECONDS,
    )
    websocket_ping_interval: float = setting(
        20.0, "a WebSocket silent this long is pinged; 0: never", at_least(0), unit=_SECONDS
    )
    websocket_ping_timeout: float = setting(
        20.0, "a ping not answered by then closes the WebSocket (1011)", POSITIVE, unit=_SECONDS
    )


@frozen
class TlsSettings:
    """``[server.tls]``: the API over TLS, as Poseidon serves it; both files or neither."""

    cert_file: str = setting("", "PEM certificate chain; empty (with key_file): plain HTTP")
    key_file: str = setting("", "PEM private key; re-read with the certificate on SIGHUP")
    min_version: str = setting("1.3", "the oldest TLS version served (Poseidon: 1.3)", one_of("1.2", "1.3"))


@frozen
class NomadSection:
    """``[nomad]``: the Nomad connection; Nomad's own variables fill the keys left empty."""

    address: tuple[str, ...] = setting(
        (), "URLs; empty: NOMAD_ADDR, and without it the embedded simulated cluster", _NOMAD_URL, each=True
    )
    token: str = setting("", "or NOMAD_TOKEN", SECRET_TOKEN, secret=True)
    namespace: str = setting("", 'or NOMAD_NAMESPACE ("default")')
    ca_cert: str = setting("", "or NOMAD_CACERT")
    client_cert: str = setting("", "or NOMAD_CLIENT_CERT")
    client_key: str = setting("", "or NOMAD_CLIENT_KEY")
    request_timeout: float = setting(10.0, "one REST call", POSITIVE, unit=_SECONDS)
    exec_connect_timeout: float = setting(
        10.0,
        "an exec WebSocket not open by then: nothing ran, the next server is tried",
        POSITIVE,
        unit=_SECONDS,
    )
    close_timeout: float = setting(
        2.0, "closing an exec session or the event stream, before it is abandoned", POSITIVE, unit=_SECONDS
    )
    direct_exec: str = setting(
        "auto",
        'exec to the allocation\'s client agent first ("auto"), only ("always"), or through the servers '
        'only ("never"); see docs/nomad-client.md',
        one_of(*DIRECT_EXEC_MODES),
    )
    agent_connect_timeout: float = setting(
        1.0, "an agent not connected by then: exec goes through the servers", POSITIVE, unit=_SECONDS
    )
    job_template: str = setting(
        "",
        "the runner job's template, a file: HCL (parsed by Nomad's /v1/jobs/parse) or .json (Nomad's API "
        "JSON); empty: Poseidon's default (see docs/configuration.md)",
    )
    disable_force_pull: bool = setting(
        False, "true: never force_pull; otherwise as Poseidon (pools filled, environments registered)"
    )


@frozen
class NetworkSettings:
    """``[nomad.network]``: the group network of every runner with networkAccess."""

    mode: str = setting("bridge", 'Nomad\'s network mode, e.g. "cni/secure-bridge"', NOT_EMPTY)
    dns_servers: tuple[str, ...] = setting((), "empty: the node's resolvers")
    dns_searches: tuple[str, ...] = setting((), "")
    dns_options: tuple[str, ...] = setting((), 'e.g. ["ndots:2"]')


@frozen
class AdmissionSettings:
    """``[admission]``: how long new work waits for Nomad before it is refused."""

    wait_timeout: float = setting(
        5.0,
        "how long a claim or execution waits for the event stream (then 500 NOMAD_UNREACHABLE), and a "
        "call waits for a runner's agent that a server cannot reach",
        at_least(0),
        unit=_SECONDS,
    )
    agent_retry_interval: float = setting(
        0.5, "how often such a call tries the agent again meanwhile", POSITIVE, unit=_SECONDS
    )


@frozen
class WatcherSettings:
    """``[watcher]``: the periodic relist and the event stream's heartbeat deadline."""

    resync_interval: float = setting(
        60.0,
        "relist and reconcile this often even while the stream runs (the safety net: Nomad loses jobs "
        "without an event; see docs/recovery.md)",
        POSITIVE,
        unit=_SECONDS,
    )
    heartbeat_timeout: float = setting(
        45.0,
        "no line from the stream for this long: reconnect (backoff 0.5 s to 10 s with full jitter, "
        "reset after a connection up 2 s)",
        POSITIVE,
        unit=_SECONDS,
    )


@frozen
class AlertSettings:
    """``[alert]``: when a depleting pool is reported and reloaded."""

    prewarming_pool_threshold: float = setting(
        0.5, "health is 503 PREWARMING_POOL_DEPLETING below this fill", between(0, 1)
    )
    reload_timeout: float = setting(
        300.0, "a pool below the threshold this long is reloaded (relisted)", at_least(0), unit=_SECONDS
    )
    check_interval: float = setting(1.0, "how often the pools' fill is looked at", POSITIVE, unit=_SECONDS)


@frozen
class FactorySettings:
    """``[factory]``: how fast runner jobs are registered, and the retries' backoff cap."""

    registrations_per_second: float = setting(
        100.0, "new runner jobs a second: also the ceiling on executions", POSITIVE
    )
    max_starting: int = setting(
        10,
        "new runner jobs starting on one agent at most, those not placed yet counting on each: more go "
        "to other agents, or wait",
        _COUNT,
    )
    max_backoff: float = setting(
        30.0, "the longest pause before a failed write is retried", at_least(0), unit=_SECONDS
    )


@frozen
class ExecutionSettings:
    """``[execution]``: stopping commands, execution URLs, the workspace and the task."""

    stop_grace: float = setting(
        3.0, "a stopped command's TERM, then KILL after this", at_least(0), unit=_SECONDS
    )
    connect_timeout: float = setting(
        60.0, "an execution URL not connected within this is forgotten", at_least(0), unit=_SECONDS
    )
    workspace: str = setting("/workspace", "the workspace inside a runner: a boundary", absolute_path())
    unprivileged_wrapper: str = setting(
        "/sbin/setuser user", 'prefixes commands unless privilegedExecution ("": none)'
    )
    shell: str = setting("/bin/bash", "an execution's command runs as <shell> -c <command>", absolute_path())
    tty: bool = setting(True, "executions run on a terminal (exec with tty=true), as Poseidon's")
    interactive_stderr: bool = setting(
        True, "on a terminal, stderr apart (a second exec reads it); false: in stdout"
    )
    task: str = setting("default-task", "the runner job's task that commands run in", NOT_EMPTY)


@frozen
class HealthSettings:
    """``[health]``: when a down stream is critical, and how long Nomad's check may take."""

    stream_down_grace: float = setting(
        30.0, "the stream down this long turns health critical (warning before)", POSITIVE, unit=_SECONDS
    )
    nomad_check_timeout: float = setting(
        2.0, "health details wait this long for Nomad's leader", POSITIVE, unit=_SECONDS
    )


@frozen
class SupervisionSettings:
    """``[supervision]``: the restart intensity of the daemon's children."""

    intensity: int = setting(
        5, "more restarts of the daemon's children than this within period: stop (exit 1)", at_least(0)
    )
    period: float = setting(30.0, "the window in which restarts are counted", POSITIVE, unit=_SECONDS)


@frozen
class LogSettings:
    """``[log]``: how much is logged, as text or one JSON object per line, and the access log."""

    level: str = setting(
        "INFO", "also --log-level; SIGHUP reloads it", one_of(*LOG_LEVELS, case_sensitive=False)
    )
    format: str = setting(
        "text",
        "or json: one flat JSON object per line; also --log-format; SIGHUP reloads it",
        one_of(*LOG_FORMATS),
    )
    access: bool = setting(False, "one line per HTTP request and WebSocket, in the same stream")


@frozen
class HaSettings:
    """``[ha]``: an active and standby daemons, elected through a Nomad Variables lock."""

    enabled: bool = setting(False, "true: act only while holding the lock; otherwise answer 503 STANDBY")
    lock_path: str = setting(
        "supervisor/leader", "the Nomad variable whose lock elects the active daemon", _VARIABLE_PATH
    )
    ttl: float = setting(
        10.0,
        "renewed every ttl / 3; what Nomad takes for a lock's TTL",
        between(MIN_LOCK_TTL, MAX_LOCK_TTL),
        unit=_SECONDS,
    )
    lock_delay: float = setting(
        5.0, "a lapsed lock stays blocked this long before another may take it", at_least(0), unit=_SECONDS
    )


@frozen
class EnvironmentEntry:
    """``[[environments]]``: none by default; each one declared is ensured at startup."""

    id: int = required(10, "", between(0, MAX_ID))
    image: str = required("openhpi/co_execenv_python:3.8", "", NOT_EMPTY)
    prewarming_pool_size: int = required(5, "idle runners kept warm", between(0, MAX_POOL_SIZE))
    cpu_limit: float = required(20, "MHz", up_to(MAX_AMOUNT))
    memory_limit: int = required(512, "MB", between(1, MAX_AMOUNT))
    network_access: bool = required(False, "")
    exposed_ports: tuple[int, ...] = required((), "", between(1, 65535), each=True)


@frozen
class Settings:
    """Every section, as loaded by ``load_settings``; the defaults are the product's."""

    server: ServerSettings = field(factory=ServerSettings)
    server_tls: TlsSettings = field(factory=TlsSettings, metadata={"section": "server.tls"})
    nomad: NomadSection = field(factory=NomadSection)
    nomad_network: NetworkSettings = field(factory=NetworkSettings, metadata={"section": "nomad.network"})
    admission: AdmissionSettings = field(factory=AdmissionSettings)
    watcher: WatcherSettings = field(factory=WatcherSettings)
    alert: AlertSettings = field(factory=AlertSettings)
    factory: FactorySettings = field(factory=FactorySettings)
    execution: ExecutionSettings = field(factory=ExecutionSettings)
    health: HealthSettings = field(factory=HealthSettings)
    supervision: SupervisionSettings = field(factory=SupervisionSettings)
    log: LogSettings = field(factory=LogSettings)
    ha: HaSettings = field(factory=HaSettings)
    environments: tuple[ExecutionEnvironment, ...] = field(default=())

    def nomad_settings(self, environ: Mapping[str, str]) -> NomadSettings | None:
        """The Nomad connection, or None for the embedded simulated cluster (no address anywhere)."""
        overrides: dict[str, object] = {
            "token": self.nomad.token,
            "namespace": self.nomad.namespace,
            "ca_cert": self.nomad.ca_cert,
            "client_cert": self.nomad.client_cert,
            "client_key": self.nomad.client_key,
            "request_timeout": self.nomad.request_timeout,
            "exec_connect_timeout": self.nomad.exec_connect_timeout,
            "close_timeout": self.nomad.close_timeout,
            "direct_exec": self.nomad.direct_exec,
            "agent_connect_timeout": self.nomad.agent_connect_timeout,
        }
        if self.nomad.address:
            overrides["addresses"] = self.nomad.address
        elif not environ.get("NOMAD_ADDR"):
            return None
        return NomadSettings.from_env(environ, **overrides)
