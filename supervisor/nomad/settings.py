"""Where Nomad is and how to talk to it, read the way Nomad's own CLI reads its environment."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import urlsplit

from attrs import field, frozen

from ..base.backoff import BackoffPolicy
from ..base.errors import ConfigError

__all__ = ["DEFAULT_NOMAD_ADDR", "DIRECT_EXEC_MODES", "NomadSettings", "RetryPolicy"]

DEFAULT_NOMAD_ADDR: Final = "http://127.0.0.1:4646"
# Whether exec goes to the allocation's client agent first ("auto", with the servers as fallback),
# only there ("always"), or only through the servers ("never").
DIRECT_EXEC_MODES: Final = ("auto", "always", "never")
# What Go's strconv.ParseBool reads as true, as Nomad's CLI reads NOMAD_SKIP_VERIFY.
_GO_TRUE: Final = ("1", "t", "T", "TRUE", "true", "True")


class _NamedContext(ssl.SSLContext):
    """A TLS context that checks one fixed name on every peer's certificate, whatever address it
    dials: a server's ``tls_server_name``, or ``client.<region>.nomad`` on a client agent."""

    checked_name: str = ""

    def wrap_bio(self, *args: object, **kwargs: object) -> ssl.SSLObject:
        kwargs["server_hostname"] = self.checked_name or kwargs.get("server_hostname")
        return super().wrap_bio(*args, **kwargs)  # type: ignore[arg-type]

    def wrap_socket(self, *args: object, **kwargs: object) -> ssl.SSLSocket:
        kwargs["server_hostname"] = self.checked_name or kwargs.get("server_hostname")
        return super().wrap_socket(*args, **kwargs)  # type: ignore[arg-type]


def _direct_exec(value: str) -> str:
    if value not in DIRECT_EXEC_MODES:
        raise ConfigError(f"nomad.direct_exec: {value!r} is not one of {', '.join(DIRECT_EXEC_MODES)}")
    return value


def _addresses(value: Sequence[str]) -> tuple[str, ...]:
    addresses = tuple(a.strip().rstrip("/") for a in value if a.strip())
    for address in addresses:
        parts = urlsplit(address)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"nomad.address: {address!r} is not an http:// or https:// URL")
    return addresses


@frozen
class RetryPolicy:
    """How the client retries a transient failure: exponential backoff with full jitter.

    ``attempts`` counts every try, the first included; 1 means never retry.
    """

    attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 5.0

    def delay(self, attempt: int, random_fraction: float) -> float:
        """The pause before try ``attempt + 1`` (``attempt`` >= 1), given a uniform number in [0, 1)."""
        return BackoffPolicy(self.base_delay, self.max_delay).delay(attempt, random_fraction)


@frozen
class NomadSettings:
    """Connection settings; ``addresses`` lists every server, tried in turn when one fails."""

    addresses: tuple[str, ...] = field(default=(DEFAULT_NOMAD_ADDR,), converter=_addresses)
    token: str = ""
    namespace: str = "default"
    region: str = ""
    ca_cert: str = ""
    client_cert: str = ""
    client_key: str = ""
    tls_server_name: str = ""
    skip_verify: bool = False
    request_timeout: float = 10.0
    # An exec WebSocket not open within this long: nothing ran, the next server is tried.
    exec_connect_timeout: float = 10.0
    # How long closing an exec session or the event stream may take before it is abandoned.
    close_timeout: float = 2.0
    retry: RetryPolicy = field(factory=RetryPolicy)
    direct_exec: str = field(default="auto", converter=_direct_exec)
    # An allocation's agent not connected within this long: exec goes through the servers instead
    # (Nomad's own API client waits 1 s, its ClientConnTimeout).
    agent_connect_timeout: float = 1.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: object) -> NomadSettings:
        """Settings from ``NOMAD_ADDR``, ``NOMAD_TOKEN``, ``NOMAD_NAMESPACE``, ``NOMAD_REGION``,
        ``NOMAD_CACERT``, ``NOMAD_CLIENT_CERT``, ``NOMAD_CLIENT_KEY``, ``NOMAD_TLS_SERVER_NAME`` and
        ``NOMAD_SKIP_VERIFY``; ``overrides`` (non-empty values only) win over the environment."""
        values: dict[str, object] = {}
        if addr := environ.get("NOMAD_ADDR", ""):
            values["addresses"] = addr.split(",")
        for key, name in (
            ("token", "NOMAD_TOKEN"),
            ("namespace", "NOMAD_NAMESPACE"),
            ("region", "NOMAD_REGION"),
            ("ca_cert", "NOMAD_CACERT"),
            ("client_cert", "NOMAD_CLIENT_CERT"),
            ("client_key", "NOMAD_CLIENT_KEY"),
            ("tls_server_name", "NOMAD_TLS_SERVER_NAME"),
        ):
            if environ.get(name):
                values[key] = environ[name]
        if environ.get("NOMAD_SKIP_VERIFY", "") in _GO_TRUE:
            values["skip_verify"] = True
        values.update({k: v for k, v in overrides.items() if v not in (None, "", ())})
        return cls(**values)  # type: ignore[arg-type]

    @property
    def uses_tls(self) -> bool:
        """Whether any server is reached over https."""
        return any(a.startswith("https://") for a in self.addresses)

    @property
    def agent_tls_name(self) -> str:
        """The name a client agent's certificate carries, as Nomad's API client checks it."""
        return f"client.{self.region or 'global'}.nomad"

    def ssl_context(self, *, checked_name: str = "", always: bool = False) -> ssl.SSLContext | None:
        """The TLS context for https addresses (CA, client certificate), or None for plain http
        (unless ``always``). ``checked_name`` is the name checked on every peer's certificate;
        empty, the name dialled (or ``tls_server_name``, when set)."""
        if not (self.uses_tls or always):
            return None
        if bool(self.client_cert) != bool(self.client_key):
            raise ConfigError("nomad.client_cert and nomad.client_key must be given together")
        context = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
        context.checked_name = checked_name or self.tls_server_name
        try:
            if self.ca_cert:
                context.load_verify_locations(cafile=self.ca_cert)
            else:
                context.load_default_certs()
            if self.client_cert:
                context.load_cert_chain(self.client_cert, self.client_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"nomad TLS files could not be loaded: {exc}") from exc
        if self.skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context
