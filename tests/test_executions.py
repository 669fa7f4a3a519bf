"""ExecutionService decisions that the end-to-end tests cannot provoke on the simulated cluster."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from supervisor.base.errors import (
    ExecConnectionLost,
    ExecRejected,
    NomadUnavailableError,
)
from supervisor.core.commands import NOMAD_VARIABLES_COMMAND
from supervisor.core.config import ExecutionSettings
from supervisor.core.evidence import Finding
from supervisor.core.runners import REASON_UNSTOPPABLE
from supervisor.desk.execution_state import RunningExecution
from supervisor.desk.executions import (
    CLOSE_STALLED,
    AdmittedExecution,
    ClientSocket,
    ExecutionRequest,
    ExecutionService,
)
from supervisor.effects.stopping import CommandStops
from supervisor.nomad import ExecExited, ExecOutput
from supervisor.nomad.api import ExecutionClient


class _NoAllocations:
    """A client whose allocations are never asked for (no command here exits 137)."""

    async def get_allocation(self, alloc_id: str) -> Any:
        raise AssertionError("not asked in these tests")


class _Runners:
    """The runners as an execution's lease sees them: every runner is in ``alloc_id`` (or where
    ``alloc_of`` says); what the executions found is noted, replacements apart."""

    def __init__(self, alloc_of: Callable[[str], str | None], replaced: list[tuple[str, str]]) -> None:
        self.alloc_of = alloc_of
        self.replaced = replaced
        self.found_out: list[tuple[str, Finding]] = []


class _Lease:
    """A lease on one runner of ``_Runners``."""

    agent_wait = 5.0
    agent_retry = 0.5

    def __init__(self, runners: _Runners, runner_id: str) -> None:
        self.runners = runners
        self.runner_id = runner_id
        self.alloc_id = runners.alloc_of(runner_id) or ""

    def hold(self) -> None:
        pass

    def give_back(self) -> None:
        pass

    def holds(self) -> bool:
        return bool(self.alloc_id) and self.runners.alloc_of(self.runner_id) == self.alloc_id

    def found(self, finding: Finding) -> None:
        if finding is Finding.UNSTOPPABLE:
            self.runners.replaced.append((self.runner_id, REASON_UNSTOPPABLE))
        self.runners.found_out.append((self.runner_id, finding))


class _Service(ExecutionService):
    """An ExecutionService on a fake client, with the runners and the stops it was given."""

    runners: _Runners
    stops: CommandStops

    async def serve_on(self, socket: ClientSocket, execution_id: str, request: ExecutionRequest) -> int:
        lease = _Lease(self.runners, request.runner_id)
        return await self.serve(socket, AdmittedExecution(execution_id, request, lease))

    def running(self, execution_id: str, runner_id: str) -> RunningExecution:
        return RunningExecution(execution_id, runner_id, _Lease(self.runners, runner_id))


def _service(
    client: ExecutionClient,
    settings: ExecutionSettings,
    nursery: trio.Nursery,
    *,
    alloc_id: str | None = "alloc-1",
    alloc_of: Callable[[str], str | None] | None = None,
    replaced: list[tuple[str, str]] | None = None,
) -> _Service:
    """An ExecutionService on a fake client: every runner is in ``alloc_id`` (or where ``alloc_of``
    says); replacements are noted."""
    stops = CommandStops(client, task=settings.task, grace=settings.stop_grace, nursery=nursery)
    service = _Service(client, settings, stops, execution_nursery=nursery)
    service.runners = _Runners(
        alloc_of or (lambda runner_id: alloc_id), replaced if replaced is not None else []
    )
    service.stops = stops
    return service


class _Unreachable(_NoAllocations):
    """A Nomad client whose exec never connects."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        self.commands.append(list(command))
        raise ExecConnectionLost("no server answers")
        yield  # pragma: no cover


class _Refusing(_Unreachable):
    """A Nomad client that refuses every exec with a close frame."""

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        self.commands.append(list(command))
        raise ExecRejected(1011, "Permission denied")
        yield  # pragma: no cover


