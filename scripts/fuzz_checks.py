"""Checks of our own for ``scripts/fuzz_api.py``, loaded by schemathesis as its hooks module."""

from __future__ import annotations

from typing import Any

import schemathesis

_HEALTH_STATES = frozenset({"PREWARMING_POOL_DEPLETING", "NOMAD_UNREACHABLE"})


@schemathesis.check
def no_server_error_but_overload(ctx: Any, response: Any, case: Any) -> None:
    """No 5xx, except those that Poseidon's contract gives a condition of the cluster, not the
    request: 500 NOMAD_OVERLOAD, an environment with no idle runner at that moment; and health's
    503 while a pool fills (PREWARMING_POOL_DEPLETING: a generated environment's new pool, for a
    moment) or the event stream is down."""
    if response.status_code < 500:
        return
    try:
        code = response.json().get("errorCode")
    except Exception:  # not JSON: a server error all the same
        code = None
    if response.status_code == 500 and code == "NOMAD_OVERLOAD":
        return
    if response.status_code == 503 and case.path.endswith("/health") and code in _HEALTH_STATES:
        return
    raise AssertionError(f"{response.status_code} {code or ''}: {response.text[:300]}")


@schemathesis.check
def refusals_are_json(ctx: Any, response: Any, case: Any) -> None:
    """Every answer of 400 or more is a JSON object with a message (a 500 with an errorCode too),
    but a 401, which Poseidon answers without a body."""
    if response.status_code < 400 or response.status_code == 401:
        return
    try:
        body = response.json()
    except Exception:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("message"), str):
        raise AssertionError(f"{response.status_code} without a JSON message: {response.text[:300]}")
    if response.status_code >= 500 and not isinstance(body.get("errorCode"), str):
        raise AssertionError(f"{response.status_code} without an errorCode: {response.text[:300]}")
