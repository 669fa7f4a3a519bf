"""FileService decisions that the end-to-end tests cannot provoke on the simulated cluster."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from supervisor.base.errors import ExecAgentUnreachable, ExecConnectionLost, NomadUnavailableError
from supervisor.core.config import ExecutionSettings
from supervisor.desk.files import FileService
from supervisor.effects.stopping import CommandStops
from supervisor.nomad import ExecExited, ExecOutput
from supervisor.nomad.api import ExecOpener


class _Session:
    def __init__(self, *, breaks: bool) -> None:
        self.breaks = breaks
        self.exited: ExecExited | None = None
        self.path = "server"

    async def send_stdin(self, data: bytes) -> None:
        if self.breaks:
            raise ExecConnectionLost("a server restarted")

    async def close_stdin(self) -> None:
        pass

    async def wait_exit(self, **_: Any) -> tuple[ExecExited, bytes, bytes]:
        self.exited = ExecExited(0)
        return self.exited, b"", b""

    async def __aiter__(self) -> AsyncIterator[ExecOutput | ExecExited]:
        exited, _, _ = await self.wait_exit()
        yield exited


class _Nomad:
    """The first command's session breaks while its stdin is sent; every later one exits 0."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    @asynccontextmanager
    async def open_exec(self, alloc_id: str, *, task: str, command: Sequence[str]) -> AsyncIterator[_Session]:
        self.commands.append(command[-1])
        yield _Session(breaks=len(self.commands) == 1)


class _Files(FileService):
    """A FileService with the stops it was given."""

    stops: CommandStops


def file_service(
    nomad: ExecOpener,
    nursery: trio.Nursery,
    *,
    allocation_in_use: Callable[[str], bool] = lambda _: True,
    unprivileged_wrapper: str = "",
) -> _Files:
    settings = ExecutionSettings(stop_grace=0.1, unprivileged_wrapper=unprivileged_wrapper)
    stops = CommandStops(nomad, task=settings.task, grace=settings.stop_grace, nursery=nursery)
    files = _Files(nomad, settings, stops, execution_nursery=nursery, allocation_in_use=allocation_in_use)
    files.stops = stops
    return files


async def test_an_upload_whose_session_breaks_is_stopped_in_the_runner(nursery: trio.Nursery) -> None:
    nomad = _Nomad()
    files = file_service(nomad, nursery)
    with pytest.raises(ExecConnectionLost):
        await files.update("alloc-1", [], [("a.txt", b"x")])
    extract, stop = nomad.commands
    note = re.search(r"\.supervisor-([0-9a-f-]+)\.pid", extract)
    assert note is not None, "the command notes its PID"
    assert "tar" in extract
    assert f".supervisor-{note.group(1)}.pid" in stop, "the stop names the same command"
    assert "kill -TERM" in stop


class _AgentAway(_Nomad):
    """The first command's session breaks; every later exec finds the runner's agent away."""

    @asynccontextmanager
    async def open_exec(self, alloc_id: str, *, task: str, command: Sequence[str]) -> AsyncIterator[_Session]:
        self.commands.append(command[-1])
        if len(self.commands) > 1:
            raise ExecAgentUnreachable(1011, "failed to connect to client: no path to node")
        yield _Session(breaks=True)


async def test_a_file_command_s_stop_waits_only_while_its_runner_is_in_use(
    autojump_clock: trio.abc.Clock,
) -> None:
    nomad = _AgentAway()
    in_use = {"alloc-1"}
    async with trio.open_nursery() as nursery:
        files = file_service(nomad, nursery, allocation_in_use=in_use.__contains__)
        with pytest.raises(ExecConnectionLost):
            await files.update("alloc-1", [], [("a.txt", b"x")])
        await trio.sleep(60)
        attempts = len(nomad.commands) - 1
        assert attempts > 1, "the stop is tried again while the agent is away"
        in_use.clear()  # the runner is given back: its purge stops the allocation
        await trio.sleep(2)
        assert files.stops.waiting == 0
    assert len(nomad.commands) - 1 == attempts, "no attempt after the runner went"


class _RefusedSession(_Session):
    async def wait_exit(self, **_: Any) -> tuple[ExecExited, bytes, bytes]:
        raise ExecAgentUnreachable(1011, "failed to connect to client: no path to node")


class _RefusingNomad(_Nomad):
    """Every exec opens, then Nomad closes it: the server cannot reach the runner's agent."""

    @asynccontextmanager
    async def open_exec(self, alloc_id: str, *, task: str, command: Sequence[str]) -> AsyncIterator[_Session]:
        self.commands.append(command[-1])
        yield _RefusedSession(breaks=False)


async def test_a_file_command_refused_before_it_started_is_not_stopped(nursery: trio.Nursery) -> None:
    nomad = _RefusingNomad()
    files = file_service(nomad, nursery)
    with pytest.raises(ExecAgentUnreachable):
        await files.update("alloc-1", [], [("a.txt", b"x")])
    await trio.testing.wait_all_tasks_blocked()
    assert len(nomad.commands) == 1, "nothing ran: no stop follows"
    assert files.stops.waiting == 0


async def test_a_file_command_that_ends_is_not_stopped(nursery: trio.Nursery) -> None:
    nomad = _Nomad()
    nomad.commands.append("(first session used)")
    files = file_service(nomad, nursery)
    await files.update("alloc-1", [], [("a.txt", b"x")])
    assert len(nomad.commands) == 2, "one exec, no stop"


async def test_reads_run_unprivileged_unless_asked_otherwise(nursery: trio.Nursery) -> None:
    nomad = _Nomad()
    nomad.commands.append("(first session used)")
    files = file_service(nomad, nursery, unprivileged_wrapper="/sbin/setuser user")
    await files.list("alloc-1", ".", recursive=True)
    await files.list("alloc-1", ".", recursive=True, privileged=True)
    await files.update("alloc-1", [], [("a.txt", b"x")])
    unprivileged_list, privileged_list, update = nomad.commands[1:]
    assert "/sbin/setuser user /bin/sh -c" in unprivileged_list
    assert "setuser" not in privileged_list
    assert "setuser" not in update, "writes run as the task's user, as Poseidon's do"


class _RestartingNomad(_Nomad):
    """The first session breaks; the next two execs find no server; later ones work."""

    @asynccontextmanager
    async def open_exec(self, alloc_id: str, *, task: str, command: Sequence[str]) -> AsyncIterator[_Session]:
        self.commands.append(command[-1])
        if len(self.commands) in (2, 3):
            raise NomadUnavailableError("connection refused: the server restarts")
        yield _Session(breaks=len(self.commands) == 1)


async def test_a_stop_that_cannot_reach_nomad_is_retried(autojump_clock: trio.abc.Clock) -> None:
    nomad = _RestartingNomad()
    async with trio.open_nursery() as nursery:
        files = file_service(nomad, nursery)
        with pytest.raises(ExecConnectionLost):
            await files.update("alloc-1", [], [("a.txt", b"x")])
        await trio.sleep(60)
    assert len(nomad.commands) == 4, "the upload, two stops that found no server, the one that worked"
    assert all("kill -TERM" in command for command in nomad.commands[1:])