class _BackAfter(_Unreachable):
    """Unreachable for the first ``failures`` execs, then every exec exits 0."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        self.commands.append(list(command))
        if len(self.commands) <= self.failures:
            raise NomadUnavailableError("connection refused: the server restarts")
        yield _ExitedSession()


async def test_a_stop_that_cannot_reach_nomad_is_retried_and_the_runner_kept(
    autojump_clock: trio.abc.Clock,
) -> None:
    replaced: list[tuple[str, str]] = []
    client = _BackAfter(failures=3)
    async with trio.open_nursery() as nursery:
        service = _service(client, ExecutionSettings(stop_grace=0.1), nursery, replaced=replaced)
        await service._stop(service.running("exec-1", "10-runner"))
        assert len(client.commands) == 1, "the first attempt failed; the rest happen in the background"
        await trio.testing.wait_all_tasks_blocked()
        assert service.stops.waiting == 1, "the waiting stop is counted (supervisor_command_stops_waiting)"
        await trio.sleep(60)
    assert service.stops.waiting == 0
    assert replaced == [], "a server restart is no reason to lose the runner's files"
    assert len(client.commands) == 4
    assert all("kill -TERM" in command[-1] for command in client.commands)


async def test_a_waiting_stop_ends_once_its_runner_is_gone(autojump_clock: trio.abc.Clock) -> None:
    client = _Unreachable()
    runners = {"10-runner": "alloc-1"}
    async with trio.open_nursery() as nursery:
        service = _service(client, ExecutionSettings(stop_grace=0.1), nursery, alloc_of=runners.get)
        await service._stop(service.running("exec-1", "10-runner"))
        await trio.testing.wait_all_tasks_blocked()
        assert service.stops.waiting == 1
        started = trio.current_time()
        del runners["10-runner"]  # given back: the purge of its job stops the allocation, command and all
    assert trio.current_time() - started <= 1.0, "within a look, not after its backoff"
    assert service.stops.waiting == 0
    assert len(client.commands) == 1, "no attempt after the runner went"


async def test_a_command_that_cannot_be_stopped_gets_its_runner_replaced(nursery: trio.Nursery) -> None:
    replaced: list[tuple[str, str]] = []
    client = _Refusing()
    service = _service(client, ExecutionSettings(stop_grace=0.1), nursery, replaced=replaced)
    await service._stop(service.running("exec-1", "10-runner"))
    assert replaced == [("10-runner", "an execution could not be stopped")]
    assert "kill -TERM" in client.commands[0][-1]


async def test_pending_executions_are_single_use_and_expire(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    service = _service(_Unreachable(), ExecutionSettings(connect_timeout=60), nursery, alloc_id=None)
    request = ExecutionRequest("10-runner", "true", {}, 0, False)
    first = service.prepare(request)
    assert service.take(first) == request
    assert service.take(first) is None, "single use"
    second = service.prepare(request)
    await trio.sleep(61)
    assert service.take(second) is None, "forgotten after connect_timeout"
    third = service.prepare(request)
    service.runner_gone("10-runner", "gone")
    assert service.take(third) is None, "a gone runner takes its pending executions with it"


class _SlowToClose(_NoAllocations):
    """Exec sessions that exit at once with 0 and then take their time to close."""

    def __init__(self) -> None:
        self.closing = trio.Event()

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        yield _ExitedSession()
        if tty:  # the command's session (the reader of its stderr has none)
            self.closing.set()
            await trio.sleep_forever()


class _ExitedSession:
    async def wait_exit(self) -> tuple[ExecExited, bytes, bytes]:
        return ExecExited(0), b"", b""

    def __init__(self) -> None:
        self.exited = False
        self.path = "server"
        self.sizes: list[tuple[int, int]] = []

    async def resize(self, *, height: int, width: int) -> None:
        self.sizes.append((height, width))

    def __aiter__(self) -> _ExitedSession:
        return self

    async def __anext__(self) -> ExecExited:
        if self.exited:
            raise StopAsyncIteration
        self.exited = True
        return ExecExited(0)


class _Client:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send_json(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def receive_text(self) -> str | None:
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def wait_closed(self) -> None:
        await trio.sleep_forever()


async def test_a_runner_gone_after_the_command_exited_still_reports_the_exit() -> None:
    nomad = _SlowToClose()
    client = _Client()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            service = _service(nomad, ExecutionSettings(), nursery)
            request = ExecutionRequest("10-runner", "true", {}, 0, False)
            nursery.start_soon(service.serve_on, client, "exec-1", request)
            await nomad.closing.wait()  # the command exited; its exec session is closing
            service.runner_gone("10-runner", "the runner was destroyed by request")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel("test over")
    assert client.sent == [{"type": "start"}, {"type": "exit", "data": 0}], "the outcome is known"


async def test_the_exit_reaches_the_client_before_the_exec_session_has_closed() -> None:
    """Nomad drops an exec connection after ``exited``: the client does not wait for that."""
    nomad = _SlowToClose()
    client = _Client()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            service = _service(nomad, ExecutionSettings(), nursery)
            request = ExecutionRequest("10-runner", "true", {}, 0, False)
            nursery.start_soon(service.serve_on, client, "exec-1", request)
            await nomad.closing.wait()
            assert client.sent == [{"type": "start"}, {"type": "exit", "data": 0}]
            nursery.cancel_scope.cancel("test over")
    assert client.sent.count({"type": "exit", "data": 0}) == 1, "one terminal message"


class _FailingClose(_SlowToClose):
    """Exec sessions that exit at once with 0, then fail as they close (a bug below us)."""

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        yield _ExitedSession()
        if tty:
            raise RuntimeError("closing went wrong")


async def test_a_failure_after_the_exit_was_sent_adds_no_second_terminal_message() -> None:
    client = _Client()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            service = _service(_FailingClose(), ExecutionSettings(), nursery)
            await service.serve_on(client, "exec-1", ExecutionRequest("10-runner", "true", {}, 0, False))
    assert client.sent == [{"type": "start"}, {"type": "exit", "data": 0}]


class _Listing(_SlowToClose):
    """Exec sessions that exit at once; counts the listings of the task's NOMAD_* variables."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        self.listings += command is NOMAD_VARIABLES_COMMAND
        yield _ExitedSession()


