"""The daemon's settings: a TOML file, every key overridable by ``SUPERVISOR_<SECTION>_<KEY>``, and
Nomad's own variables (``NOMAD_ADDR``, ``NOMAD_TOKEN``, ...) for the Nomad connection.

An invalid file or value stops startup with a ConfigError that names the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from attrs import field, frozen

from ..base.errors import ConfigError, InvalidRequest
from ..nomad import NomadSettings
from ..nomad.locks import MAX_LOCK_TTL, MIN_LOCK_TTL
from ..nomad.settings import DIRECT_EXEC_MODES
from .environments import ExecutionEnvironment, environment_from_dict

__all__ = [
    "AdmissionSettings",
    "AlertSettings",
    "ExecutionSettings",
    "FactorySettings",
    "HaSettings",
    "HealthSettings",
    "ServerSettings",
    "Settings",
    "SupervisionSettings",
    "WatcherSettings",
    "load_settings",
]


@frozen
class ServerSettings:
    """``[server]``: where the API listens, its token, and the graceful stop's budget."""

    address: str = "127.0.0.1"
    port: int = 7200
    # Empty: no authentication. Otherwise every route but health and version needs Poseidon-Token.
    token: str = ""
    version: str = ""
    graceful_timeout: float = 15.0
    # A request body larger than this (bytes) is a 413, refused before it is read whole.
    max_body: int = 64 * 1024 * 1024
    # A client's WebSocket message (stdin) larger than this (bytes) closes its socket with 1009.
    max_message: int = 1024 * 1024
    # At most this many delete and copy entries in one PATCH of a runner's files.
    max_files: int = 10_000


@frozen
class AdmissionSettings:
    """``[admission]``: how long new work waits for Nomad before it is refused."""

    # How long a claim or a new execution waits for the event stream before 500 NOMAD_UNREACHABLE,
    # and a call waits for a runner's agent that a server cannot reach before 410.
    wait_timeout: float = 5.0
    # How often such a call tries the agent again meanwhile.
    agent_retry_interval: float = 0.5


@frozen
class WatcherSettings:
    """``[watcher]``: the periodic relist and the event stream's heartbeat deadline."""

    # Relist and reconcile this often even while the stream runs: Nomad loses jobs without an event.
    resync_interval: float = 60.0
    heartbeat_timeout: float = 45.0


@frozen
class AlertSettings:
    """``[alert]``: when a depleting pool is reported and reloaded."""

    prewarming_pool_threshold: float = 0.5
    reload_timeout: float = 300.0
    # How often the pools' fill is looked at.
    check_interval: float = 1.0


@frozen
class FactorySettings:
    """``[factory]``: how fast runner jobs are registered, and the retries' backoff cap."""

    registrations_per_second: float = 100.0
    # New runner jobs starting on one agent, at most, counting those not placed yet on every agent:
    # more go to other agents, and wait while every agent is at it.
    max_starting: int = 10
    max_backoff: float = 30.0


@frozen
class ExecutionSettings:
    """``[execution]``: stopping commands, execution URLs, the workspace and the task."""

    # After timeLimit, the command gets this long to stop before its runner is replaced.
    stop_grace: float = 3.0
    # An execution URL not connected within this long is forgotten.
    connect_timeout: float = 60.0
    # Workspace path inside a runner; absolute paths outside it are refused.
    workspace: str = "/workspace"
    # Prefix of unprivileged commands (for example "/sbin/setuser user"); empty runs them as is.
    unprivileged_wrapper: str = ""
    task: str = "default-task"


@frozen
class SupervisionSettings:
    """``[supervision]``: the restart intensity of the daemon's children."""

    # More restarts of the daemon's children than this within period seconds: stop gracefully.
    intensity: int = 5
    period: float = 30.0


@frozen
class HealthSettings:
    """``[health]``: when a down stream is critical, and how long Nomad's check may take."""

    # The stream down this long turns health critical (a reconnect takes less).
    stream_down_grace: float = 30.0
    # How long health details wait for Nomad's leader before calling Nomad unreachable.
    nomad_check_timeout: float = 2.0


