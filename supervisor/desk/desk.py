"""The runner desk: what the API asks of runners (claim, release, files, execute), behind the gate.

Every request that starts something new (a claim, an execution) waits at the admission gate; every
request that works in a runner finds it among the runners the pool serves, proves it first if its
agent restarted since it was last seen, and keeps it from expiring while it works. What an exec
session finds out about its runner (its allocation unknown, its agent out of reach or back) is
evidence for the pool, handed over as an ``ExecFinding``; the effects carry out what the pool then
decides. The desk holds no state of its own: the pool holds the runners, the execution service the
executions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, TypeVar

import trio
from loguru import logger

from ..base.errors import (
    ExecAgentUnreachable,
    ExecAllocationUnknown,
    NomadNotFound,
    NomadUnreachable,
    RunnerGoneError,
    UnknownEnvironment,
)
from ..base.levels import StreamState
from ..core.config import AdmissionSettings
from ..core.environments import ExecutionEnvironment
from ..core.evidence import AllocationSeen, ExecFinding, Finding
from ..core.pool import RunnerPool
from ..core.runners import FOUND_BY_NODE_RESTART, REASON_ALLOCATION_UNKNOWN, PoolStats, Runner
from ..effects.effects import Effects
from ..effects.environment_store import EnvironmentStore
from ..effects.leftovers import LeftoverSweep
from ..informer.admission import AdmissionGate
from ..informer.informer import Informer
from ..nomad.api import NomadApi
from .executions import MESSAGE_AGENT_AWAY, ClientSocket, ExecutionRequest, ExecutionService, wait_for_agent
from .files import Download, FileService

__all__ = ["RUNNER_GONE", "RunnerDesk"]

T = TypeVar("T")

# What a client asking for a runner the pool does not serve is told (Poseidon's text).
RUNNER_GONE: Final = "no runner found with this id"


class RunnerDesk:
    """Claims, releases, file operations and executions, for the API."""

    def __init__(
        self,
        client: NomadApi,
        pool: RunnerPool,
        effects: Effects,
        informer: Informer,
        *,
        gate: AdmissionGate,
        executions: ExecutionService,
        files: FileService,
        environments: EnvironmentStore,
        leftovers: LeftoverSweep,
        admission: AdmissionSettings,
    ) -> None:
        self._client = client
        self._pool = pool
        self._effects = effects
        self._informer = informer
        self._gate = gate
        self._executions = executions
        self._files = files
        self._environments = environments
        self._leftovers = leftovers
        self._admission = admission

    # -- what the pool serves -------------------------------------------------------------------

    @property
    def stream_state(self) -> StreamState:
        """The event stream's health, as the gate holds it."""
        return self._gate.state

    def stats(self) -> dict[int, PoolStats]:
        """Each environment's pool."""
        return self._pool.stats()

    def environment(self, environment_id: int) -> ExecutionEnvironment | None:
        """The environment as the pool knows it."""
        return self._pool.environments.get(environment_id)

    def environments(self) -> list[ExecutionEnvironment]:
        """Every environment the pool knows, by ID."""
        return [environment for _, environment in sorted(self._pool.environments.items())]

    @property
    def store(self) -> EnvironmentStore:
        """The environments as Nomad stores them (load, fetch, put, delete)."""
        return self._environments

    @property
    def workspace(self) -> str:
        """The workspace path inside a runner."""
        return self._files.workspace

    # -- runners --------------------------------------------------------------------------------

    async def claim(self, environment_id: int, inactivity_timeout: int) -> Runner:
        """Hand out an idle, proven runner of the environment, once the gate admits: NoIdleRunner if
        there is none, UnknownEnvironment if the pool knows no such environment."""
        if environment_id not in self._pool.environments and not self._informer.is_synced():
            await self._synced()  # a restarted daemon learns its environments from its first listing
        if environment_id not in self._pool.environments:
            raise UnknownEnvironment(environment_id)
        await self._gate.admit()
        runner, actions = self._pool.claim(environment_id, inactivity_timeout, trio.current_time())
        self._pool.activity(runner.id, trio.current_time(), working=+1)  # no expiry while it waits
        self._effects.apply(actions)
        landed = False
        try:
            with trio.move_on_after(self._admission.wait_timeout):
                landed = await self._effects.factory.marked(runner.id)
        finally:
            self._pool.activity(runner.id, trio.current_time(), working=-1)
            self._effects.deadlines_changed()
        if not landed:
            # Handed out without the mark, it could be handed out again by the next daemon to
            # list it; it goes instead (unless it went meanwhile: its allocation died).
            if self._pool.used_runner(runner.id) is not None:
                self._effects.apply(self._pool.release(runner.id))
            raise NomadUnreachable(f"runner {runner.id} could not be marked as claimed in Nomad")
        logger.info("runner claimed", runner=runner.id, inactivity_timeout=inactivity_timeout)
        return runner

    async def release(self, runner_id: str) -> None:
        """The client gives the runner back (RunnerGoneError if it holds none by that ID)."""
        await self._synced()
        self._effects.apply(self._pool.release(runner_id))
        logger.info("runner released", runner=runner_id)

    async def runner_for_work(self, runner_id: str) -> Runner:
        """The runner, if new work may start in it: its inactivity timeout starts again, the
        commands a previous run left in it are stopped, and a suspect one is proven first."""
        runner = self._pool.serving_runner(runner_id)
        if runner is None and not self._informer.is_synced():
            await self._synced()
            runner = self._pool.serving_runner(runner_id)
        if runner is None:
            raise RunnerGoneError(RUNNER_GONE)
        # A later deadline needs no wake-up: the expiry loop rechecks when the old one passes.
        self._pool.activity(runner.id, trio.current_time())
        await self._prove(runner)
        return runner

    async def _synced(self) -> None:
        """Wait (at the gate) for the daemon's first listing of Nomad: until then a runner the pool
        does not know may be a claim of a previous run, not a runner that is gone."""
        if not self._informer.is_synced():
            await self._gate.admit()

    async def _prove(self, runner: Runner) -> None:
        """A suspect runner (its agent restarted since it was last seen running) is proven by one
        GET of its allocation; RunnerGoneError if it is gone."""
        await self._leftovers.wait(runner.id)
        if not runner.suspect_since:
            return
        try:
            alloc = (await self._client.get_allocation(runner.alloc_id)).value
        except NomadNotFound:
            self.found(runner.id, Finding.ALLOCATION_UNKNOWN)
            raise RunnerGoneError(REASON_ALLOCATION_UNKNOWN) from None
        self._effects.apply(
            self._pool.evidence(AllocationSeen(alloc, FOUND_BY_NODE_RESTART), self._informer.moment())
        )
        if alloc.client_status == "running" and self._pool.serving_runner(runner.id) is runner:
            self._pool.prove(runner.id)
            return
        raise RunnerGoneError(f"the runner is gone: its allocation is {alloc.client_status}")

    def found(self, runner_id: str, finding: Finding) -> None:
        """What an exec session in the runner found out about it, for the pool."""
        if finding is Finding.ALLOCATION_UNKNOWN:
            logger.debug("runner {} is gone: Nomad no longer knows its allocation", runner_id)
        elif finding is Finding.AGENT_AWAY:
            logger.warning("runner {}: its Nomad agent stayed out of reach; it counts as moving", runner_id)
        fact = ExecFinding(runner_id, finding)
        self._effects.apply(self._pool.evidence(fact, self._informer.moment()))

    def alloc_id(self, runner_id: str) -> str | None:
        """The allocation of the used runner, while it is one."""
        runner = self._pool.used_runner(runner_id)
        return runner.alloc_id if runner is not None and runner.alloc_id else None

    def working(self, runner_id: str, delta: int) -> None:
        """One more (+1) or one fewer (-1) request or execution works in the runner: it does not
        expire meanwhile."""
        self._pool.activity(runner_id, trio.current_time(), working=delta)
        if delta < 0:  # the runner may expire again, possibly before the loop's next wake-up
            self._effects.deadlines_changed()

    @contextlib.contextmanager
    def held(self, runner_id: str) -> Iterator[None]:
        """Keep the runner from expiring for the duration of a block."""
        release = self.hold(runner_id)
        try:
            yield
        finally:
            release()

    def hold(self, runner_id: str) -> Callable[[], None]:
        """Keep the runner from expiring while a request works in it (a long upload or download, as
        an execution does); returns the release, which may be called more than once."""
        self.working(runner_id, +1)
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.working(runner_id, -1)

        return release

    # -- files ----------------------------------------------------------------------------------

    async def list_files(
        self, runner: Runner, path: str, *, recursive: bool, privileged: bool
    ) -> list[dict[str, Any]]:
        """The entries under ``path`` in the runner's workspace."""
        with self.held(runner.id):
            return await self._in_runner(
                runner.id,
                lambda: self._files.list(runner.alloc_id, path, recursive=recursive, privileged=privileged),
            )

    async def update_files(
        self, runner: Runner, deletions: list[str], copies: list[tuple[str, bytes | None]]
    ) -> None:
        """Delete, then copy, in the runner's workspace."""
        with self.held(runner.id):
            await self._in_runner(runner.id, lambda: self._files.update(runner.alloc_id, deletions, copies))

    async def download(
        self, runner: Runner, path: str, *, privileged: bool
    ) -> tuple[Download, Callable[[], None]]:
        """The file's content as it comes, and the release of the runner to call once it is sent."""
        release = self.hold(runner.id)
        try:
            download = await self._in_runner(
                runner.id, lambda: self._files.download(runner.alloc_id, path, privileged=privileged)
            )
        except BaseException:
            release()
            raise
        return download, release

    async def _in_runner(self, runner_id: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Carry out a file operation in the runner. If Nomad no longer knows its allocation, the
        runner is gone; if the server cannot reach its agent (nothing ran), the operation is tried
        again while the agent may be restarting, up to ``admission.wait_timeout``, and then the
        runner counts as moving. Either way its client gets RunnerGoneError (410)."""
        give_up = trio.current_time() + self._admission.wait_timeout
        while True:
            lost = False
            try:
                result = await operation()
                self.found(runner_id, Finding.AGENT_REACHED)
                return result
            except* ExecAllocationUnknown:
                lost = True
            except* ExecAgentUnreachable:
                self.found(runner_id, Finding.AGENT_UNREACHABLE)  # nothing ran: tried again below
            if lost:
                self.found(runner_id, Finding.ALLOCATION_UNKNOWN)
                raise RunnerGoneError(REASON_ALLOCATION_UNKNOWN)
            if not await wait_for_agent(give_up, self._admission.agent_retry_interval):
                self.found(runner_id, Finding.AGENT_AWAY)
                raise RunnerGoneError(MESSAGE_AGENT_AWAY)

    # -- executions -----------------------------------------------------------------------------

    async def prepare_execution(self, runner: Runner, request: ExecutionRequest) -> str:
        """Once the gate admits: store the execution; returns its single-use ID."""
        await self._gate.admit()
        return self._executions.prepare(request)

    async def take_execution(self, runner_id: str, execution_id: str) -> ExecutionRequest:
        """The prepared execution, used up, once the gate admits again (its URL may have been
        handed out before the stream was lost): NomadUnreachable if it does not; LookupError when
        no execution has that ID on that runner; RunnerGoneError when the runner is gone."""
        await self._gate.admit()
        request = self._executions.take(execution_id)
        if request is None or request.runner_id != runner_id:
            raise LookupError("no execution found with this id")
        if self._pool.serving_runner(runner_id) is None:
            raise RunnerGoneError(RUNNER_GONE)
        return request

    async def execute(self, socket: ClientSocket, execution_id: str, request: ExecutionRequest) -> int:
        """Run the execution to its end; returns the WebSocket close code."""
        return await self._executions.serve(socket, execution_id, request, self)

    # -- what exec sessions ask -------------------------------------------------------------------

    @property
    def agent_wait(self) -> float:
        """How long an exec waits for an agent a server cannot reach."""
        return self._admission.wait_timeout

    @property
    def agent_retry(self) -> float:
        """How often it tries that agent again meanwhile."""
        return self._admission.agent_retry_interval