async def test_a_runners_variable_names_are_read_once_and_forgotten_when_it_goes() -> None:
    nomad = _Listing()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            service = _service(nomad, ExecutionSettings(), nursery)
            request = ExecutionRequest("10-runner", "true", {}, 0, False)
            for execution in ("exec-1", "exec-2"):
                await service.serve_on(_Client(), execution, request)
            assert nomad.listings == 1, "read once per allocation"
            service.runner_gone("10-runner", "the runner was destroyed by request")
            await service.serve_on(_Client(), "exec-3", request)
            assert nomad.listings == 2, "what a runner that went left is not kept"


class _Stalling(_NoAllocations):
    """Exec sessions that run for ever: ``yes`` (output without end), or ``sleep`` (no output; it
    reads its stdin at ``stdin_rate`` bytes a second, none by default); the stops exit at once."""

    def __init__(self, stdin_rate: float = 0.0) -> None:
        self.commands: list[list[str]] = []
        self.stdin_rate = stdin_rate
        self.stdin = bytearray()

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[Any]:
        self.commands.append(list(command))
        running = command is not NOMAD_VARIABLES_COMMAND and "kill -TERM" not in command[-1]
        yield _Endless(self, talks="yes" in command[-1]) if running else _ExitedSession()


class _Endless(_NoAllocations):
    """A command that runs for ever: ``talks``, it writes output without end."""

    path = "agent"
    exited = None

    def __init__(self, nomad: _Stalling, *, talks: bool) -> None:
        self.nomad = nomad
        self.talks = talks

    async def resize(self, *, height: int, width: int) -> None:
        await trio.lowlevel.checkpoint()

    def __aiter__(self) -> _Endless:
        return self

    async def __anext__(self) -> ExecOutput:
        if not self.talks:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        return ExecOutput("stdout", b"y\n")

    async def send_stdin(self, data: bytes) -> None:
        rate = self.nomad.stdin_rate
        await trio.sleep(len(data) / rate if rate else math.inf)
        self.nomad.stdin += data


