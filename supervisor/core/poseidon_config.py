"""``supervisor config import-poseidon``: Poseidon's settings (``poseidon_settings``) written as our
configuration file, so that the daemon runs as Poseidon ran.

Every key Poseidon has a counterpart of here is written with the value Poseidon runs with, its
defaults included: Poseidon's defaults are not always ours (its Nomad at ``127.0.0.1:4646``, its pool
alert off), and a file that says every value needs no knowledge of either to be read. Each key with
no counterpart is a comment that says what to do instead, where it applies, and a change Poseidon's
operator must know of (an executor or a network setting that is not carried over) is a note for
stderr too. Keys of ours Poseidon has none of are left out: they keep our defaults.

What Poseidon would not start with, and what this daemon cannot express (a token too short to be
secret here, a pool threshold above 1), is a ConfigError naming the key.
"""

from __future__ import annotations

import ipaddress
import textwrap
from collections.abc import Iterator
from typing import Any, Final, final

from attrs import frozen

from ..base.errors import ConfigError
from .config_example import toml_value
from .config_schema import MIN_SECRET_LENGTH
from .poseidon_settings import PoseidonSettings

__all__ = ["Translation", "translate"]

_COMMENT_COLUMN: Final = 30
_WIDTH: Final = 100
# logrus.ParseLevel's names (any case) and ours.
_LEVELS: Final = {
    "panic": "CRITICAL",
    "fatal": "CRITICAL",
    "error": "ERROR",
    "warn": "WARNING",
    "warning": "WARNING",
    "info": "INFO",
    "debug": "DEBUG",
    "trace": "TRACE",
}
_HEADER: Final = """\
# Translated by `supervisor config import-poseidon` from Poseidon's configuration:
#   {source}
# Every Poseidon key with a counterpart here is written, with the value Poseidon runs with, its
# defaults included; beside it, the Poseidon key and where its value came from (a line of the
# file, a POSEIDON_* variable, or Poseidon's default). Each key without one is a comment saying
# what to do instead. Keys of ours not written here keep our defaults: `supervisor config example`
# lists them all, docs/switch-over.md is the way through the switch."""
_SECRETS: Final = """\
# It holds tokens, as Poseidon's file did: make it readable by the daemon's user only (0640), or
# move them to the service's environment file (SUPERVISOR_SERVER_TOKEN, NOMAD_TOKEN)."""
_MONITORING: Final = (
    "scrape GET /metrics with Prometheus instead; alert rules and a dashboard ship in scripts/monitoring/"
)


@final
@frozen
class Translation:
    """Our configuration file's text, and the notes for stderr: what runs differently from Poseidon."""

    text: str
    notes: tuple[str, ...]


def _wrapped(code: str, comment: str) -> Iterator[str]:
    """``code`` with ``comment`` beside it (or alone, as a comment line), wrapped at the width."""
    if not code:
        lines = textwrap.wrap(comment, width=_WIDTH - 2, break_on_hyphens=False, break_long_words=False)
        yield from (f"# {line}" for line in lines)
        return
    column = max(_COMMENT_COLUMN, len(code) + 2)
    lines = textwrap.wrap(
        comment, width=max(_WIDTH - column - 2, 30), break_on_hyphens=False, break_long_words=False
    )
    yield f"{code:<{column}}# {lines[0]}"
    yield from (f"{'':<{column}}# {line}" for line in lines[1:])