@frozen
class NomadSection:
    address: tuple[str, ...] = ()
    token: str = ""
    namespace: str = ""
    ca_cert: str = ""
    client_cert: str = ""
    client_key: str = ""
    request_timeout: float = 10.0
    exec_connect_timeout: float = 10.0
    close_timeout: float = 2.0
    direct_exec: str = "auto"
    agent_connect_timeout: float = 1.0


LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")


@frozen
class LogSettings:
    """``[log]``: how much is logged, as text or one JSON object per line, and the access log."""

    level: str = "INFO"
    format: str = "text"
    # One line per HTTP request, through the same log stream.
    access: bool = False


@frozen
class HaSettings:
    """``[ha]``: an active and standby daemons, elected through a Nomad Variables lock."""

    enabled: bool = False
    lock_path: str = "supervisor/leader"
    # Seconds. Nomad takes a lock TTL of 10 s to 24 h; a lapsed lock stays blocked lock_delay more.
    ttl: float = 10.0
    lock_delay: float = 5.0


@frozen
class Settings:
    """Every section, as loaded by ``load_settings``; the defaults are the product's."""

    server: ServerSettings = field(factory=ServerSettings)
    nomad: NomadSection = field(factory=NomadSection)
    admission: AdmissionSettings = field(factory=AdmissionSettings)
    watcher: WatcherSettings = field(factory=WatcherSettings)
    alert: AlertSettings = field(factory=AlertSettings)
    factory: FactorySettings = field(factory=FactorySettings)
    execution: ExecutionSettings = field(factory=ExecutionSettings)
    health: HealthSettings = field(factory=HealthSettings)
    supervision: SupervisionSettings = field(factory=SupervisionSettings)
    log: LogSettings = field(factory=LogSettings)
    ha: HaSettings = field(factory=HaSettings)
    environments: tuple[ExecutionEnvironment, ...] = ()

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


_SECTIONS: Final[dict[str, type[Any]]] = {
    "server": ServerSettings,
    "nomad": NomadSection,
    "admission": AdmissionSettings,
    "watcher": WatcherSettings,
    "alert": AlertSettings,
    "factory": FactorySettings,
    "execution": ExecutionSettings,
    "health": HealthSettings,
    "supervision": SupervisionSettings,
    "log": LogSettings,
    "ha": HaSettings,
}


def _convert(key: str, value: Any, default: Any) -> Any:
    """``value`` (from TOML or an environment string) as the type of ``default``."""
    from_env = isinstance(value, str)
    try:
        if isinstance(default, bool):
            if from_env:
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("1", "true", "yes")
            if not isinstance(value, bool):
                raise TypeError(value)
            return value
        if isinstance(default, int) and not isinstance(default, bool):
            if isinstance(value, bool) or (not from_env and not isinstance(value, int)):
                raise TypeError(value)
            return int(value)
        if isinstance(default, float):
            if isinstance(value, bool) or (not from_env and not isinstance(value, int | float)):
                raise TypeError(value)
            return float(value)
        if isinstance(default, tuple):
            items = value.split(",") if from_env else ([value] if isinstance(value, str) else value)
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise TypeError(value)
            return tuple(i.strip() for i in items if i.strip())
        if not isinstance(value, str):
            raise TypeError(value)
        return value
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: {value!r} is not a valid {type(default).__name__}") from None


def _section(name: str, cls: type[Any], table: Mapping[str, Any], environ: Mapping[str, str]) -> Any:
    if not isinstance(table, Mapping):
        raise ConfigError(f"[{name}] must be a table")
    defaults = cls()
    known = {a.name for a in cls.__attrs_attrs__}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{name}.{unknown[0]}: unknown key (known: {', '.join(sorted(known))})")
    values = {}
    for attribute in known:
        env_name = f"SUPERVISOR_{name}_{attribute}".upper()
        raw = environ[env_name] if env_name in environ else table.get(attribute)
        if raw is not None:
            where = env_name if env_name in environ else f"{name}.{attribute}"
            values[attribute] = _convert(where, raw, getattr(defaults, attribute))
    settings = cls(**values)
    return settings