class _Deaf(_Client):
    """A client that reads its ``start`` but nothing after it: every buffer on the way is full, so
    that each later send to it waits for ever."""

    async def send_json(self, message: dict[str, Any]) -> None:
        if self.sent:
            await trio.sleep_forever()
        self.sent.append(message)


class _Talking(_Client):
    """A client that reads all its output, and sends one line of stdin."""

    def __init__(self, line: str = "a line\n") -> None:
        super().__init__()
        self.stdin = [line]

    async def receive_text(self) -> str | None:
        if self.stdin:
            return self.stdin.pop()
        return await super().receive_text()


async def test_a_client_that_reads_none_of_its_output_is_ended_at_its_runners_inactivity_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    nomad, client = _Stalling(), _Deaf()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            service = _service(nomad, ExecutionSettings(), nursery)
            request = ExecutionRequest("10-runner", "yes", {}, 0, False, inactivity_timeout=5)
            code = await service.serve_on(client, "exec-1", request)
    assert code == CLOSE_STALLED
    assert trio.current_time() == 5.0, "the send that waits, for the inactivity timeout; then the stop"
    assert "kill -TERM" in nomad.commands[-1][-1], "its command is stopped"
    assert client.sent == [{"type": "start"}], "nothing more: it reads none of it"
    assert service.outcomes["error"] == 1


async def test_stdin_that_its_command_takes_none_of_ends_the_execution_at_the_inactivity_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    nomad, client = _Stalling(), _Talking()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            service = _service(nomad, ExecutionSettings(), nursery)
            request = ExecutionRequest("10-runner", "sleep 600", {}, 0, False, inactivity_timeout=5)
            code = await service.serve_on(client, "exec-1", request)
    assert code == CLOSE_STALLED
    assert trio.current_time() == 5.0
    assert "kill -TERM" in nomad.commands[-1][-1], "its command is stopped"
    stalled = (
        "the command took none of its stdin for 5s, the runner's inactivity timeout: the command is stopped"
    )
    assert client.sent == [{"type": "start"}, {"type": "error", "data": stalled}]


async def test_without_an_inactivity_timeout_a_client_may_hold_its_execution_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Its runner never expires either: only the command's time limit ends it."""
    nomad = _Stalling()
    async with trio.open_nursery() as nursery:
        service = _service(nomad, ExecutionSettings(), nursery)
        for command, client in (("yes", _Deaf()), ("sleep 600", _Talking())):
            request = ExecutionRequest("10-runner", command, {}, 0, False)
            nursery.start_soon(service.serve_on, client, command, request)
        await trio.sleep(24 * 3600)
        assert service.running_count == 2, "ended by nothing but the test"
        nursery.cancel_scope.cancel("test over")


async def test_a_large_stdin_message_that_its_command_reads_slowly_is_no_stall(
    autojump_clock: trio.abc.Clock,
) -> None:
    """It goes to Nomad in writes of 64 KiB: each is taken within the limit, though the whole message
    takes longer."""
    nomad, client = _Stalling(stdin_rate=64 * 1024 / 3), _Talking("x" * 256 * 1024)
    async with trio.open_nursery() as nursery:
        service = _service(nomad, ExecutionSettings(), nursery)
        request = ExecutionRequest("10-runner", "sleep 600", {}, 0, False, inactivity_timeout=5)
        nursery.start_soon(service.serve_on, client, "exec-1", request)
        await trio.sleep(60)
        assert len(nomad.stdin) == 256 * 1024, "all of it, in 12 s"
        assert service.running_count == 1
        assert client.sent == [{"type": "start"}]
        nursery.cancel_scope.cancel("test over")