class _Writer:
    """The file's sections as they are written, and the notes."""

    def __init__(self, settings: PoseidonSettings) -> None:
        self.settings = settings
        self.lines: list[str] = []
        self.notes: list[str] = []

    def section(self, name: str) -> None:
        self.lines += ["", f"[{name}]"]

    def key(self, ours: str, value: Any, poseidon: str, comment: str = "") -> None:
        """``ours = value``, the Poseidon key(s) it comes from and where from, and ``comment``."""
        keys = poseidon.split(" + ")
        said = " + ".join(f"{k} ({self.settings.origin(k)})" for k in keys)
        said += f"; {comment}" if comment else ""
        self.lines += _wrapped(f"{ours} = {toml_value(value)}", said)

    def path(self, ours: str, poseidon: str, comment: str = "") -> None:
        """A file's path: a relative one was Poseidon's working directory's, which the service's
        is not (systemd starts it in /), so it is a note too."""
        path = str(self.settings[poseidon])
        if path and not path.startswith("/"):
            relative = "relative to Poseidon's working directory: write it absolute"
            comment = f"{comment}; {relative}" if comment else relative
            self.note(poseidon, f"{path!r} is {relative}")
        self.key(ours, path, poseidon, comment)

    def comment(self, poseidon: str, text: str, *, shown: bool = True) -> None:
        """A Poseidon key without a counterpart: its value (unless ``shown`` is false: a secret),
        where it came from, and ``text``, what to do instead."""
        value = self.settings[poseidon]
        written = f" = {_yaml_value(value)}" if shown else ""
        self.lines += _wrapped("", f"{poseidon}{written} ({self.settings.origin(poseidon)}): {text}")

    def note(self, poseidon: str, text: str) -> None:
        self.notes.append(f"{poseidon} ({self.settings.origin(poseidon)}): {text}")


