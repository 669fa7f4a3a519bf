"""``supervisor health``: the monitoring probe. Exit codes follow the monitoring-plugin convention:
0 OK, 1 WARNING (degraded), 2 CRITICAL, 3 UNKNOWN (the daemon cannot be reached or its answer read,
or the probe was called wrongly).

Over https://, the daemon's certificate is verified against the CA certificates ``--ca-file``
names, or without it httpx's default: the bundle ``SSL_CERT_FILE`` names, else certifi's public CAs.
"""

from __future__ import annotations

import ssl
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import orjson

__all__ = ["EXIT_CODES", "UNKNOWN", "ca_context", "probe", "unknown", "url_problem"]

EXIT_CODES: Final = {"ok": 0, "warning": 1, "critical": 2}
UNKNOWN: Final = 3
_SCHEMES: Final = ("http", "https")
_HOSTNAME_MISMATCH: Final = 62  # OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH


def url_problem(url: str) -> str | None:
    """What is wrong with the daemon's URL, or None: it needs http:// or https:// and a host."""
    parts = urlsplit(url)
    if "://" not in url:
        return f"no scheme: write it as http://{url}"
    if parts.scheme not in _SCHEMES:
        return f"the scheme {parts.scheme!r} is not http or https"
    if not parts.hostname:
        return "no host"
    try:
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:
        return "the port is not a number from 0 to 65535"
    return None


def ca_context(ca_file: str) -> ssl.SSLContext:
    """A client context that trusts the CA certificates in ``ca_file`` (PEM) and no others;
    ValueError saying why the file does not load."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as exc:
        raise ValueError(f"no PEM CA certificate in it ({exc.reason or exc})") from None
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None


def _untrusted(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure under ``exc`` (httpx wraps it), if that is what it is."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def unknown(message: str, *, as_json: bool) -> tuple[int, str]:
    """UNKNOWN (exit 3) and ``message``, as a line or as JSON."""
    if as_json:
        return UNKNOWN, orjson.dumps({"status": "unknown", "message": message}).decode()
    return UNKNOWN, f"UNKNOWN: {message}"


def _summary(document: dict[str, Any]) -> str:
    checks = document.get("checks", {})
    stream = checks.get("event_stream", {})
    pools = checks.get("pools", {})
    state = stream.get("state", "?")
    seconds = stream.get("down_seconds", "?") if state != "up" else stream.get("for_seconds", "?")
    faults = checks.get("faults", {}).get("faults") or []
    parts = [f"{fault['reason']}; {fault['remedy']}" for fault in faults]
    parts.append(f"stream {state} for {seconds}s")
    if checks.get("nomad", {}).get("simulated"):
        parts.append("Nomad is the embedded simulated cluster (for development only)")
    if checks.get("nomad", {}).get("status") == "critical":
        parts.append(f"Nomad unreachable ({checks['nomad'].get('error', '')})")
    if pools.get("depleting"):
        parts.append(f"pools depleting: {', '.join(pools['depleting'])}")
    if checks.get("draining_nodes", {}).get("nodes"):
        parts.append(f"draining: {', '.join(checks['draining_nodes']['nodes'])}")
    parts.append(f"{checks.get('executions', {}).get('running', 0)} executions running")
    return "; ".join(parts)


def _standby(response: httpx.Response) -> str | None:
    """The standby's own word, if this is a standby's answer."""
    try:
        document = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or document.get("errorCode") != "STANDBY":
        return None
    return str(document.get("message") or "the standby")


def probe(
    url: str, *, token: str, timeout: float, as_json: bool, verify: ssl.SSLContext | None = None
) -> tuple[int, str]:
    """The exit code and what to print for the daemon at ``url``: one line for a monitoring check,
    or with ``as_json`` a JSON document whatever happened (``{"status": "unknown", "message"}`` when
    there is no health document to show). ``verify``: the TLS context that verifies the daemon's
    certificate (``ca_context``), httpx's default without it."""

    headers = {"Poseidon-Token": token} if token else {}
    try:
        response = httpx.get(
            url.rstrip("/") + "/api/v1/health/details",
            headers=headers,
            timeout=timeout,
            verify=True if verify is None else verify,
        )
    except Exception as exc:  # a bad URL included: whatever it is, the answer is UNKNOWN
        if untrusted := _untrusted(exc):
            remedy = (
                "give --url a host its certificate names"
                if untrusted.verify_code == _HOSTNAME_MISMATCH
                else "pass the CA certificate that issued it with --ca-file"
            )
            return unknown(
                f"the supervisor at {url} cannot be reached: its certificate is not trusted "
                f"({untrusted.verify_message}); {remedy}",
                as_json=as_json,
            )
        hint = ""
        if isinstance(exc, httpx.RemoteProtocolError) and urlsplit(url).scheme == "http":
            hint = " (if it serves TLS, probe its https:// URL, with --ca-file for a private CA)"
        return unknown(f"the supervisor at {url} cannot be reached: {exc}{hint}", as_json=as_json)
    standby = _standby(response) if response.status_code == 503 else None
    if standby is not None:
        # A healthy standby (HA): nothing is wrong with it, and the active one is checked on its own.
        if as_json:
            return 0, orjson.dumps({"status": "standby", "message": standby}).decode()
        return 0, f"OK: standby: {standby}"
    if response.status_code == 401:
        what = "refuses the token given" if token else "wants a token"
        return unknown(
            f"the supervisor at {url} answered HTTP 401: it {what}; pass its server.token with --token, "
            "--token-file or SUPERVISOR_SERVER_TOKEN",
            as_json=as_json,
        )
    if response.status_code != 200:
        return unknown(f"the supervisor at {url} answered HTTP {response.status_code}", as_json=as_json)
    try:
        document = orjson.loads(response.content)
        status = document["status"]
        code = EXIT_CODES[status]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return unknown(
            f"the supervisor at {url} gave an answer that is not a health document", as_json=as_json
        )
    if as_json:
        return code, orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    try:
        return code, f"{status.upper()}: {_summary(document)}"
    except (AttributeError, TypeError, KeyError):
        return unknown(
            f"the supervisor at {url} gave a health document this probe cannot read", as_json=as_json
        )
