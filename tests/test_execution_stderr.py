"""An execution on a terminal with its stderr apart: its two exec sessions, and what either's
failure does (the end-to-end tests cannot cut one session of the two on the simulated cluster)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from supervisor.base.errors import ExecAgentUnreachable, ExecConnectionLost
from supervisor.core.commands import NOMAD_VARIABLES_COMMAND
from supervisor.core.config import ExecutionSettings
from supervisor.desk.execution_stderr import SIBLING_WAIT
from supervisor.desk.executions import MESSAGE_CONNECTION_LOST, ExecutionRequest
from supervisor.nomad import ExecExited, ExecOutput

from .test_executions import _Client, _ExitedSession, _NoAllocations, _service

_Step = tuple[float, "ExecOutput | ExecExited | Exception"]


class _Scripted:
    """A session that gives its steps (each after its pause; an exception is raised), then waits."""

    path = "server"
    exited = None

    def __init__(self, steps: list[_Step]) -> None:
        self.steps = list(steps)
        self.sizes: list[tuple[int, int]] = []

    async def resize(self, *, height: int, width: int) -> None:
        self.sizes.append((height, width))

    async def send_stdin(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint()

    def __aiter__(self) -> _Scripted:
        return self

    async def __anext__(self) -> ExecOutput | ExecExited:
        if self.exited is not None:
            raise StopAsyncIteration
        if not self.steps:
            await trio.sleep_forever()
        pause, step = self.steps.pop(0)
        await trio.sleep(pause)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, ExecExited):
            self.exited = step
        return step


class _Split(_NoAllocations):
    """Nomad with scripted sessions for an execution's command and the reader of its stderr (a list
    per attempt); the listing of variables and the stops exit at once."""

    def __init__(self, command: list[list[_Step]], reader: list[list[_Step]]) -> None:
        self.scripts = {"command": command, "reader": reader}
        self.opened: list[tuple[str, bool]] = []
        self.sessions: list[_Scripted] = []
        self.stops = 0

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        if command is NOMAD_VARIABLES_COMMAND or "kill -TERM" in command[-1]:
            self.stops += "kill -TERM" in command[-1]
            yield _ExitedSession()
            return
        kind = "reader" if "cat <&3" in command[-1] else "command"
        self.opened.append((kind, tty))
        session = _Scripted(self.scripts[kind].pop(0))
        self.sessions.append(session)
        yield session


async def _run_split(nomad: _Split) -> list[dict[str, Any]]:
    client = _Client()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            service = _service(nomad, ExecutionSettings(), nursery)
            await service.serve_on(client, "exec-1", ExecutionRequest("10-runner", "run", {}, 0, False))
    return client.sent


async def test_on_a_terminal_stderr_comes_apart_and_the_exit_after_all_of_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    nomad = _Split(
        command=[[(0.1, ExecOutput("stdout", b"out\r\n")), (0.1, ExecExited(2))]],
        reader=[[(0.5, ExecOutput("stdout", b"err\n")), (0.1, ExecExited(0))]],
    )
    sent = await _run_split(nomad)
    assert sent == [
        {"type": "start"},
        {"type": "stdout", "data": "out\r\n"},
        {"type": "stderr", "data": "err\n"},
        {"type": "exit", "data": 2},
    ], "the command's exit code, sent once its stderr is read"
    assert sorted(nomad.opened) == [("command", True), ("reader", False)], "a terminal, and a second exec"
    assert nomad.sessions[nomad.opened.index(("command", True))].sizes == [(24, 80)]
    assert nomad.stops == 0


async def test_a_cut_stderr_session_ends_the_execution_and_stops_its_command(
    autojump_clock: trio.abc.Clock,
) -> None:
    nomad = _Split(
        command=[[(0.1, ExecOutput("stdout", b"running\r\n"))]],  # then runs for ever
        reader=[[(1.0, ExecConnectionLost("a server restarted"))]],
    )
    sent = await _run_split(nomad)
    assert sent[-1] == {"type": "error", "data": MESSAGE_CONNECTION_LOST}
    assert nomad.stops == 1, "the command (and the reader) stopped"
    assert trio.current_time() < 2, "no hang"


async def test_a_reader_that_cannot_reach_the_agent_while_the_command_can_ends_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    nomad = _Split(
        command=[[]],  # waits in the fifo's open for a reader that never comes
        reader=[[(0.0, ExecAgentUnreachable(1011, "failed to connect to client: no path to node"))]],
    )
    sent = await _run_split(nomad)
    assert sent[-1] == {"type": "error", "data": MESSAGE_CONNECTION_LOST}
    assert nomad.stops == 1
    assert trio.current_time() <= SIBLING_WAIT + 0.1


async def test_when_neither_session_reached_the_agent_nothing_ran_and_both_are_tried_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    away = ExecAgentUnreachable(1011, "failed to connect to client: no path to node")
    nomad = _Split(
        command=[[(0.0, away)], [(0.1, ExecExited(0))]],
        reader=[[(0.0, away)], [(0.1, ExecExited(0))]],
    )
    sent = await _run_split(nomad)
    assert sent == [{"type": "start"}, {"type": "exit", "data": 0}]
    assert sorted(kind for kind, _ in nomad.opened) == ["command", "command", "reader", "reader"]
    assert nomad.stops == 0, "nothing ran the first time: nothing to stop"


async def test_a_command_session_that_cannot_reach_the_agent_while_the_reader_can_is_not_retried(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The reader may be waiting in the runner: a second try would meet it there (two readers)."""
    away = ExecAgentUnreachable(1011, "failed to connect to client: no path to node")
    nomad = _Split(command=[[(0.0, away)]], reader=[[]])
    sent = await _run_split(nomad)
    assert sent[-1] == {"type": "error", "data": MESSAGE_CONNECTION_LOST}
    assert [kind for kind, _ in nomad.opened].count("command") == 1, "not tried again"
    assert nomad.stops == 1, "the reader stopped"