def _yaml_value(value: Any) -> str:
    """A Poseidon value as its file would write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return toml_value(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _secret(settings: PoseidonSettings, key: str) -> str:
    token = str(settings[key])
    if 0 < len(token) < MIN_SECRET_LENGTH:
        raise ConfigError(
            f"{key} ({settings.origin(key)}): a token of {len(token)} characters is too short to be secret "
            f"here ({MIN_SECRET_LENGTH} or more); choose a longer one"
            + (" and give it to CodeOcean (runner_management.token)" if key == "server.token" else "")
        )
    return token


def _port(settings: PoseidonSettings, key: str) -> int:
    port = int(settings[key])
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key} ({settings.origin(key)}): {port} is not a port (0 to 65535)")
    return port


def _host(address: str) -> str | None:
    """A host for a URL, an IPv6 address in brackets (as Poseidon's ``address:port`` needs it);
    None for what is no host name or address (a URL, a port)."""
    bare = address.removeprefix("[").removesuffix("]")
    if ":" not in bare:
        return None if not bare or "/" in bare or bare != address else bare
    try:
        return f"[{ipaddress.IPv6Address(bare)}]"
    except ValueError:
        return None


def _server(w: _Writer) -> None:
    s = w.settings
    w.section("server")
    address = str(s["server.address"]).strip("[]")
    if address:
        w.key("address", address, "server.address")
    else:
        w.key("address", "0.0.0.0", "server.address", "Poseidon's empty address listened on every one")
    w.key("port", _port(s, "server.port"), "server.port")
    w.key("token", _secret(s, "server.token"), "server.token", "CodeOcean's runner_management.token")
    activation = (
        "no key here: the daemon serves the socket systemd passes whenever it passes one; keep the "
        "socket unit (ours: scripts/systemd/nomad-runner-supervisor.socket, docs/serving.md)"
        if s["server.systemdsocketactivation"]
        else "no key here: without a socket unit the daemon binds the address itself, as Poseidon did; "
        "with ours (docs/install.md) a restart refuses no connection"
    )
    w.comment("server.systemdsocketactivation", activation)
    if s.given("server.loggingfiltertoken"):
        w.comment(
            "server.loggingfiltertoken",
            "no key here: no request is logged unless [log] access is true, and then every one; "
            "filter a probe's User-Agent in the log pipeline",
            shown=False,
        )
    _server_tls(w)


def _server_tls(w: _Writer) -> None:
    s = w.settings
    w.section("server.tls")
    if not s["server.tls.active"]:
        w.comment("server.tls.active", "plain HTTP, as Poseidon served it: no certificate written")
        for key in ("server.tls.certfile", "server.tls.keyfile"):
            if s[key]:
                w.comment(key, "unused while server.tls.active is false, as Poseidon left it")
    else:
        for key in ("server.tls.certfile", "server.tls.keyfile"):
            if not s[key]:
                raise ConfigError(
                    f"{key} ({s.origin(key)}): empty while server.tls.active is true: Poseidon "
                    "cannot serve TLS without it either"
                )
        w.path("cert_file", "server.tls.certfile")
        w.path("key_file", "server.tls.keyfile")
        w.key("min_version", "1.3", "server.tls.active", "TLS 1.3 at least, as Poseidon serves it")
    if s["server.tls.cafile"]:
        w.comment(
            "server.tls.cafile",
            "no key here: Poseidon's systemd watchdog trusted it to call its own /health; this daemon "
            "does not call itself. CodeOcean's runner_management.ca_file stays as it is",
        )


def _nomad(w: _Writer) -> None:
    s = w.settings
    w.section("nomad")
    tls = bool(s["nomad.tls.active"])
    address = str(s["nomad.address"])
    host = _host(address)
    if host is None:
        raise ConfigError(
            f"nomad.address ({s.origin('nomad.address')}): {address!r} is not a host name or address, "
            "which Poseidon joins with nomad.port"
        )
    url = f"{'https' if tls else 'http'}://{host}:{_port(s, 'nomad.port')}"
    w.key("address", [url], "nomad.address + nomad.port + nomad.tls.active")
    w.key("token", _secret(s, "nomad.token"), "nomad.token", "empty: NOMAD_TOKEN, if set")
    w.key("namespace", s["nomad.namespace"], "nomad.namespace")
    for key, ours in (("cafile", "ca_cert"), ("certfile", "client_cert"), ("keyfile", "client_key")):
        if tls:
            w.path(ours, f"nomad.tls.{key}")
        elif s[f"nomad.tls.{key}"]:
            w.comment(f"nomad.tls.{key}", "unused while nomad.tls.active is false, as Poseidon left it")
    template = str(s["server.templatejobfile"])
    comment = (
        "HCL, which Nomad parses: the token needs parse-job (supervisor check says so)"
        if template
        else "empty: Poseidon's own template, ours by default"
    )
    if template.endswith(".json"):
        comment = "Poseidon read it as HCL, this daemon reads a .json file as Nomad's API JSON: rename it"
        w.note("server.templatejobfile", comment)
    w.path("job_template", "server.templatejobfile", comment)
    w.key("disable_force_pull", s["nomad.disableforcepull"], "nomad.disableforcepull")
    w.comment("nomad.enabled", "no key here: this daemon always runs its runners on Nomad")
    if not s["nomad.enabled"]:
        w.note("nomad.enabled", "false: Poseidon ran no runner on Nomad; this daemon always does")
    _network(w)


def _network(w: _Writer) -> None:
    s = w.settings
    w.section("nomad.network")
    mode = str(s["nomad.network.mode"])
    if mode:
        w.key("mode", mode, "nomad.network.mode")
    else:
        w.key("mode", "host", "nomad.network.mode", "Nomad takes an empty mode as host")
    for key in ("servers", "searches", "options"):
        w.key(f"dns_{key}", list(s[f"nomad.network.dns.{key}"]), f"nomad.network.dns.{key}")
    dropped = [
        path
        for key in ("device", "cidr", "ip", "hostname", "reservedports", "dynamicports", "mbits", "cni")
        if s.given(path := f"nomad.network.{key}") and s[path] not in ("", (), None)
    ]
    text = "not carried over: a runner's group network here is the mode, DNS and its exposed ports"
    for path in dropped:
        w.comment(path, text)
    if dropped:
        w.notes.append(f"{', '.join(dropped)}: {text}")


def _alert(w: _Writer) -> None:
    s = w.settings
    w.section("alert")
    threshold = float(s["server.alert.prewarmingpoolthreshold"])
    if threshold > 1:
        raise ConfigError(
            f"server.alert.prewarmingpoolthreshold ({s.origin('server.alert.prewarmingpoolthreshold')}): "
            f"{threshold:g} keeps Poseidon's health in warning for good; here it must be 0 to 1"
        )
    comment = "0: never in warning" if threshold <= 0 else ""
    w.key("prewarming_pool_threshold", max(threshold, 0.0), "server.alert.prewarmingpoolthreshold", comment)
    reload_timeout = s["server.alert.prewarmingpoolreloadtimeout"]
    comment = "0: never reloaded" if reload_timeout == 0 else ""
    w.key("reload_timeout", reload_timeout, "server.alert.prewarmingpoolreloadtimeout", comment)


def _execution_and_log(w: _Writer) -> None:
    s = w.settings
    w.section("execution")
    w.key("interactive_stderr", s["server.interactivestderr"], "server.interactivestderr")
    w.section("log")
    level = str(s["logger.level"])
    if level.lower() not in _LEVELS:
        raise ConfigError(
            f"logger.level ({s.origin('logger.level')}): {level!r} is no level logrus knows "
            "(Poseidon stops on it too)"
        )
    w.key("level", _LEVELS[level.lower()], "logger.level")
    formatter = str(s["logger.formatter"])
    comment = "" if formatter in ("TextFormatter", "JSONFormatter") else "Poseidon logged text for any other"
    w.key("format", "json" if formatter == "JSONFormatter" else "text", "logger.formatter", comment)


def _sentry(w: _Writer) -> list[str]:
    """Comments for Sentry's keys, which are variables here; and the variables' lines."""
    s = w.settings
    variables = {
        "sentry.dsn": "SENTRY_DSN",
        "sentry.environment": "SENTRY_ENVIRONMENT",
        "sentry.release": "SENTRY_RELEASE",
        "sentry.debug": "SENTRY_DEBUG",
    }
    lines = []
    for key, variable in variables.items():
        if s[key]:
            w.comment(key, f"the variable {variable} here", shown=key != "sentry.dsn")
            lines.append(f"{variable}={str(s[key]).lower() if key == 'sentry.debug' else s[key]}")
    rate = float(s["sentry.tracessamplerate"]) if s["sentry.enabletracing"] else 0.0
    for key in ("sentry.enabletracing", "sentry.tracessamplerate"):
        if s.given(key):
            w.comment(key, "the variable SENTRY_TRACES_SAMPLE_RATE here (0: no traces)")
    if rate > 0:
        lines.append(f"SENTRY_TRACES_SAMPLE_RATE={rate:g}")
    for key in (k for k in s.values if k.startswith("sentry.") and k not in variables):
        if s.given(key) and key not in ("sentry.enabletracing", "sentry.tracessamplerate"):
            w.comment(key, "no counterpart here")
    return lines


def _without_counterpart(w: _Writer) -> None:
    s = w.settings
    w.lines += ["", "# -- Poseidon's keys with no key in this file --", ""]
    if s["aws.enabled"]:
        w.note("aws.enabled", "true: the environments Poseidon served from AWS Lambda are not served here")
    for key in ("aws.enabled", "aws.endpoint", "aws.functions"):
        if key == "aws.enabled" or s.given(key):
            w.comment(key, "not supported: there is no AWS Lambda executor here")
    w.comment("profiling.cpuenabled", "no counterpart: a Go CPU profile for Poseidon's PGO build")
    if s.given("profiling.cpufile"):
        w.comment("profiling.cpufile", "no counterpart")
    for key in ("profiling.memoryinterval", "profiling.memorythreshold"):
        if key == "profiling.memoryinterval" or s.given(key):
            w.comment(
                key,
                "no in-process watchdog: alert on process_resident_memory_bytes from GET /metrics "
                "(scripts/monitoring/)",
            )
    for key in (f"influxdb.{k}" for k in ("url", "token", "organization", "bucket", "stage")):
        if key == "influxdb.url" or s.given(key):
            w.comment(key, f"no InfluxDB here: {_MONITORING}", shown=key != "influxdb.token")
    variables = _sentry(w)
    if variables:
        w.lines += _wrapped("", "For the service's environment file (docs/install.md), Sentry's variables:")
        w.lines += [f"#   {line}" for line in variables]
    else:
        w.lines += _wrapped("", "sentry.dsn is empty: no errors to Sentry, as Poseidon (SENTRY_DSN here)")


def translate(settings: PoseidonSettings, *, source: str) -> Translation:
    """Our configuration file for ``settings``, read from ``source`` (named in the header)."""
    w = _Writer(settings)
    w.lines.append(_HEADER.format(source=source))
    if settings["server.token"] or settings["nomad.token"]:
        w.lines.append(_SECRETS)
    try:
        _server(w)
        _nomad(w)
        _alert(w)
        _execution_and_log(w)
        _without_counterpart(w)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    return Translation("\n".join(w.lines) + "\n", tuple(w.notes))
