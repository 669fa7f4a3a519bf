"""``supervisor health``: the monitoring probe. Exit codes follow the monitoring-plugin convention:
0 OK, 1 WARNING (degraded), 2 CRITICAL, 3 UNKNOWN (the daemon cannot be reached or its answer read)."""

from __future__ import annotations

from typing import Any, Final

import httpx
import orjson

__all__ = ["EXIT_CODES", "probe"]

EXIT_CODES: Final = {"ok": 0, "warning": 1, "critical": 2}
UNKNOWN: Final = 3


def _summary(document: dict[str, Any]) -> str:
    checks = document.get("checks", {})
    stream = checks.get("event_stream", {})
    pools = checks.get("pools", {})
    state = stream.get("state", "?")
    seconds = stream.get("down_seconds", "?") if state != "up" else stream.get("for_seconds", "?")
    faults = checks.get("faults", {}).get("faults") or []
    parts = [f"{fault['reason']}; {fault['remedy']}" for fault in faults]
    parts.append(f"stream {state} for {seconds}s")
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


def probe(url: str, *, token: str, timeout: float, as_json: bool) -> tuple[int, str]:
    """The exit code and what to print for the daemon at ``url``: one line for a monitoring check,
    or with ``as_json`` a JSON document whatever happened (``{"status": "unknown", "message"}`` when
    there is no health document to show)."""

    def unknown(message: str) -> tuple[int, str]:
        if as_json:
            return UNKNOWN, orjson.dumps({"status": "unknown", "message": message}).decode()
        return UNKNOWN, f"UNKNOWN: {message}"

    headers = {"Poseidon-Token": token} if token else {}
    try:
        response = httpx.get(url.rstrip("/") + "/api/v1/health/details", headers=headers, timeout=timeout)
    except Exception as exc:  # a bad URL included: whatever it is, the answer is UNKNOWN
        return unknown(f"the supervisor at {url} cannot be reached: {exc}")
    standby = _standby(response) if response.status_code == 503 else None
    if standby is not None:
        # A healthy standby (HA): nothing is wrong with it, and the active one is checked on its own.
        if as_json:
            return 0, orjson.dumps({"status": "standby", "message": standby}).decode()
        return 0, f"OK: standby: {standby}"
    if response.status_code != 200:
        return unknown(f"the supervisor at {url} answered HTTP {response.status_code}")
    try:
        document = orjson.loads(response.content)
        status = document["status"]
        code = EXIT_CODES[status]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return unknown(f"the supervisor at {url} gave an answer that is not a health document")
    if as_json:
        return code, orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    try:
        return code, f"{status.upper()}: {_summary(document)}"
    except (AttributeError, TypeError, KeyError):
        return unknown(f"the supervisor at {url} gave a health document this probe cannot read")
