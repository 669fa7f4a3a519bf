"""CodeOcean-like clients of the simulated run: each claims a runner, copies a file into it, runs
commands whose whole output it knows beforehand (stdout, stderr, stdin echoed, sleeps, exit codes,
time limits), and gives the runner back, or leaves it to its inactivity timeout. What each sees goes
to the checks as it happens.

The executions run as the daemon's settings run them: by default on a terminal, so what a client
expects is what the terminal makes of the command's output (its stdin echoed first, ``\r\n`` line
ends, stderr apart through no terminal, or merged into stdout without ``interactive_stderr``).
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import trio
import trio_websocket
from attrs import define

from ..core.config import ExecutionSettings
from ..nomad.transport import network_transport
from .checks import Checks, Execution
from .walk_away import walk_away, walk_away_drawn
from .world import DaemonSlot, World

__all__ = ["Student", "run_students"]

_TERMINAL: Final = ("exit", "timeout", "error")
# How long a client waits for one answer, or for an execution's next message, before it gives up.
_PATIENCE: Final = 60.0
_FILE: Final = "main.txt"


@define(eq=False)
class Command:
    """A command, and what a client must see of it when it runs whole."""

    text: str
    stdout: str
    stderr: str = ""
    exit: int | None = 0  # None: a timeout is expected
    stdin: str = ""
    time_limit: int = 30

    def as_run(self, settings: ExecutionSettings) -> Command:
        """What a client sees of it when it runs with ``settings``: on a terminal, the echo of its
        stdin, then its output with ``\r\n`` line ends; its stderr apart as written, or merged."""
        if not settings.tty:
            return self
        stdout = (self.stdin + self.stdout).replace("\n", "\r\n")
        stderr = self.stderr
        if not settings.interactive_stderr:  # no command here writes both
            stdout, stderr = stdout + stderr.replace("\n", "\r\n"), ""
        return Command(self.text, stdout, stderr, self.exit, self.stdin, self.time_limit)


def _commands(rng: random.Random, token: str, content: str) -> Command:
    kind = rng.randrange(6)
    if kind == 0:
        return Command(f"cat {_FILE} && echo {token}", f"{content}{token}\n")
    if kind == 1:
        pause = round(rng.uniform(0.1, 5.0), 1)
        return Command(f"sleep {pause} && echo {token}", f"{token}\n")
    if kind == 2:
        return Command(f"echo {token} >&2; exit 3", "", stderr=f"{token}\n", exit=3)
    if kind == 3:
        return Command("cat", f"{token}\n", exit=None, stdin=f"{token}\n", time_limit=2)
    if kind == 4:
        lines = rng.randrange(100, 3000)
        return Command(
            f"seq {lines}; echo {token}", "".join(f"{i}\n" for i in range(1, lines + 1)) + f"{token}\n"
        )
    return Command(f"echo {token}; sleep 100", f"{token}\n", exit=None, time_limit=1)


@define(eq=False)
class Student:
    """One client of the daemon, with its own random generator."""

    name: str
    rng: random.Random
    world: World
    checks: Checks
    environments: list[int]
    until: float
    served: int = 0
    _tokens: int = 0
    slot: DaemonSlot | None = None

    def _token(self) -> str:
        self._tokens += 1
        return f"{self.name}t{self._tokens}"

    async def run(self) -> None:
        """Claim, copy, execute and release until ``until`` (virtual time)."""
        transport = network_transport(self.world.network)
        async with httpx.AsyncClient(transport=transport, timeout=_PATIENCE) as http:
            while trio.current_time() < self.until:
                await trio.sleep(round(self.rng.uniform(0.2, 3.0), 2))
                try:
                    await self._session(http)
                except (httpx.TransportError, trio.BrokenResourceError, OSError) as error:
                    self.checks.note(f"{self.name}: {type(error).__name__} {error}")

    def _base(self) -> str:
        """Where a request goes (``_daemon``'s URL)."""
        return self._daemon().url

    def _daemon(self) -> DaemonSlot:
        """Which daemon a request goes to: the one daemon; of a pair, the active one, as a
        health-checked load balancer sends it (between terms, either: a standby answers 503
        STANDBY)."""
        slots = self.world.slots
        if len(slots) > 1:
            active = self.world.active_slot()
            return active if active is not None else self.rng.choice(slots)
        if self.slot is None:
            self.slot = self.rng.choice(slots)
        return self.slot

    async def _session(self, http: httpx.AsyncClient) -> None:
        environment = self.rng.choice(self.environments)
        timeout = self.rng.choice([0, 5, 20, 60])
        asked = {"executionEnvironmentId": environment, "inactivityTimeout": timeout}
        asked_at, daemon = trio.current_time(), self._daemon()
        claim = await http.post(f"{daemon.url}/runners", json=asked)
        if claim.status_code != 200:
            self.checks.refused(self.name, "claim", claim.status_code, claim.text)
            return
        runner = claim.json()["runnerId"]
        self.checks.claimed(runner, environment, asked=asked_at)
        self.world.claim_answered(daemon)
        for _ in range(self.rng.randrange(1, 4)):
            if not await self._use(http, runner):
                return
        if self.rng.random() < 0.85:
            released = await http.delete(f"{self._base()}/runners/{runner}")
            give_up = trio.current_time() + _PATIENCE
            while self.checks.for_now(released.status_code, released.text) and trio.current_time() < give_up:
                await trio.sleep(1.0)  # as Retry-After says: a failover, or Nomad away for a moment
                released = await http.delete(f"{self._base()}/runners/{runner}")
            self.checks.released(runner, released.status_code, released.text)
        else:
            self.checks.abandoned(runner, timeout)

    async def _use(self, http: httpx.AsyncClient, runner: str) -> bool:
        """Copy a file and run one command; False once the runner is gone."""
        walk = walk_away_drawn(self.world.seed, self.name, self._tokens)
        token = f"{self.name}w{self._tokens}"
        if walk is not None and not await walk_away(
            walk, self.world, self.checks, http, self._base(), runner, token
        ):
            return False
        content = f"{self._token()}\n"
        copy = {"copy": [{"path": _FILE, "content": base64.b64encode(content.encode()).decode()}]}
        copied = await http.patch(f"{self._base()}/runners/{runner}/files", json=copy)
        if copied.status_code != 204:
            return self.checks.answered(runner, "copy", copied.status_code, copied.text)
        command = _commands(self.rng, self._token(), content).as_run(self.world.slots[0].settings.execution)
        body: dict[str, Any] = {"command": command.text, "timeLimit": command.time_limit}
        prepared = await http.post(f"{self._base()}/runners/{runner}/execute", json=body)
        if prepared.status_code != 200:
            return self.checks.answered(runner, "execute", prepared.status_code, prepared.text)
        execution = self.checks.started(runner, command.stdout, command.stderr, command.exit)
        await self._execute(prepared.json()["websocketUrl"], command, execution)
        self.checks.ended(execution)
        if self.checks.overdue is not None:
            self.checks.overdue.execution_ended(prepared.json()["websocketUrl"], runner, trio.current_time())
        self.served += 1
        return not execution.gone

    async def _execute(self, url: str, command: Command, execution: Execution) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        try:
            stream = await self.world.network.connect(parts.hostname, parts.port)
        except OSError as error:
            execution.dropped = f"connect: {error}"
            return
        try:
            await self._open(stream, parts.hostname, f"{parts.path}?{parts.query}", command, execution)
        except* trio_websocket.ConnectionRejected as group:
            rejected = group.exceptions[0]
            assert isinstance(rejected, trio_websocket.ConnectionRejected)
            execution.rejected = rejected.status_code

    async def _open(
        self, stream: trio.abc.Stream, host: str, target: str, command: Command, execution: Execution
    ) -> None:
        with trio.move_on_after(_PATIENCE) as waited:
            async with trio.open_nursery() as nursery:
                try:
                    ws = await trio_websocket.wrap_client_stream(
                        nursery,
                        stream,  # type: ignore[arg-type]  # any trio stream
                        host,
                        target,
                    )
                except (trio_websocket.HandshakeError, trio.BrokenResourceError, OSError) as error:
                    execution.dropped = f"handshake: {error}"
                    return
                await self._converse(ws, command, execution)
        if waited.cancelled_caught:
            execution.dropped = f"no terminal message within {_PATIENCE} s"

    async def _converse(
        self, ws: trio_websocket.WebSocketConnection, command: Command, execution: Execution
    ) -> None:
        sent = False
        try:
            while True:
                message = json.loads(await ws.get_message())
                execution.message(message)
                if message.get("type") == "start" and command.stdin and not sent:
                    sent = True
                    await ws.send_message(command.stdin)
                if message.get("type") in _TERMINAL:
                    break
            await ws.aclose()
        except trio_websocket.ConnectionClosed as closed:
            execution.closed(closed.reason.code if closed.reason is not None else None)


async def run_students(
    world: World, checks: Checks, rng: random.Random, count: int, environments: list[int], until: float
) -> list[Student]:
    """Run ``count`` students to ``until``; the students, once all are done."""
    students = [
        Student(f"s{i}", random.Random(rng.getrandbits(64)), world, checks, environments, until)
        for i in range(count)
    ]
    async with trio.open_nursery() as nursery:
        for student in students:
            nursery.start_soon(student.run)
    return students
