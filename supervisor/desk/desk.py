"""The runner desk: what the API asks of runners (claim, release, files, execute), behind the gate.

Every request that starts something new (a claim, an execution) waits at the admission gate; every
request that works in a runner finds it among the runners the pool serves, proves it first if its
agent restarted since it was last seen, and works in it under a lease (``lease.py``): the runner
does not expire meanwhile, and what the work finds out about its runner (its allocation unknown,
its agent out of reach or back) goes to the pool as evidence. The desk changes the pool only through
its one entry (``Effects.tell``), and holds no state of its own: the pool holds the runners, the
execution service the executions. It counts what its work came to into the term's figures
(``figures.py``): each claim by outcome (and the claimed ones' time), each file transfer that
succeeded and its bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeVar

import trio
from loguru import logger

from ..base.errors import (
    ExecAgentUnreachable,
    ExecAllocationUnknown,
    NoIdleRunner,
    NomadNotFound,
    NomadUnreachable,
    RunnerGoneError,
    UnknownEnvironment,
)
from ..base.levels import StreamState
from ..core.config import AdmissionSettings
from ..core.environments import ExecutionEnvironment
from ..core.evidence import AllocationSeen, Finding, RunnerProven
from ..core.orders import Claim, Release, Touch
from ..core.runners import (
    FOUND_BY_NODE_RESTART,
    REASON_ALLOCATION_UNKNOWN,
    REASON_CONTAINER_LOST,
    MarkUsed,
    PoolStats,
    Runner,
)
from ..effects.effects import Effects
from ..effects.environment_store import EnvironmentStore
from ..informer.informer import Informer
from ..nomad.api import NomadApi
from .executions import (
    MESSAGE_AGENT_AWAY,
    AdmittedExecution,
    ExecutionRequest,
    ExecutionService,
    wait_for_agent,
)
from .figures import DOWNLOAD, UNKNOWN_ENVIRONMENT, UPLOAD, DeskFigures
from .files import Download, FileService
from .lease import RunnerLease

__all__ = ["RUNNER_GONE", "RunnerDesk"]

T = TypeVar("T")

# What a client asking for a runner the pool does not serve is told (Poseidon's text).
RUNNER_GONE: Final = "no runner found with this id"


class RunnerDesk:
    """Claims, releases, file operations and executions, for the API."""

    def __init__(
        self,
        client: NomadApi,
        effects: Effects,
        informer: Informer,
        *,
        executions: ExecutionService,
        files: FileService,
        admission: AdmissionSettings,
        figures: DeskFigures | None = None,
    ) -> None:
        self._client = client
        self._pool = effects.pool
        self._effects = effects
        self._informer = informer
        self._gate = informer.gate
        self._executions = executions
        self._files = files
        self._environments = informer.environments
        self._leftovers = effects.leftovers
        self._admission = admission
        self._figures = DeskFigures() if figures is None else figures

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
        return self._pool.environment(environment_id)

    def environments(self) -> list[ExecutionEnvironment]:
        """Every environment the pool knows, by ID."""
        return self._pool.all_environments()

    async def listed_environment(self, environment_id: int) -> ExecutionEnvironment | None:
        """The environment as the pool knows it, after the daemon's first listing of Nomad when the
        pool does not know it yet: a restarted daemon learns its environments from that listing."""
        if self._pool.environment(environment_id) is None:
            await self._synced()
        return self._pool.environment(environment_id)

    async def listed_environments(self) -> list[ExecutionEnvironment]:
        """Every environment the pool knows, by ID, after the daemon's first listing of Nomad: the
        list a client reads as soon as the port answers leaves none out that Nomad holds."""
        await self._synced()
        return self._pool.all_environments()

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
        there is none, UnknownEnvironment if the pool knows no such environment. Counted by outcome
        (a claim cancelled with its request is not: it was never answered), under ``unknown`` for
        an environment the pool does not know."""
        started = trio.current_time()
        outcome = ""  # none while cancelled
        try:
            runner = await self._claim(environment_id, inactivity_timeout)
            outcome = "claimed"
        except UnknownEnvironment:
            outcome = "unknown_environment"
            raise
        except NoIdleRunner:
            outcome = "no_idle_runner"
            raise
        except NomadUnreachable:
            outcome = "unreachable"
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            if outcome:
                known = outcome == "claimed" or self._pool.environment(environment_id) is not None
                environment = str(environment_id) if known else UNKNOWN_ENVIRONMENT
                self._figures.claims.add(environment, outcome)
                if outcome == "claimed":
                    self._figures.claim_seconds.observe(environment, trio.current_time() - started)
        return runner

    async def _claim(self, environment_id: int, inactivity_timeout: int) -> Runner:
        """The claim itself, uncounted."""
        if self._pool.environment(environment_id) is None and not self._informer.is_synced():
            await self._synced()  # a restarted daemon learns its environments from its first listing
        if self._pool.environment(environment_id) is None:
            raise UnknownEnvironment(environment_id)
        await self._gate.admit()
        actions = self._effects.tell(Claim(environment_id, inactivity_timeout))
        runner_id = next(action.runner_id for action in actions if isinstance(action, MarkUsed))
        runner = self._pool.runner(runner_id)
        assert runner is not None, "a claimed runner is the pool's until its claim returns"
        self._effects.tell(Touch(runner_id, working=+1))  # no expiry while it waits
        landed = False
        try:
            with trio.move_on_after(self._admission.wait_timeout):
                landed = await self._effects.factory.marked(runner_id)
        finally:
            self._effects.tell(Touch(runner_id, working=-1))
            self._effects.deadlines_changed(runner_id)
        if not landed:
            # Handed out without the mark, it could be handed out again by the next daemon to
            # list it; it goes instead (unless it went meanwhile: its allocation died).
            if self._pool.used_runner(runner_id) is not None:
                self._effects.tell(Release(runner_id))
            raise NomadUnreachable(f"runner {runner.id} could not be marked as claimed in Nomad")
        logger.info("runner claimed", runner=runner.id, inactivity_timeout=inactivity_timeout)
        return runner

    async def release(self, runner_id: str) -> None:
        """The client gives the runner back (RunnerGoneError if it holds none by that ID)."""
        await self._synced()
        self._effects.tell(Release(runner_id))
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
        self._effects.tell(Touch(runner.id))
        await self._prove(runner)
        return runner

    async def _synced(self) -> None:
        """Wait (at the gate) for the daemon's first listing of Nomad: until then a runner the pool
        does not know may be a claim of a previous run, not a runner that is gone."""
        if not self._informer.is_synced():
            await self._gate.admit()

    async def _prove(self, runner: Runner) -> None:
        """A suspect runner (its agent restarted since it was last seen running) is proven by one
        GET of its allocation and a command run in it; RunnerGoneError if it is gone."""
        await self._leftovers.wait(runner.id)
        if not runner.suspect_since:
            return
        try:
            alloc = (await self._client.get_allocation(runner.alloc_id)).value
        except NomadNotFound:
            self.lease(runner.id, runner.alloc_id).found(Finding.ALLOCATION_UNKNOWN)
            raise RunnerGoneError(REASON_ALLOCATION_UNKNOWN) from None
        self._effects.tell(AllocationSeen(alloc, FOUND_BY_NODE_RESTART), self._informer.moment())
        if alloc.client_status == "running" and self._pool.serving_runner(runner.id) is runner:
            # The servers list the allocation as its client last wrote it: a container its agent
            # came back without is listed running until the client says otherwise.
            if not await self._effects.probes.container_runs(alloc.id):
                raise RunnerGoneError(REASON_CONTAINER_LOST)
            self._effects.tell(RunnerProven(runner.id, alloc.id))
            return
        raise RunnerGoneError(f"the runner is gone: its allocation is {alloc.client_status}")

    def lease(self, runner_id: str, alloc_id: str) -> RunnerLease:
        """A lease on the runner and its allocation, not yet held (``with lease:`` holds it)."""
        return RunnerLease(runner_id, alloc_id, self._admission, self._effects, self._informer.moment)

    # -- files ----------------------------------------------------------------------------------

    async def list_files(
        self, runner: Runner, path: str, *, recursive: bool, privileged: bool
    ) -> list[dict[str, Any]]:
        """The entries under ``path`` in the runner's workspace (anywhere in its container, for an
        absolute path outside the workspace)."""
        with self.lease(runner.id, runner.alloc_id) as lease:
            return await self._in_runner(
                lease,
                lambda: self._files.list(runner.alloc_id, path, recursive=recursive, privileged=privileged),
            )

    async def update_files(
        self, runner: Runner, deletions: list[str], copies: list[tuple[str, bytes | None]]
    ) -> None:
        """Delete, then copy, in the runner's workspace; once done, counted as an upload of the
        copies' contents."""
        with self.lease(runner.id, runner.alloc_id) as lease:
            await self._in_runner(lease, lambda: self._files.update(runner.alloc_id, deletions, copies))
        environment = str(runner.environment_id)
        self._figures.transfers.add(environment, UPLOAD)
        written = sum(len(content) for _, content in copies if content is not None)
        self._figures.transfer_bytes.add(environment, UPLOAD, written)

    async def download(
        self, runner: Runner, path: str, *, privileged: bool
    ) -> tuple[Download, Callable[[], None]]:
        """The file's content as it comes, and the release of the runner to call once it is sent.
        Its bytes are counted as they are sent, and the download once its last one is."""
        lease = self.lease(runner.id, runner.alloc_id)
        lease.hold()
        try:
            download = await self._in_runner(
                lease, lambda: self._files.download(runner.alloc_id, path, privileged=privileged)
            )
        except BaseException:
            lease.give_back()
            raise
        environment = str(runner.environment_id)
        download.count_into(
            partial(self._figures.transfer_bytes.add, environment, DOWNLOAD),
            partial(self._figures.transfers.add, environment, DOWNLOAD),
        )
        return download, lease.give_back

    async def _in_runner(self, lease: RunnerLease, operation: Callable[[], Awaitable[T]]) -> T:
        """Carry out a file operation in the runner. If Nomad no longer knows its allocation, the
        runner is gone; if the server cannot reach its agent (nothing ran), the operation is tried
        again while the agent may be restarting, up to ``admission.wait_timeout``, and then the
        runner counts as moving. Either way its client gets RunnerGoneError (410)."""
        give_up = trio.current_time() + lease.agent_wait
        while True:
            lost = False
            try:
                result = await operation()
                lease.found(Finding.AGENT_REACHED)
                return result
            except* ExecAllocationUnknown:
                lost = True
            except* ExecAgentUnreachable:
                lease.found(Finding.AGENT_UNREACHABLE)  # nothing ran: tried again below
            if lost:
                lease.found(Finding.ALLOCATION_UNKNOWN)
                raise RunnerGoneError(REASON_ALLOCATION_UNKNOWN)
            if not await wait_for_agent(give_up, lease.agent_retry):
                lease.found(Finding.AGENT_AWAY)
                raise RunnerGoneError(MESSAGE_AGENT_AWAY)

    # -- executions -----------------------------------------------------------------------------

    async def prepare_execution(self, runner: Runner, request: ExecutionRequest) -> str:
        """Once the gate admits: store the execution; returns its single-use ID."""
        await self._gate.admit()
        return self._executions.prepare(request)

    async def take_execution(self, runner_id: str, execution_id: str) -> AdmittedExecution:
        """The prepared execution, used up, with a lease on its runner, once the gate admits again
        (its URL may have been handed out before the stream was lost): NomadUnreachable if it does
        not; LookupError when no execution has that ID on that runner; RunnerGoneError when the
        runner is gone."""
        await self._gate.admit()
        request = self._executions.take(execution_id)
        if request is None or request.runner_id != runner_id:
            raise LookupError("no execution found with this id")
        runner = self._pool.serving_runner(runner_id)
        if runner is None:
            raise RunnerGoneError(RUNNER_GONE)
        return AdmittedExecution(execution_id, request, self.lease(runner_id, runner.alloc_id))
