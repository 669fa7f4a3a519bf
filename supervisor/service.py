"""The runner service: where the pool's actions are carried out, and what the API asks of runners.

The pool (with its node tracker) is the only mutator of runner state and stays synchronous and free
of I/O; this service hands it facts (claims, releases, events, listings, exec evidence) and carries
out the actions it returns: the factory's writes, the executions' ends, relist requests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Final, NoReturn, TypeVar

import attrs
import trio
from loguru import logger

from .admission import AdmissionGate
from .config import Settings
from .environment_store import EnvironmentStore
from .environments import CLAIM_GROUP, TEMPLATE_PREFIX, runner_prefix
from .errors import (
    ExecAgentUnreachable,
    ExecAllocationUnknown,
    NomadNotFound,
    RunnerGoneError,
    raise_alone,
)
from .executions import MESSAGE_AGENT_AWAY, ExecutionService, wait_for_agent
from .expiry import InactivityExpiry
from .factory import RunnerFactory
from .files import FileService
from .leftovers import LeftoverSweep
from .levels import Requests, StreamState
from .nodes import AWAY_SECONDS
from .nomad import Allocation, AllocListStub, EventBatch, Indexed, Job, JobListStub, Node
from .nomad.agents import AgentRoute
from .nomad.api import NomadApi
from .pool import RunnerPool
from .runners import (
    FOUND_BY_NODE_RESTART,
    REASON_ALLOCATION_UNKNOWN,
    REASON_DESTROYED,
    REASON_ENVIRONMENT,
    Action,
    DestroyRunner,
    RelistWanted,
    Runner,
    RunnerGone,
    RunnerState,
)

__all__ = ["RunnerService"]

T = TypeVar("T")

# Allocations that may still run: what a relist needs of Nomad's allocations (nomad-api.md §2).
# Ends that are not news: a client gave its runner back, or its environment was deleted (one line).
_ROUTINE_ENDS: Final = frozenset({REASON_DESTROYED, REASON_ENVIRONMENT})
# Runners named in one such line; more are counted.
_NAMED: Final = 5
# GETs of claimed runner jobs under way at once while a relist adopts them.
_CLAIM_READS: Final = 16
# Runner job listings read at once in a relist: enough that Nomad answers one while another is decoded.
_LISTINGS_AT_ONCE: Final = 4
# How often to look for agents that have said nothing about the runners placed on their nodes.
_SILENCE_CHECKS: Final = 1.0
# No batch of the event stream for this long is a pause (a leader's election, say), which counts for
# this long at most in the stream's flow, by which agents' silence is timed: a report an agent could
# not make meanwhile comes after it.
_STREAM_PAUSE: Final = 2.0
# Allocations per page of a relist's listing: with lean stubs, its memory is one page's at a time.
RELIST_PAGE: Final = 5000
LIVE_ALLOCATIONS: Final = (
    'DesiredStatus == "run" and ClientStatus != "complete" and ClientStatus != "failed" '
    'and ClientStatus != "lost"'
)


class RunnerService:
    """Hands the pool its facts and carries out its actions; what the API and the watcher call."""

    def __init__(self, client: NomadApi, settings: Settings, *, execution_nursery: trio.Nursery) -> None:
        self.client = client
        self.settings = settings
        self.pool = RunnerPool(flowed=self.stream_flowed)
        client.agents.locate = self._agent_route
        self.gate = AdmissionGate(settings.admission.wait_timeout)
        self.factory = RunnerFactory(client, self.pool, settings.factory)
        self.pool.on_started = self.factory.started
        self.pool.clock = trio.current_time
        self.leftovers = LeftoverSweep(
            client,
            task=settings.execution.task,
            grace=settings.execution.stop_grace,
            alloc_of=self._alloc_of,
            nursery=execution_nursery,
        )
        self.executions = ExecutionService(
            client,
            settings.execution,
            alloc_of=self._alloc_of,
            activity=self._execution_activity,
            replace_runner=lambda runner_id, reason: self.apply(self.pool.destroy(runner_id, reason)),
            execution_nursery=execution_nursery,
            runner_lost=self.runner_lost,
            agent_away=self.pool.set_moving,
            agent_unreachable=self.agent_unreachable,
            agent_reached=self.pool.agent_reached,
            agent_wait=settings.admission.wait_timeout,
            agent_retry=settings.admission.agent_retry_interval,
        )
        self.files = FileService(
            client,
            task=settings.execution.task,
            workspace=settings.execution.workspace,
            stop_grace=settings.execution.stop_grace,
            execution_nursery=execution_nursery,
            allocation_in_use=lambda alloc_id: self.pool.runner_of_alloc(alloc_id) is not None,
            unprivileged_wrapper=settings.execution.unprivileged_wrapper,
        )
        self.environments = EnvironmentStore(client, self.pool, self.apply)
        self.expiry = InactivityExpiry(self.pool, self.apply)
        self.last_index = 0
        # When the last batch of the event stream was applied, and how far the stream has flowed
        # (seconds between its batches, each pause counted as _STREAM_PAUSE at most).
        self.last_batch_at = 0.0
        self._flowed = 0.0
        self.relists = Requests()
        self.synced = trio.Event()

    # -- actions --------------------------------------------------------------------------------

    def apply(self, actions: Iterable[Action]) -> None:
        """Carry out the pool's actions: the factory's writes, executions' ends, relist requests.
        Runners destroyed for a cause other than their release or their environment's deletion are
        logged at INFO, one line per cause with the count; each one at DEBUG."""
        gone: dict[str, list[str]] = {}
        for action in actions:
            if isinstance(action, DestroyRunner) and action.reason not in _ROUTINE_ENDS:
                gone.setdefault(action.reason, []).append(action.runner_id)
            if isinstance(action, RunnerGone):
                self.executions.runner_gone(action.runner_id, action.reason)
            elif isinstance(action, RelistWanted):
                self.request_relist(action.reason)
            else:
                self.factory.submit(action)
        for reason, runner_ids in gone.items():
            named = ", ".join(runner_ids[:_NAMED]) + (", ..." if len(runner_ids) > _NAMED else "")
            plural = "" if len(runner_ids) == 1 else "s"
            logger.info("{} runner{} gone: {} ({})", len(runner_ids), plural, reason, named)

    # -- runners --------------------------------------------------------------------------------

    def claim(self, environment_id: int, inactivity_timeout: int) -> Runner:
        """Hand out an idle, proven runner of the environment (NoIdleRunner if there is none)."""
        runner, actions = self.pool.claim(environment_id, inactivity_timeout, trio.current_time())
        self.apply(actions)
        self.expiry.changed()  # a new inactivity deadline
        logger.info("runner {} claimed (inactivity timeout {}s)", runner.id, inactivity_timeout)
        return runner

    def runner_lost(self, runner_id: str) -> None:
        """Nomad refused an exec in the runner because it no longer knows its allocation."""
        logger.debug("runner {} is gone: Nomad no longer knows its allocation", runner_id)
        self.apply(self.pool.lost(runner_id, REASON_ALLOCATION_UNKNOWN))

    def agent_unreachable(self, runner_id: str) -> None:
        """An exec in the runner could not reach its agent: new runners avoid its node a while."""
        runner = self.pool.runners.get(runner_id)
        if runner is not None:
            self._avoid(runner.node_id, "an exec could not reach its agent")

    def _avoid(self, node_id: str, why: str, *, silent: bool = False) -> None:
        newly, actions = self.pool.avoid(node_id, silent=silent)
        self.apply(actions)
        if newly:
            node = self.pool.nodes.nodes[node_id]
            logger.warning(
                "node {}: {}; new runners avoid it for up to {:.0f}s", node.name or node.id, why, AWAY_SECONDS
            )

    async def find_silent_agents(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Every second, ``avoid_silent_agents``."""
        task_status.started()
        while True:
            await trio.sleep(_SILENCE_CHECKS)
            self.avoid_silent_agents()

    def stream_flowed(self) -> float:
        """How far the event stream has flowed, in seconds (see ``NodeTracker.silent``)."""
        return self._flowed

    def avoid_silent_agents(self) -> None:
        """While the event stream is up: new runners avoid the nodes whose agent has reported
        nothing for a few seconds of the stream's flow since a runner's allocation was placed there,
        while other agents reported (``NodeTracker.silent``). Nomad keeps placing runners
        there until the agent's heartbeats have been missed for their TTL and grace, 20 s or more."""
        if self.gate.state is StreamState.UP:
            for node_id in self.pool.nodes.silent(self._flowed, trio.current_time()):
                self._avoid(node_id, "its agent has said nothing of the runners placed there", silent=True)

    async def in_runner(self, runner_id: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Carry out a file operation in the runner. If Nomad no longer knows its allocation, the
        runner is gone; if the server cannot reach its agent (nothing ran), the operation is tried
        again while the agent may be restarting, up to ``admission.wait_timeout``, and then the
        runner counts as moving. Either way its client gets RunnerGoneError (410)."""
        give_up = trio.current_time() + self.settings.admission.wait_timeout
        while True:
            lost = False
            try:
                result = await operation()
                self.pool.agent_reached(runner_id)
                return result
            except* ExecAllocationUnknown:
                lost = True
            except* ExecAgentUnreachable:
                self.agent_unreachable(runner_id)  # nothing ran: tried again below
            if lost:
                self.runner_lost(runner_id)
                raise RunnerGoneError(REASON_ALLOCATION_UNKNOWN)
            if not await wait_for_agent(give_up, self.settings.admission.agent_retry_interval):
                logger.warning(
                    "runner {}: its Nomad agent stayed out of reach; it counts as moving", runner_id
                )
                self.pool.set_moving(runner_id)
                raise RunnerGoneError(MESSAGE_AGENT_AWAY)

    async def prove(self, runner: Runner) -> None:
        """Before new work starts in a runner: the commands a previous run left in it are stopped;
        and a suspect runner (its agent restarted since it was last seen running) is proven by one
        GET of its allocation; RunnerGoneError if it is gone."""
        await self.leftovers.wait(runner.id)
        if not runner.suspect_since:
            return
        try:
            alloc = (await self.client.get_allocation(runner.alloc_id)).value
        except NomadNotFound:
            self.runner_lost(runner.id)
            raise RunnerGoneError(REASON_ALLOCATION_UNKNOWN) from None
        self.apply(self.pool.apply_allocation(alloc, found=FOUND_BY_NODE_RESTART))
        if alloc.client_status == "running" and self.pool.serving_runner(runner.id) is runner:
            self.pool.prove(runner.id)
            return
        raise RunnerGoneError(f"the runner is gone: its allocation is {alloc.client_status}")

    def release(self, runner_id: str) -> None:
        """The client gives the runner back (RunnerGoneError if it holds none by that ID)."""
        self.apply(self.pool.release(runner_id))

    def touch(self, runner_id: str) -> None:
        """The client used the runner now: its inactivity timeout starts again."""
        # A later deadline needs no wake-up: the expiry loop rechecks when the old one passes.
        self.pool.activity(runner_id, trio.current_time())

    def _agent_route(self, alloc_id: str) -> AgentRoute | None:
        """Where the allocation's agent is, for exec straight to it: the node tracker knows the
        node's address (from its events) and its generation (the index of its agent's last
        restart)."""
        runner = self.pool.runner_of_alloc(alloc_id)
        if runner is None or not runner.node_id:
            return None
        node = self.pool.nodes.nodes.get(runner.node_id)
        if node is None:
            return AgentRoute(runner.node_id)
        return AgentRoute(node.id, node.restarted_at, node.http_addr, node.tls, down=node.status == "down")

    def _alloc_of(self, runner_id: str) -> str | None:
        runner = self.pool.used_runner(runner_id)
        return runner.alloc_id if runner is not None and runner.alloc_id else None

    def hold(self, runner_id: str) -> Callable[[], None]:
        """Keep the runner from expiring while a request works in it (a long upload or download, as
        an execution does); returns the release, which may be called more than once."""
        self._execution_activity(runner_id, +1)
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self._execution_activity(runner_id, -1)

        return release

    @contextlib.contextmanager
    def held(self, runner_id: str) -> Iterator[None]:
        """hold() for the duration of a block."""
        release = self.hold(runner_id)
        try:
            yield
        finally:
            release()

    def _execution_activity(self, runner_id: str, delta: int) -> None:
        self.pool.activity(runner_id, trio.current_time(), working=delta)
        if delta < 0:  # the runner may expire again, possibly before the loop's next wake-up
            self.expiry.changed()

    # -- Nomad's view ---------------------------------------------------------------------------

    def request_relist(self, reason: str) -> None:
        """Ask the event-stream watcher, the one owner of the pool's view of Nomad, for a relist."""
        self.relists.request(reason)

    async def relist(self) -> int:
        """List what the pool needs and reconcile it at the listing's index; returns that index.

        Only the event-stream watcher calls this, between the batches it applies. The listing reads
        the nodes, the template jobs, each environment's runner jobs by prefix, and the live
        allocations through a filter, without task states: its cost follows the live runners, not
        the terminal allocations Nomad keeps for hours. Environments stay as they are meanwhile.

        The listing's index is the lowest ``X-Nomad-Index`` of its reads, but never below the index
        of the last event applied before it began: Nomad answered every read after committing that
        event, so the listing shows at least that state, even where a table's own index (the jobs
        table's, say, after a node event) is older.
        """
        async with self.environments.lock:
            index = await self._list_and_reconcile()
            if not self.synced.is_set():  # once, at start: what a previous run may have left
                # In the step that made the adopted claims known: a request in one waits for its
                # sweep, which would otherwise stop that request's own command.
                self.leftovers.adopt(r.id for r in self.pool.runners.values() if r.state is RunnerState.USED)
                self.apply(self.pool.orphans((await self.client.list_jobs(meta=True)).value))
        self.expiry.changed()  # adopted claims bring their inactivity deadlines
        self.last_index = max(self.last_index, index)
        self.synced.set()
        return self.last_index

    async def _list_and_reconcile(self) -> int:
        """The listing and its reconcile; the listing (tens of MB at 10,000 runners) is freed on
        return, before anything else is listed."""
        seen = self.last_index
        nodes = await self.client.list_nodes()
        self.apply(self.pool.replace_nodes(nodes.value, nodes.index))
        templates = await self.client.list_jobs(TEMPLATE_PREFIX, meta=True)
        self.environments.adopt(templates.value, fill=False)  # the reconcile below refills
        jobs: list[JobListStub] = []
        index = min(nodes.index, templates.index)
        listed: list[Indexed[list[AllocListStub]]] = []

        async def list_allocations() -> None:
            listed.append(
                await self.client.list_allocations(
                    filter=LIVE_ALLOCATIONS,
                    resources=True,
                    task_states=False,
                    per_page=RELIST_PAGE,
                    lean=True,
                )
            )

        by_environment: dict[int, Indexed[list[JobListStub]]] = {}
        listings, claim_reads = trio.CapacityLimiter(_LISTINGS_AT_ONCE), trio.CapacityLimiter(_CLAIM_READS)

        async def list_runners(environment_id: int) -> None:
            async with listings:
                runners = await self.client.list_jobs(
                    runner_prefix(environment_id), meta=True, per_page=RELIST_PAGE
                )
                value = await self._with_claims(runners.value, claim_reads)
            by_environment[environment_id] = Indexed(value, runners.index)

        try:
            # Nomad answers one read while the daemon decodes another: their work overlaps
            # instead of adding up.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(list_allocations)
                for environment_id in sorted(self.pool.environments):
                    nursery.start_soon(list_runners, environment_id)
        except BaseExceptionGroup as group:
            raise_alone(group)  # the first read that failed ended the others
        for environment_id in sorted(by_environment):
            jobs += by_environment[environment_id].value
            index = min(index, by_environment[environment_id].index)
        allocs = listed[0]
        index = max(seen, min(index, allocs.index))
        self.apply(self.pool.reconcile(jobs, allocs.value, trio.current_time(), index=index))
        return index

    async def _with_claims(self, jobs: list[JobListStub], limiter: trio.CapacityLimiter) -> list[JobListStub]:
        """The listed runner jobs, each one that may hold a claim with its claim group's meta, read
        by one GET of the job; one purged meanwhile is left out. At the start, those updated since
        their registration: a claim's write is a runner job's only update, and the others (most of a
        previous run's) are idle. Later, every job the pool neither knows nor removed, which is rare:
        a claim's write that landed after its runner's job was gone creates the job anew, claimed."""
        claimed: dict[str, dict[str, str]] = {}
        unknown = [
            j
            for j in jobs
            if j.id not in self.pool.runners
            and j.id not in self.pool.tombstones
            and (self.synced.is_set() or j.job_modify_index > j.create_index)
        ]

        async def read(stub: JobListStub, limiter: trio.CapacityLimiter) -> None:
            async with limiter:
                try:
                    job = (await self.client.get_job(stub.id)).value
                except NomadNotFound:
                    return
            group = job.group(CLAIM_GROUP)
            claimed[stub.id] = {**stub.meta, **(group.meta if group is not None else {})}

        async with trio.open_nursery() as nursery:
            for stub in unknown:
                nursery.start_soon(read, stub, limiter)
        gone = {j.id for j in unknown} - set(claimed)
        return [
            attrs.evolve(j, meta=claimed[j.id]) if j.id in claimed else j for j in jobs if j.id not in gone
        ]

    def apply_batch(self, batch: EventBatch) -> None:
        """Apply a batch of the stream. Of a batch that a listing already covered, only its Node
        events and its agents' reports: no listing shows an agent's restart (its node was ready
        before and after), nor what an agent reported of an allocation."""
        covered = batch.index <= self.last_index
        now = trio.current_time()
        gap = now - self.last_batch_at
        self._flowed += min(gap, _STREAM_PAUSE)
        if gap > _STREAM_PAUSE or self.gate.since > self.last_batch_at:
            # A pause, or the stream was lost since the last batch (a leader's restart, say).
            self.pool.nodes.stream_paused(self._flowed)
        self.last_batch_at = now
        for event in batch.events:
            payload = event.payload
            if isinstance(payload, Allocation) and event.type == "AllocationUpdated":
                self.pool.agent_reported(payload)  # a listing does not say what the agents reported
            if covered and not isinstance(payload, Node):
                continue
            if isinstance(payload, Allocation):
                self.apply(self.pool.apply_allocation(payload))
            elif isinstance(payload, Job):
                self.apply(self.pool.apply_job(payload.id, deleted=event.deleted, stopped=payload.stop))
            elif isinstance(payload, Node):
                self.apply(self.pool.apply_node(event.type, payload, event.index))
        self.last_index = max(self.last_index, batch.index)