def load_settings(path: str | Path | None, environ: Mapping[str, str]) -> Settings:
    """Settings from ``path`` (or ``SUPERVISOR_CONFIG``; none: defaults) and the environment."""
    path = path or environ.get("SUPERVISOR_CONFIG") or None
    document: dict[str, Any] = {}
    if path is not None:
        try:
            document = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
    unknown = sorted(set(document) - set(_SECTIONS) - {"environments"})
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown section")
    sections = {name: _section(name, cls, document.get(name, {}), environ) for name, cls in _SECTIONS.items()}
    raw_environments = document.get("environments", [])
    if not isinstance(raw_environments, list):
        raise ConfigError("environments: must be an array of tables ([[environments]])")
    try:
        environments = tuple(
            environment_from_dict(entry, where=f"environments[{i}]", snake_case=True)
            for i, entry in enumerate(raw_environments)
        )
    except InvalidRequest as exc:
        raise ConfigError(str(exc)) from None
    settings = Settings(**sections, environments=environments)
    _validate(settings)
    return settings


def _validate_choices(settings: Settings) -> None:
    if settings.nomad.direct_exec not in DIRECT_EXEC_MODES:
        raise ConfigError(
            f"nomad.direct_exec: {settings.nomad.direct_exec!r} is not one of {', '.join(DIRECT_EXEC_MODES)}"
        )
    if settings.log.level.upper() not in LOG_LEVELS:
        raise ConfigError(f"log.level: {settings.log.level!r} is not one of {', '.join(LOG_LEVELS)}")
    if settings.log.format not in LOG_FORMATS:
        raise ConfigError(f"log.format: {settings.log.format!r} is not one of {', '.join(LOG_FORMATS)}")


def _validate_ha(ha: HaSettings) -> None:
    if not MIN_LOCK_TTL <= ha.ttl <= MAX_LOCK_TTL:
        raise ConfigError(
            f"ha.ttl: {ha.ttl:g} is outside what Nomad takes for a lock's TTL ({MIN_LOCK_TTL:g} s to 24 h)"
        )
    if ha.lock_delay < 0:
        raise ConfigError("ha.lock_delay: must not be negative")
    if (
        not ha.lock_path
        or ha.lock_path.startswith("/")
        or not all(c.isalnum() or c in "-_~/" for c in ha.lock_path)
    ):
        raise ConfigError(f"ha.lock_path: {ha.lock_path!r} is no Nomad variable path (letters, digits, -_~/)")


def _validate(settings: Settings) -> None:
    if not 0 <= settings.server.port <= 65535:
        raise ConfigError(f"server.port: {settings.server.port} is outside 0-65535")
    if not 0 <= settings.alert.prewarming_pool_threshold <= 1:
        raise ConfigError("alert.prewarming_pool_threshold: must be between 0 and 1")
    _validate_choices(settings)
    if settings.factory.registrations_per_second <= 0:
        raise ConfigError("factory.registrations_per_second: must be positive")
    if settings.factory.max_starting < 1:
        raise ConfigError("factory.max_starting: must be at least 1")
    if settings.watcher.resync_interval <= 0 or settings.watcher.heartbeat_timeout <= 0:
        raise ConfigError("watcher.resync_interval and watcher.heartbeat_timeout: must be positive")
    for name in ("admission.wait_timeout", "execution.stop_grace", "execution.connect_timeout"):
        section, key = name.split(".")
        if getattr(getattr(settings, section), key) < 0:
            raise ConfigError(f"{name}: must not be negative")
    for name in (
        "alert.check_interval",
        "admission.agent_retry_interval",
        "health.stream_down_grace",
        "health.nomad_check_timeout",
        "nomad.request_timeout",
        "nomad.exec_connect_timeout",
        "nomad.close_timeout",
        "nomad.agent_connect_timeout",
        "server.max_body",
        "server.max_message",
        "server.max_files",
    ):
        section, key = name.split(".")
        if getattr(getattr(settings, section), key) <= 0:
            raise ConfigError(f"{name}: must be positive")
    if settings.supervision.intensity < 0 or settings.supervision.period <= 0:
        raise ConfigError(
            "supervision.intensity must not be negative, and supervision.period must be positive"
        )
    if not settings.execution.workspace.startswith("/"):
        raise ConfigError("execution.workspace: must be an absolute path")
    _validate_ha(settings.ha)
    ids = [e.id for e in settings.environments]
    if len(ids) != len(set(ids)):
        raise ConfigError("environments: an id appears twice")
