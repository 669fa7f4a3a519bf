"""Executions: a client's WebSocket bridged to a Nomad exec session in a runner.

``POST /runners/{id}/execute`` stores a pending execution under a single-use ID; the WebSocket that
connects with that ID runs it. Each execution runs in the daemon's execution nursery, in its own
cancel scope, so that losing the event stream never touches it. It sends ``start``, then the
command's output as it comes, then exactly one terminal message:

- ``exit`` with the exit code;
- ``timeout`` when ``timeLimit`` passes: the command is then stopped (TERM, then KILL), and if it will
  not stop within the grace period its runner is replaced;
- ``error`` with a text that says what happened: the runner was destroyed by request; its
  allocation stopped, was replaced, was OOM-killed or was migrated off a draining node; Nomad no
  longer knows its allocation (the runner is gone, and replaced); its agent could not be reached
  within ``admission.wait_timeout`` (nothing ran); or the exec connection was lost, because a Nomad
  server or the runner's agent restarted (then the command's outcome is unknown, and it is stopped).

A client that closes its WebSocket early gets nothing more; its command is stopped. So does a client
that holds its execution up for its runner's inactivity timeout (its runner does not expire while the
execution runs): a send of output that makes no progress that long (the client reads none, and every
buffer on the way is full), or a write of its stdin that does (its command reads none, and the client
sends on). Its command is stopped. One whose stdin waited gets an ``error`` that says so, then a close
with 1008; one that read no output gets nothing more, not even a close frame (the send cut short left
part of a frame on the wire). A runner without an inactivity timeout is held for as long as its client
likes.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any, Final, cast

import trio
from attrs import frozen
from loguru import logger

from ..base.context import TermContext
from ..base.errors import (
    ExecAgentUnreachable,
    ExecAllocationUnknown,
    ExecConnectionLost,
    ExecRejected,
    NomadPermissionDenied,
    RunnerCommandFailed,
    SupervisorError,
    leaves,
)
from ..base.faults import FaultKind
from ..core.allocation_state import end_reason, is_running
from ..core.commands import NOMAD_VARIABLES_COMMAND, execution_command, nomad_variable_names
from ..core.config import ExecutionSettings
from ..core.environments import runner_environment_id
from ..core.evidence import Finding
from ..core.runners import REASON_ALLOCATION_UNKNOWN
from ..effects.stopping import CommandStops, StopOutcome
from ..nomad import ExecExited
from ..nomad.api import ExecutionClient
from ..nomad.boundary import token_refused
from .execution_state import (
    Attempt,
    ClientSocket,
    ExecutionLease,
    RunningExecution,
    describe_end,
    exit_message,
    forward_output,
    send_to_client,
)
from .execution_stderr import StderrReader
from .figures import UNKNOWN_ENVIRONMENT, DeskFigures

__all__ = [
    "CLOSE_STALLED",
    "REASON_STALLED",
    "AdmittedExecution",
    "ClientSocket",
    "ExecutionRequest",
    "ExecutionService",
    "wait_for_agent",
]


_VARIABLES_CACHE: Final = 10_000
MESSAGE_CONNECTION_LOST: Final = (
    "exec connection lost (a Nomad server restarted): the command's outcome is unknown; it is stopped"
)
MESSAGE_AGENT_RESTARTED: Final = (
    "exec connection lost (the runner's Nomad agent restarted): the command's outcome is unknown; "
    "it is stopped once the agent is back"
)
MESSAGE_AGENT_AWAY: Final = (
    "the runner's Nomad agent cannot be reached (it may be restarting): nothing ran; take another runner"
)
MESSAGE_SHUTTING_DOWN: Final = "the supervisor is shutting down"
# The size of an execution's terminal, sent as Nomad's first tty_size frame. Poseidon sends none, and
# Docker leaves the terminal at 0x0, which programs read as this size.
TERMINAL_HEIGHT: Final = 24
TERMINAL_WIDTH: Final = 80
# A command killed by SIGKILL exits 128 + 9: what a container's OOM kill or stop also gives.
_SIGKILL_EXIT: Final = 137
# How long the allocation's state is asked for before such an exit is reported as it is.
_CONFIRM_TIMEOUT: Final = 2.0
# WebSocket close codes: the execution ended (normal closure), or the daemon is stopping (going away).
CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
# The client held its execution up past its runner's inactivity timeout (policy violation).
CLOSE_STALLED: Final = 1008
REASON_STALLED: Final = "the execution stalled for the runner's inactivity timeout"
# Stdin goes to Nomad in writes of at most this (a pipe's buffer), so that the stall limit bounds a
# write that makes no progress, not a large message that its command reads slowly.
_STDIN_CHUNK: Final = 64 * 1024
# How long a stop at shutdown may take before the daemon goes anyway (the next start's sweep of
# adopted claims stops what is left).
_SHUTDOWN_STOP_CAP: Final = 1.0
# The subject of a refused token's fault met running a command, and what exec needs of the token.
_EXEC: Final = "exec"
_EXEC_NEEDS: Final = "alloc-exec in the daemon's namespace"


@frozen
class ExecutionRequest:
    """What ``POST /runners/{id}/execute`` asked for, kept until its WebSocket connects."""

    runner_id: str
    command: str
    environment: dict[str, str]
    time_limit: int
    privileged: bool
    # The runner's inactivity timeout (0: none): a client that holds the execution up this long is
    # taken as gone (its runner does not expire while the execution runs).
    inactivity_timeout: float = 0.0


@frozen
class AdmittedExecution:
    """An execution whose WebSocket connected, with the lease on its runner that the desk gave it."""

    execution_id: str
    request: ExecutionRequest
    lease: ExecutionLease


class ExecutionService:
    """Pending executions by ID, and the running ones by runner (to end them when a runner goes)."""

    def __init__(
        self,
        client: ExecutionClient,
        settings: ExecutionSettings,
        stops: CommandStops,
        *,
        execution_nursery: trio.Nursery,
        context: TermContext | None = None,
        figures: DeskFigures | None = None,
    ) -> None:
        self._client = client
        self._settings = settings
        self._stops = stops
        context = TermContext() if context is None else context
        self._faults = context.faults
        # Where execution IDs come from.
        self._entropy = context.entropy
        self._pending: dict[str, tuple[ExecutionRequest, float]] = {}
        # Each runner's allocation and its NOMAD_* variable names, until the runner goes.
        self._variables: dict[str, tuple[str, tuple[str, ...]]] = {}
        # Ended executions by environment and terminal message, and how long they ran.
        self.figures = DeskFigures() if figures is None else figures
        # Executions by the path their exec session took: straight to the agent, or via a server.
        self.paths: dict[str, int] = {"agent": 0, "server": 0}
        self._running: set[RunningExecution] = set()
        # The daemon is stopping: no execution starts any more (set by ``begin_stop``).
        self.stopping = False
        # Set while no execution runs.
        self._none_running = trio.Event()
        self._none_running.set()
        # Where executions, and the stops that must outlive them, run: not under the request.
        self._nursery = execution_nursery

    @property
    def outcomes(self) -> dict[str, int]:
        """Ended executions by their terminal message ("closed": the client left first)."""
        return {"exit": 0, "timeout": 0, "error": 0, "closed": 0} | self.figures.executions.by_what()

    def _count_end(self, runner_id: str, outcome: str, started: float) -> None:
        environment_id = runner_environment_id(runner_id)
        environment = UNKNOWN_ENVIRONMENT if environment_id is None else str(environment_id)
        self.figures.executions.add(environment, outcome)
        self.figures.execution_seconds.observe(environment, trio.current_time() - started)

    @property
    def running_count(self) -> int:
        """Executions running now."""
        return len(self._running)

    def prepare(self, request: ExecutionRequest) -> str:
        """Store a pending execution; returns its single-use ID."""
        self._forget_stale()
        execution_id = self._entropy.uuid()
        self._pending[execution_id] = (request, trio.current_time())
        return execution_id

    def take(self, execution_id: str) -> ExecutionRequest | None:
        """The pending execution, removed: an execution URL works once."""
        self._forget_stale()
        entry = self._pending.pop(execution_id, None)
        return entry[0] if entry else None

    def _forget_stale(self) -> None:
        limit = trio.current_time() - self._settings.connect_timeout
        for execution_id in [k for k, (_, at) in self._pending.items() if at < limit]:
            del self._pending[execution_id]

    def runner_gone(self, runner_id: str, reason: str) -> None:
        """End every execution on the runner with ``reason`` (its pending ones too)."""
        for running in list(self._running):
            if running.runner_id == runner_id:
                running.gone_reason = reason
                running.scope.cancel(f"runner {runner_id} gone: {reason}")
        self._variables.pop(runner_id, None)
        for execution_id in [k for k, (r, _) in self._pending.items() if r.runner_id == runner_id]:
            del self._pending[execution_id]

    def begin_stop(self) -> None:
        """The daemon is stopping: an execution whose WebSocket connects from now on does not
        start (its client gets the shutting-down error, then 1001); running ones go on."""
        self.stopping = True

    async def all_ended(self) -> None:
        """Wait until no execution runs."""
        await self._none_running.wait()

    def shut_down(self) -> int:
        """End every running execution: its command is stopped, its client gets the terminal
        ``error`` "the supervisor is shutting down"; returns how many there were. From now on an
        execution that would start ends so at once."""
        self.stopping = True
        for running in self._running:
            running.shutting_down = True
            running.scope.cancel(MESSAGE_SHUTTING_DOWN)
        return len(self._running)

    async def serve(self, socket: ClientSocket, execution: AdmittedExecution) -> int:
        """Run the execution in the execution nursery, holding its lease; returns, when it has
        ended, the WebSocket close code: 1000, 1001 (going away) when the daemon's stop ended it, or
        1008 when its client held it up past the stall limit. It counts as running from this call
        on, so that the execution nursery, which waits for the running ones, cannot close under it."""
        if self.stopping:
            await send_to_client(socket, {"type": "error", "data": MESSAGE_SHUTTING_DOWN})
            return CLOSE_GOING_AWAY
        lease, request = execution.lease, execution.request
        if not lease.holds():
            await send_to_client(socket, {"type": "error", "data": "the runner is gone"})
            return CLOSE_NORMAL
        limit = request.inactivity_timeout
        running = RunningExecution(execution.execution_id, lease.runner_id, lease, stall_limit=limit)
        self._running.add(running)
        if self._none_running.is_set():
            self._none_running = trio.Event()
        lease.hold()
        ended = trio.Event()
        codes: list[int] = []
        self._nursery.start_soon(self._execution, socket, running, request, codes, ended)
        await ended.wait()
        return codes[0] if codes else CLOSE_NORMAL

    async def _execution(
        self,
        socket: ClientSocket,
        running: RunningExecution,
        request: ExecutionRequest,
        codes: list[int],
        ended: trio.Event,
    ) -> None:
        """The execution's task: ``start``, the bridge, one terminal message; its close code into
        ``codes``. A bug in one execution must not end the others in the nursery."""
        execution_id = running.execution_id
        started, counted = trio.current_time(), False
        try:
            logger.info("execution started", execution=execution_id, runner=request.runner_id)
            await running.send(socket, {"type": "start"})
            terminal = await self._bridge(socket, running, request)
            outcome = str(terminal["type"]) if terminal is not None else "closed"
            self._count_end(request.runner_id, outcome, started)
            counted = True
            if outcome == "exit":
                self._faults.clear(FaultKind.TOKEN_REFUSED, _EXEC)
            seconds = round(trio.current_time() - started, 3)
            logger.info(
                "execution ended",
                execution=execution_id,
                runner=request.runner_id,
                seconds=seconds,
                outcome=describe_end(terminal),
            )
            attempt = running.attempt
            if terminal is not None and not (terminal is attempt.terminal and attempt.exit_sent):
                await running.send(socket, terminal)
            if running.shutting_down:
                codes.append(CLOSE_GOING_AWAY)
            else:
                codes.append(CLOSE_STALLED if running.stalled else CLOSE_NORMAL)
        except* Exception:
            logger.exception("execution {} on {} failed", execution_id, request.runner_id)
            if not counted:  # a bug of ours ended it
                self._count_end(request.runner_id, "error", started)
            if not running.attempt.exit_sent:  # the client has its one terminal message
                await running.send(socket, {"type": "error", "data": "internal error of the supervisor"})
        finally:
            self._running.discard(running)
            if not self._running:
                self._none_running.set()
            running.lease.give_back()
            ended.set()

    async def _bridge(
        self, socket: ClientSocket, running: RunningExecution, request: ExecutionRequest
    ) -> dict[str, Any] | None:
        """The terminal message; None when the client closed first.

        Exec sessions until one runs, each recorded in ``running.attempt`` as it goes (so that a
        cancellation keeps what it found). An agent the server cannot reach ran nothing (Nomad
        refuses before the command starts, and no output came): it may be restarting, so it is
        tried again up to the agent wait."""
        lease = running.lease
        with running.scope:
            if request.time_limit > 0:
                running.scope.deadline = trio.current_time() + request.time_limit
            give_up = trio.current_time() + lease.agent_wait
            while True:
                attempt = running.attempt = Attempt()
                await self._attempt(attempt, socket, running, request)
                unreachable = isinstance(attempt.failure, ExecAgentUnreachable) and not attempt.output
                if unreachable:
                    lease.found(Finding.AGENT_UNREACHABLE)
                elif attempt.output:
                    lease.found(Finding.AGENT_REACHED)
                if not unreachable or not await wait_for_agent(give_up, lease.agent_retry):
                    break
        return await self._terminal(running)

    async def _terminal(self, running: RunningExecution) -> dict[str, Any] | None:
        """What the end of the exec sessions means for the client (None: it closed first); a
        command that may still run is stopped."""
        attempt = running.attempt
        if attempt.exited is not None:  # the outcome is known, whatever ended the session after it
            return attempt.terminal or exit_message(attempt.exited)
        failure = attempt.failure
        if running.scope.cancelled_caught:
            if running.gone_reason:
                return {"type": "error", "data": running.gone_reason}
            if running.shutting_down:
                # The stop is shielded (it must outlive a cancelled caller): wait for it here only
                # up to the cap; it goes on in the execution nursery until the stop's budget ends.
                stopped = trio.Event()

                async def stop() -> None:
                    await self._stop(running)
                    stopped.set()

                self._nursery.start_soon(stop)
                with trio.move_on_after(_SHUTDOWN_STOP_CAP):
                    await stopped.wait()
                return {"type": "error", "data": MESSAGE_SHUTTING_DOWN}
            if running.stalled:
                await self._stop(running)
                return {"type": "error", "data": running.stalled}
            if isinstance(failure, ExecAgentUnreachable):
                return {"type": "timeout"}  # it passed while the agent was away: nothing ran
            await self._stop(running)  # the time limit passed
            return {"type": "timeout"}
        if isinstance(failure, ExecAllocationUnknown):
            running.lease.found(Finding.ALLOCATION_UNKNOWN)
            return {"type": "error", "data": REASON_ALLOCATION_UNKNOWN}
        if isinstance(failure, ExecAgentUnreachable):
            running.lease.found(Finding.AGENT_AWAY)
            return {"type": "error", "data": MESSAGE_AGENT_AWAY}
        # The command may still run: stop it (a client gone, a lost exec connection, a refusal).
        outcome = await self._stop(running)
        return None if failure is None else self._failed(running, failure, outcome)

    def _failed(
        self, running: RunningExecution, failure: SupervisorError, stop: StopOutcome
    ) -> dict[str, Any]:
        """The terminal error for an execution that ``failure`` ended, after the stop that followed."""
        if isinstance(failure, ExecConnectionLost):
            if stop is StopOutcome.ALLOCATION_GONE:
                running.lease.found(Finding.ALLOCATION_UNKNOWN)
                return {"type": "error", "data": REASON_ALLOCATION_UNKNOWN}
            agent_away = stop is StopOutcome.AGENT_UNREACHABLE
            return {
                "type": "error",
                "data": MESSAGE_AGENT_RESTARTED if agent_away else MESSAGE_CONNECTION_LOST,
            }
        if isinstance(failure, NomadPermissionDenied):
            self._faults.report(FaultKind.TOKEN_REFUSED, _EXEC, *token_refused(failure.body, _EXEC_NEEDS))
        elif isinstance(failure, ExecRejected) and "Permission denied" in failure.reason:
            self._faults.report(FaultKind.TOKEN_REFUSED, _EXEC, *token_refused(failure.reason, _EXEC_NEEDS))
        if isinstance(failure, ExecRejected):
            logger.bind(cause="exec refused by Nomad").warning(
                "execution {} on runner {}: Nomad refused the exec: {}",
                running.execution_id,
                running.runner_id,
                failure.reason,
            )
            return {"type": "error", "data": f"Nomad refused the execution: {failure.reason}"}
        return {"type": "error", "data": f"Nomad could not run the execution: {failure}"}

    async def _attempt(
        self,
        attempt: Attempt,
        socket: ClientSocket,
        running: RunningExecution,
        request: ExecutionRequest,
    ) -> None:
        """The exec sessions of one try of the execution: its command's, and on a terminal with
        ``interactive_stderr`` the one reading its stderr (``execution_stderr.py``), on the same
        lease; ``attempt`` records what ended them."""
        settings, alloc_id = self._settings, running.lease.alloc_id
        apart = settings.tty and settings.interactive_stderr
        try:
            argv = execution_command(
                request.command,
                request.environment,
                execution_id=running.execution_id,
                privileged=request.privileged,
                nomad_variables=await self._nomad_variables(running.runner_id, alloc_id),
                unprivileged_wrapper=settings.unprivileged_wrapper,
                shell=settings.shell,
                stderr_apart=apart,
            )
            async with trio.open_nursery() as sessions:
                reader = None
                if apart:
                    reader = StderrReader(running.execution_id, alloc_id, settings.task)
                    sessions.start_soon(reader.run, self._client, partial(running.send, socket))
                try:
                    await self._session(attempt, socket, running, argv, reader)
                except BaseException as error:  # from the session's nursery: in a group
                    found = [e for e in leaves(error) if not isinstance(e, trio.Cancelled)]
                    unreachable = found[0] if len(found) == 1 else None
                    if not isinstance(unreachable, ExecAgentUnreachable) or reader is None or attempt.output:
                        raise
                    raise await reader.settled_for(unreachable) from None
                sessions.cancel_scope.cancel("the command exited and its stderr is read")
        except* SupervisorError as group:
            failures = leaves(group)
            for other in failures[1:]:  # an exec session raises one at a time; say so if not
                logger.warning("execution {} also failed: {}", running.execution_id, other)
            attempt.failure = cast(SupervisorError, failures[0])

    async def _session(
        self,
        attempt: Attempt,
        socket: ClientSocket,
        running: RunningExecution,
        argv: list[str],
        reader: StderrReader | None,
    ) -> None:
        """The command's exec session: the client's stdin in, its output out, then its exit (once
        its stderr is read, when a reader reads it)."""
        settings, alloc_id = self._settings, running.lease.alloc_id
        async with (
            self._client.open_exec(alloc_id, task=settings.task, command=argv, tty=settings.tty) as session,
            trio.open_nursery() as nursery,
        ):
            self.paths[session.path] = self.paths.get(session.path, 0) + 1
            if settings.tty:
                await session.resize(height=TERMINAL_HEIGHT, width=TERMINAL_WIDTH)

            async def forward_stdin() -> None:
                while (text := await socket.receive_text()) is not None:
                    data = text.encode()
                    for start in range(0, len(data), _STDIN_CHUNK):
                        with running.within_stall_limit() as waited:
                            await session.send_stdin(data[start : start + _STDIN_CHUNK])
                        if waited.cancelled_caught:
                            running.stall("the command took none of its stdin")  # ends the attempt
                            return
                nursery.cancel_scope.cancel("the client closed its WebSocket")

            async def watch_client() -> None:
                # A write of stdin to a command that does not read it waits on Nomad for ever,
                # not in receive_text(): the client's leaving must end the session all the same.
                await socket.wait_closed()
                nursery.cancel_scope.cancel("the client closed its WebSocket")

            nursery.start_soon(forward_stdin)
            nursery.start_soon(watch_client)
            confirm = partial(self._killed_with_allocation, alloc_id)
            send = partial(running.send, socket)
            drained = reader.drained if reader is not None else None
            attempt.exited = await forward_output(send, session, attempt, confirm, before_exit=drained)
            nursery.cancel_scope.cancel("the command exited")

    async def _killed_with_allocation(self, alloc_id: str, exited: ExecExited) -> dict[str, Any] | None:
        """For a command killed by SIGKILL (exit 137), the error of its allocation's death if the
        allocation died with it (OOM killed, stopped, lost): the exit frame can reach us before the
        event, and a killed container's exit code is no outcome of the command. None otherwise."""
        if exited.exit_code != _SIGKILL_EXIT:
            return None
        try:
            with trio.move_on_after(_CONFIRM_TIMEOUT):
                alloc = (await self._client.get_allocation(alloc_id)).value
                if not is_running(alloc) or any(
                    event.type == "Terminated"
                    for state in alloc.task_states.values()
                    for event in state.events
                ):
                    return {"type": "error", "data": end_reason(alloc)}
        except SupervisorError as error:
            logger.debug("confirming the kill of {} with Nomad failed: {}", alloc_id, error)
        return None

    async def _nomad_variables(self, runner_id: str, alloc_id: str) -> tuple[str, ...]:
        """The allocation's NOMAD_* variable names, read once per allocation (they never change)
        and kept until its runner goes."""
        cached = self._variables.get(runner_id)
        if cached is not None and cached[0] == alloc_id:
            return cached[1]
        async with self._client.open_exec(
            alloc_id, task=self._settings.task, command=NOMAD_VARIABLES_COMMAND
        ) as s:
            exited, stdout, _ = await s.wait_exit()
        if exited.exit_code != 0:
            raise RunnerCommandFailed(f"listing the task's environment failed (exit {exited.exit_code})")
        names = tuple(sys.intern(name) for name in nomad_variable_names(stdout))
        self._variables[runner_id] = (alloc_id, names)
        if len(self._variables) > _VARIABLES_CACHE:  # a bound, should runners' ends go unseen
            del self._variables[next(iter(self._variables))]
        return names

    async def _stop(self, running: RunningExecution) -> StopOutcome:
        return await self._stops.stop_in_runner(
            running.lease.alloc_id,
            running.execution_id,
            needed=running.lease.holds,
            on_failure=partial(self._replace_unstoppable, running),
        )

    def _replace_unstoppable(self, running: RunningExecution) -> None:
        if not running.lease.holds():
            return  # the runner, or the allocation the command ran in, is gone already
        logger.warning(
            "execution {} could not be stopped; replacing runner {}", running.execution_id, running.runner_id
        )
        running.lease.found(Finding.UNSTOPPABLE)


async def wait_for_agent(give_up: float, interval: float) -> bool:
    """Pause before an agent the server could not reach is tried again; False, at once, once
    ``give_up`` has passed."""
    remaining = give_up - trio.current_time()
    if remaining <= 0:
        return False
    await trio.sleep(min(interval, remaining))
    return True
