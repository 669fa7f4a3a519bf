"""Locks over Nomad Variables, for one daemon among several to hold a role: ``PUT
/v1/var/:path?lock-acquire``, ``?lock-renew`` and ``?lock-release`` through ``NomadClient``.

Nomad's contract (``nomad/variables_endpoint.go``, ``api/locks.go``, the leader's lock timers):

- ``acquire`` creates the variable if need be and answers the lock's ID; while any lock is on the
  variable, Nomad answers 409 (with the variable), which is ``None`` here.
- The TTL lies in [10 s, 24 h]. Nomad only promises that a lock does not lapse *before* its TTL: the
  leader's timer runs twice the TTL from the last renewal, and a new leader starts it afresh. Renew
  well within the TTL (Nomad's own client renews at 0.7 x TTL).
- A lapsed lock refuses renewal (409: ``renew`` is False) and stays on the variable, blocking every
  acquire, for LockDelay more; a released lock is free at once.
- Release with a lock that is no longer held is answered 409 (or 404 once the variable is gone):
  there is nothing left to release, so ``release`` returns quietly.

Every other failure leaves as the client's errors: ``NomadUnavailableError`` (transient: no answer,
or "No cluster leader") after the client's retries, ``NomadRequestError`` for a refused request. A
retried acquire whose first answer was lost finds its own lock on the variable and answers None;
that lock lapses after its TTL like any other.
"""

from __future__ import annotations

import re
from typing import Final

import orjson
from loguru import logger

from ..base.errors import NomadNotFound, NomadRequestError
from .client import NomadClient

__all__ = ["DEFAULT_LOCK_DELAY", "DEFAULT_LOCK_TTL", "MAX_LOCK_TTL", "MIN_LOCK_TTL", "VariableLocks"]

MIN_LOCK_TTL: Final = 10.0
MAX_LOCK_TTL: Final = 24 * 3600.0
DEFAULT_LOCK_TTL: Final = 15.0
DEFAULT_LOCK_DELAY: Final = 15.0
_CONFLICT: Final = 409
_VALID_PATH: Final = re.compile(r"^[a-zA-Z0-9\-_~/]{1,128}$")


def _go_duration(seconds: float) -> str:
    """Seconds as a Go duration string Nomad parses: whole seconds as "15s", others in ms."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


def _check_path(path: str) -> None:
    if not _VALID_PATH.match(path):
        raise ValueError(f"{path!r} is no Nomad variable path (letters, digits, -_~/, up to 128)")


class VariableLocks:
    """Acquire, renew and release locks over the variables of the client's namespace."""

    def __init__(self, client: NomadClient) -> None:
        self._client = client

    async def acquire(
        self, path: str, ttl: float = DEFAULT_LOCK_TTL, lock_delay: float = DEFAULT_LOCK_DELAY
    ) -> str | None:
        """Take the lock at ``path``: its ID, or None while another holds it (or it lapsed and is
        in its LockDelay). ``ttl`` and ``lock_delay`` in seconds; ValueError outside Nomad's
        bounds."""
        url = self._url(path)
        if not MIN_LOCK_TTL <= ttl <= MAX_LOCK_TTL:
            raise ValueError(f"a lock TTL lies in [{MIN_LOCK_TTL:g}, {MAX_LOCK_TTL:g}] s, got {ttl}")
        if lock_delay < 0:
            raise ValueError(f"a lock delay is not negative, got {lock_delay}")
        body = {"Path": path, "Lock": {"TTL": _go_duration(ttl), "LockDelay": _go_duration(lock_delay)}}
        try:
            response = await self._client.request("PUT", url, params={"lock-acquire": ""}, body=body)
        except NomadRequestError as exc:
            if exc.status_code == _CONFLICT:
                return None
            raise
        answer = orjson.loads(response.content)
        lock = answer.get("Lock") if isinstance(answer, dict) else None
        lock_id = lock.get("ID") if isinstance(lock, dict) else None
        if not isinstance(lock_id, str) or not lock_id:
            raise ValueError(f"Nomad's answer to lock-acquire {path} holds no Lock.ID: {response.text[:200]}")
        return lock_id

    async def renew(self, path: str, lock_id: str) -> bool:
        """Extend the lease: True, or False when the lock is lost (lapsed, released, or taken)."""
        body = {"Path": path, "Lock": {"ID": lock_id}}
        try:
            await self._client.request("PUT", self._url(path), params={"lock-renew": ""}, body=body)
        except NomadRequestError as exc:
            if isinstance(exc, NomadNotFound) or exc.status_code == _CONFLICT:
                logger.info("the lock on variable {} is lost: {}", path, exc.body.strip())
                return False
            raise
        return True

    async def release(self, path: str, lock_id: str) -> None:
        """Give the lock up, at once (no LockDelay); a lock no longer held is left as it is."""
        body = {"Path": path, "Lock": {"ID": lock_id}}
        try:
            await self._client.request("PUT", self._url(path), params={"lock-release": ""}, body=body)
        except NomadRequestError as exc:
            if not (isinstance(exc, NomadNotFound) or exc.status_code == _CONFLICT):
                raise
            logger.debug("the lock on variable {} was no longer held: {}", path, exc.body.strip())

    async def wait_for_change(self, path: str, index: int, *, wait: float) -> int:
        """Block until the variable at ``path`` changes past ``index`` (a blocking query), or
        ``wait`` passes; its ModifyIndex then, or 0 if it does not exist."""
        params = {"index": str(index), "wait": _go_duration(max(1.0, wait))} if index else {}
        try:
            response = await self._client.request(
                "GET", self._url(path), params=params, http_timeout=wait * 1.1 + 10
            )
        except NomadNotFound:
            return 0
        return int(response.headers.get("X-Nomad-Index", "0"))

    @staticmethod
    def _url(path: str) -> str:
        # The path's slashes are the variable's own; Nomad reads the rest of the URL as the path.
        _check_path(path)
        return f"/v1/var/{path}"
