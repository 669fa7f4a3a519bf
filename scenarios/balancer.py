"""A load balancer in front of the HA scenario's daemons, as ``scripts/haproxy.cfg`` configures
HAProxy: health checks of ``GET /api/v1/health/ready`` with HAProxy's rise and fall counter and its
three intervals, each request sent to a daemon it has up, and sent again to another after a refused
connection or a 503 (``retries 3``, ``option redispatch 1``, ``retry-on conn-failure 503``). Beside
it, ``Readiness`` reads each daemon's readiness every 50 ms: what the balancer's marks are held to.
A daemon the balancer starts to check is down until its first check passes (a daemon that was just
started, on an address that refused the checks meanwhile).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx
import trio

# The balancer, as scripts/haproxy.cfg configures HAProxy: check intervals while up, while going up
# or down, while down; checks failed to mark a daemon down, passed to mark it up; a check's timeout;
# how often a request is sent again (to another daemon) after a refused connection or a 503.
INTER, FASTINTER, DOWNINTER, FALL, RISE, CHECK_TIMEOUT, RETRIES = 1.0, 0.25, 0.5, 2, 1, 2.0, 3
# A check's own time on a loaded machine, at most: the slack of the two bounds below.
CHECK_SLACK = 0.5
# A daemon that stops being ready is marked down within this: its next check within INTER, the
# FALL - 1 more each FASTINTER after the one before.
MARK_DOWN_BOUND = INTER + (FALL - 1) * FASTINTER + CHECK_SLACK
# A daemon that turns ready is marked up within this: RISE checks, each DOWNINTER after the last.
PICK_UP_BOUND = RISE * DOWNINTER + CHECK_SLACK
# How often the scenario itself reads each daemon's readiness (what the balancer's marks are held
# to), and how far those reads may lag behind the balancer's checks.
_TRUTH_EVERY, TRUTH_LAG = 0.05, 0.5


def _error_code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("errorCode", ""))
    except (ValueError, AttributeError):
        return ""


class Backend:
    """One daemon as the balancer sees it: HAProxy's health counter, from 0 to RISE + FALL - 1."""

    def __init__(self, name: str, api: str) -> None:
        self.name, self.api = name, api
        # Down at first: a daemon just (re)started, whose address refused the checks meanwhile.
        self.health, self.up = 0, False
        self.scope = trio.CancelScope()

    def interval(self) -> float:
        if not self.up:
            return DOWNINTER if self.health == 0 else FASTINTER
        return INTER if self.health == RISE + FALL - 1 else FASTINTER


class Balancer:
    """A load balancer in front of the daemons: health checks of ``/health/ready``, and each request
    sent to a daemon it has up; what it marked, and every request a standby answered."""

    def __init__(self, http: httpx.AsyncClient, nursery: trio.Nursery) -> None:
        self.http, self.nursery = http, nursery
        self.backends: dict[str, Backend] = {}
        # (monotonic time, daemon, "up" or "down", the answer of the check that decided it)
        self.marks: list[tuple[float, str, str, str]] = []
        # (monotonic time, daemon) of each request a standby answered 503 STANDBY.
        self.standby_answers: list[tuple[float, str]] = []
        # Requests it answered 503 itself: no daemon up.
        self.no_server = 0
        self._turn = 0

    def add(self, name: str, api: str) -> None:
        self.remove(name)
        backend = self.backends[name] = Backend(name, api)
        self.nursery.start_soon(self._check, backend)

    def remove(self, name: str) -> None:
        backend = self.backends.pop(name, None)
        if backend is not None:
            backend.scope.cancel()

    def is_up(self, name: str) -> bool:
        backend = self.backends.get(name)
        return backend is not None and backend.up

    async def _check(self, backend: Backend) -> None:
        with backend.scope:
            while True:
                try:
                    answer = await self.http.get(f"{backend.api}/health/ready", timeout=CHECK_TIMEOUT)
                    passed, said = answer.status_code == 204, f"{answer.status_code} {_error_code(answer)}"
                except httpx.HTTPError as exc:
                    passed, said = False, type(exc).__name__
                self._count(backend, passed, said)
                await trio.sleep(backend.interval())

    def _count(self, backend: Backend, passed: bool, said: str) -> None:
        """HAProxy's rule: a pass raises the health up to its top, and marks a down daemon up once
        it reaches RISE; a failure lowers it while above RISE, and marks an up daemon down after."""
        if passed:
            backend.health = min(backend.health + 1, RISE + FALL - 1)
            if not backend.up and backend.health >= RISE:
                backend.up = True
                self.marks.append((time.monotonic(), backend.name, "up", said))
        elif backend.health > RISE:
            backend.health -= 1
        else:
            if backend.up:
                self.marks.append((time.monotonic(), backend.name, "down", said))
            backend.up, backend.health = False, 0

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send to a daemon that is up (``path`` under /api/v1); again, to another one if there is,
        after a refused connection or a 503; the balancer's own 503 when none is up."""
        last: httpx.Response | None = None
        tried: Backend | None = None
        for _ in range(1 + RETRIES):
            ups = [b for b in self.backends.values() if b.up]
            candidates = [b for b in ups if b is not tried] or ups
            if not candidates:
                break
            backend = tried = candidates[self._turn % len(candidates)]
            self._turn += 1
            try:
                response = await self.http.request(method, backend.api + path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                continue
            if response.status_code != 503:
                return response
            if _error_code(response) == "STANDBY":
                self.standby_answers.append((time.monotonic(), backend.name))
            last = response
        if last is not None:
            return last
        self.no_server += 1
        return httpx.Response(503, json={"message": "no server is available", "errorCode": "BALANCER"})


class Readiness:
    """What each daemon's ``/health/ready`` said, read every 50 ms: when each turned ready and when
    it stopped being so; and, while ``health_of`` names one, what its ``/health`` said."""

    def __init__(self, apis: Callable[[], dict[str, str]], http: httpx.AsyncClient) -> None:
        self.apis, self.http = apis, http
        # (monotonic time, daemon, ready now) at each change.
        self.changes: list[tuple[float, str, bool]] = []
        self.health_of: str | None = None
        # (ready answers not 204, /health answers 503) while health_of was set.
        self.unready, self.health_503 = 0, 0

    async def run(self) -> None:
        ready: dict[str, bool] = {}
        while True:
            for name, api in list(self.apis().items()):
                try:
                    answer = await self.http.get(f"{api}/health/ready", timeout=CHECK_TIMEOUT)
                except httpx.HTTPError:
                    now = False
                else:
                    now = answer.status_code == 204
                if ready.get(name, False) != now:
                    self.changes.append((time.monotonic(), name, now))
                ready[name] = now
                if name == self.health_of:
                    self.unready += not now
                    with contextlib.suppress(httpx.HTTPError):
                        self.health_503 += (await self.http.get(f"{api}/health")).status_code == 503
            await trio.sleep(_TRUTH_EVERY)

    def last_change(self, name: str, ready: bool, before: float) -> float | None:
        """When ``name`` last turned ``ready`` (or not) before ``before``, give or take the lag of
        these reads behind the balancer's checks (they run apart)."""
        times = [
            t for t, who, now in self.changes if who == name and now is ready and t <= before + TRUTH_LAG
        ]
        return times[-1] if times else None
