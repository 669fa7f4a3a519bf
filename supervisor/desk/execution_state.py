"""One running execution's state, and what it sends its client: its exec sessions' attempts, its
stall limit, the output forwarded as it comes and the terminal message (``executions.py`` runs it)."""

from __future__ import annotations

import codecs
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio
from attrs import define, field

from ..base.errors import ExecConnectionLost, SupervisorError
from ..core.evidence import Finding
from ..nomad import ExecExited, ExecOutput
from ..nomad.api import ExecChannel

__all__ = [
    "Attempt",
    "ClientSocket",
    "ExecutionLease",
    "RunningExecution",
    "describe_end",
    "exit_message",
    "forward_output",
    "send_to_client",
]


class ClientSocket(Protocol):
    """The client's side of an execution, as the API layer provides it."""

    async def send_json(self, message: dict[str, Any]) -> None:
        """Send one message to the client."""

    async def receive_text(self) -> str | None:
        """The next text frame; None when the client has closed."""
        ...

    async def wait_closed(self) -> None:
        """Return once the client has closed or gone (its socket closed for a message over
        ``server.max_message`` too), whether or not a receive_text() is under way."""


class ExecutionLease(Protocol):
    """What an execution may use of its runner (``RunnerLease``, as the desk hands it out)."""

    runner_id: str
    alloc_id: str

    @property
    def agent_wait(self) -> float:
        """How long an exec waits for an agent a server cannot reach (nothing ran)."""
        ...

    @property
    def agent_retry(self) -> float:
        """How often it tries that agent again meanwhile."""
        ...

    def hold(self) -> None:
        """The work began: the runner does not expire until it is given back."""

    def give_back(self) -> None:
        """The work ended (idempotent)."""

    def holds(self) -> bool:
        """Whether the runner is still used, in the same allocation."""
        ...

    def found(self, finding: Finding) -> None:
        """What the work found out about its runner, for the pool."""


@define
class Attempt:
    """One exec session of an execution: what it found, as it goes."""

    exited: ExecExited | None = None
    # Nomad sent something: the command started.
    output: bool = False
    # The client has its exit message already: sent as soon as Nomad said, before the session's end.
    exit_sent: bool = False
    # What the client was told of the exit: ``exit``, or the error of the allocation's death.
    terminal: dict[str, Any] | None = None
    failure: SupervisorError | None = None


@define(eq=False)
class RunningExecution:
    """An execution while it runs: its lease, its cancel scope, its attempt, its stall limit."""

    execution_id: str
    runner_id: str
    lease: ExecutionLease
    scope: trio.CancelScope = field(factory=trio.CancelScope)
    gone_reason: str = ""
    # Ended by the daemon's stop: its command is stopped, its socket closed as going away.
    shutting_down: bool = False
    # The exec session under way, or the last one.
    attempt: Attempt = field(factory=Attempt)
    # How long a send to the client, or a write of its stdin, may make no progress (0: for ever).
    stall_limit: float = 0.0
    # What held the execution up past that, once it did: the execution ends.
    stalled: str = ""
    # The client read none of its output: it is sent nothing more.
    deaf: bool = False

    def within_stall_limit(self) -> trio.CancelScope:
        """The scope of one send to the client or write of its stdin: it ends at the stall limit."""
        return trio.move_on_after(self.stall_limit if self.stall_limit > 0 else math.inf)

    def stall(self, what: str) -> None:
        """The client held the execution up past the stall limit: it ends, its command stopped."""
        if not self.stalled:
            self.stalled = (
                f"{what} for {self.stall_limit:g}s, the runner's inactivity timeout: the command is stopped"
            )
        self.scope.cancel(self.stalled)

    async def send(self, socket: ClientSocket, message: dict[str, Any]) -> None:
        """Send to the client, unless it is gone or read none of its output up to the stall limit."""
        if self.deaf:
            await trio.lowlevel.checkpoint()
            return
        with self.within_stall_limit() as waited:
            await send_to_client(socket, message)
        if waited.cancelled_caught:
            self.deaf = True
            self.stall("the client read none of its output")


async def forward_output(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    session: ExecChannel,
    attempt: Attempt,
    confirm: Callable[[ExecExited], Awaitable[dict[str, Any] | None]],
    *,
    before_exit: Callable[[], Awaitable[None]] | None = None,
) -> ExecExited:
    """Send the session's output to the client as it comes (UTF-8 decoded across frames), then
    its exit message, before the session is torn down (and after ``before_exit``: the rest of the
    command's output that another session reads); the exit."""
    decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
    async for frame in session:
        attempt.output = True
        if isinstance(frame, ExecExited):
            for name, decoder in decoders.items():
                if rest := decoder.decode(b"", final=True):
                    await send({"type": name, "data": rest})
            # Sent before the exec session is torn down, which waits for Nomad to drop it.
            attempt.exited = frame
            if before_exit is not None:
                await before_exit()
            attempt.terminal = await confirm(frame) or exit_message(frame)
            await send(attempt.terminal)
            attempt.exit_sent = True  # not before: a send cancelled before it began sent nothing
            return frame
        assert isinstance(frame, ExecOutput)
        text = decoders[frame.stream].decode(frame.data)
        if text:
            await send({"type": frame.stream, "data": text})
    raise ExecConnectionLost("the exec session ended without an exit")  # pragma: no cover


def exit_message(exited: ExecExited) -> dict[str, Any]:
    """The ``exit`` message of a command that exited, its code clamped to what a shell gives."""
    return {"type": "exit", "data": max(0, min(255, exited.exit_code))}


def describe_end(terminal: dict[str, Any] | None) -> str:
    """How an execution ended, for its log line."""
    if terminal is None:
        return "the client closed the connection"
    if terminal["type"] == "exit":
        return f"exit {terminal['data']}"
    if terminal["type"] == "error":
        return f"error: {terminal['data']}"
    return str(terminal["type"])


async def send_to_client(socket: ClientSocket, message: dict[str, Any]) -> None:
    """Send unless the client is gone: a closed client gets nothing more."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await socket.send_json(message)
