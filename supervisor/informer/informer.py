"""The informer: the one owner of what Nomad says, turned into evidence for the pool.

As client-go's Reflector does it: list, reconcile at the listing's index, then watch from that
index; after every loss of the stream, the same again. Relists asked for meanwhile (the periodic
safety net, the prewarming-pool alert, evidence that runners are gone) run in a task of their own,
in turn with the stream's batches and never beside one, first come first served: a batch read while
a listing runs waits for it, a listing asked for while a batch is applied waits for that one. A
listing is so applied in order with the events, and of a batch that a listing already covers only
the Node events and the agents' reports are applied. Each batch is applied in the task that reads
it, without a turn of the scheduler while nothing waits and the stream has more in its buffer: a
busy cluster writes hundreds of batches a second, and handing each to another task cost a turn
each, which under load is what the events waited for.

Events and listings become typed facts (``supervisor.core.evidence``) that the pool applies at the
informer's ``moment()``: trio's time and how far the stream has flowed, by which agents' silence is
timed. Every second, while the stream is up, the informer also looks for agents that have said
nothing of the runners placed on their nodes (``watch_silence``).

It reports the stream's health to the admission gate, its only writer: DOWN while it cannot follow
Nomad, RECOVERING while it relists after a loss, UP while the stream runs. Nothing is cancelled when
the stream drops; new claims and executions wait at the gate, running executions never notice.
"""

from __future__ import annotations

from typing import Final, NoReturn

import attrs
import trio
from loguru import logger

from ..base.backoff import Backoff, BackoffPolicy
from ..base.entropy import Entropy
from ..base.errors import NomadNotFound, NomadPermissionDenied, SupervisorError, raise_alone
from ..base.faults import FaultKind, Faults
from ..base.levels import Requests, StreamState
from ..base.memory import release_free_memory
from ..core.config import Settings
from ..core.environments import CLAIM_GROUP, TEMPLATE_PREFIX, runner_prefix
from ..core.evidence import (
    AgentReport,
    AllocationSeen,
    Fact,
    JobSeen,
    JobsListed,
    Moment,
    NodeSeen,
    NodesListed,
    RunnersListed,
    SilentAgent,
    StreamResumed,
)
from ..core.nodes import last_registration
from ..core.runners import RunnerState
from ..effects.effects import Effects
from ..effects.environment_store import EnvironmentStore
from ..nomad import (
    Allocation,
    AllocListStub,
    EventBatch,
    EventStream,
    Indexed,
    Job,
    JobListStub,
    Node,
    NodeListStub,
)
from ..nomad.api import NomadApi
from ..nomad.boundary import token_refused
from .admission import AdmissionGate

__all__ = ["LIVE_ALLOCATIONS", "RELIST_PAGE", "Informer"]

_TOPICS: Final = {"Job": "*", "Allocation": "*", "Node": "*"}
# The fault's subject, and what the listings and the stream of these topics need of the token.
_STREAM: Final = "event stream"
_STREAM_NEEDS: Final = "list-jobs and read-job in the daemon's namespace, and node read"
# Seconds a stream must stay up before the failures before it are forgotten.
STREAM_HEALTHY_AFTER: Final = 2.0
# The longest pause between reconnects. The gate holds every new claim while the stream is down,
# and a reconnect costs one listing (at 10,000 runners about 18 MiB and 0.7 s of the daemon's CPU,
# scripts/bench_recovery.py), which even every 10 s is a small share of a core: 10 s, not more.
STREAM_BACKOFF_CAP: Final = 10.0
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
# Allocations that may still run: what a relist needs of Nomad's allocations (nomad-api.md §2).
LIVE_ALLOCATIONS: Final = (
    'DesiredStatus == "run" and ClientStatus != "complete" and ClientStatus != "failed" '
    'and ClientStatus != "lost"'
)


class Informer:
    """Lists, reconciles and watches Nomad for the pool."""

    def __init__(
        self,
        client: NomadApi,
        effects: Effects,
        environments: EnvironmentStore,
        settings: Settings,
        *,
        entropy: Entropy | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.client = client
        self._faults = Faults() if faults is None else faults
        self._pool = effects.pool
        self._effects = effects
        self.environments = environments
        # The stream's health, which only the informer writes: new work waits at it.
        self.gate = AdmissionGate(settings.admission.wait_timeout)
        # What asks for a relist (the pool's RelistWanted, carried out by the effects; the alerter).
        self.relists: Requests = effects.relists
        self.heartbeat_timeout = settings.watcher.heartbeat_timeout
        self.resync_interval = settings.watcher.resync_interval
        entropy = Entropy() if entropy is None else entropy
        # A stream must stay up this long before its failures are forgotten: a server that flaps
        # must not earn a full relist every half second, but one that restarted after serving a
        # while must not cost the next reconnect the growing pause of a flapping one.
        self.backoff = Backoff(
            BackoffPolicy(0.5, STREAM_BACKOFF_CAP),
            healthy_after=STREAM_HEALTHY_AFTER,
            random_fraction=entropy.fraction,
        )
        # Since when the stream is down (None while it is up, or before it first was).
        self._lost_at: float | None = None
        # When the informer last moved on (an attempt, a listing, a batch, a heartbeat), for the
        # systemd watchdog: an informer stuck anywhere stops it.
        self.progress_at = 0.0
        # Since when the informer lists (at a connect, or when asked); None otherwise. A batch is
        # applied in the same step as its read, unless it waits for a listing.
        self._busy_since: float | None = None
        self._stream: EventStream | None = None
        self._heartbeats_seen = 0
        # Relists carried out, by what asked for them ("connect", "periodic", ...).
        self.relisted: dict[str, int] = {}
        self.last_index = 0
        # Each node's ModifyIndex when its events were last read: a registration of its agent
        # changes it, and only then are they read again.
        self._nodes_read: dict[str, int] = {}
        # When the last batch of the event stream was applied, and how far the stream has flowed
        # (seconds between its batches, each pause counted as _STREAM_PAUSE at most).
        self.last_batch_at = 0.0
        self._flowed = 0.0
        # Set once the first listing is reconciled.
        self.synced = trio.Event()

    def is_synced(self) -> bool:
        """Whether the first listing of Nomad is reconciled."""
        return self.synced.is_set()

    def moment(self) -> Moment:
        """Now, for the pool: trio's time and how far the event stream has flowed."""
        return Moment(trio.current_time(), self._flowed)

    def _apply(self, fact: Fact, at: Moment | None = None) -> None:
        """Hand the pool a fact, at ``at`` (now, when not given), and its actions to the effects."""
        self._effects.tell(fact, at if at is not None else self.moment())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> NoReturn:
        """Never returns; starts at once, with the stream DOWN until the first listing is in."""
        task_status.started()
        try:
            await self._watch()
        finally:
            self.gate.report(StreamState.DOWN)  # crashed or cancelled: nobody follows Nomad

    def making_progress(self, within: float) -> bool:
        """Whether the informer moved on within the last ``within`` seconds: on a quiet stream,
        Nomad's heartbeats count."""
        now = trio.current_time()
        if self._busy_since is not None:  # heartbeats arrive on their own: they prove nothing then
            return now - self._busy_since <= within
        stream = self._stream
        if stream is not None and stream.statistics.heartbeats != self._heartbeats_seen:
            self._heartbeats_seen = stream.statistics.heartbeats
            self._progressed()
        return now - self.progress_at <= within

    def _progressed(self) -> None:
        self.progress_at = trio.current_time()

    async def _watch(self) -> NoReturn:
        while True:
            self._progressed()
            error: BaseException | None = None
            try:
                await self._follow()
            except* SupervisorError as group:
                error = group.exceptions[0]
            self.gate.report(StreamState.DOWN)
            if self._lost_at is None:
                self._lost_at = trio.current_time()
            self._stream, self._busy_since = None, None
            self._progressed()
            delay = self.backoff.failed(trio.current_time())
            if isinstance(error, NomadPermissionDenied):
                # Not a loss that a reconnect mends: told as a fault (once), retried all the same,
                # since the operator may mend the token's policy in Nomad.
                self._faults.report(
                    FaultKind.TOKEN_REFUSED, _STREAM, *token_refused(error.body, _STREAM_NEEDS)
                )
                logger.debug("event stream refused ({}); trying again in {:.3f}s", error, delay)
            else:
                cause = f"event stream lost: {type(error).__name__ if error else 'it ended'}"
                logger.bind(cause=cause).warning(
                    "event stream lost ({}); reconnecting in {:.3f}s", error, delay
                )
            self.client.rotate_address()
            await trio.sleep(delay)

    async def _follow(self) -> None:
        """List, then watch from the listing's index, relisting when asked; raises when the stream
        ends."""
        self.gate.report(StreamState.RECOVERING)
        self.relists.clear()  # the connect's own listing serves every request made so far
        index = await self._relist(["connect"])
        async with self.client.open_event_stream(
            _TOPICS, index=index + 1, heartbeat_timeout=self.heartbeat_timeout
        ) as stream:
            self._stream, self._heartbeats_seen = stream, 0
            self.gate.report(StreamState.UP)
            self._faults.clear(FaultKind.TOKEN_REFUSED, _STREAM)
            self.backoff.healthy(trio.current_time())
            if self._lost_at is None:
                logger.info("event stream up from index {}", index + 1)
            else:
                down = trio.current_time() - self._lost_at
                logger.info("event stream up from index {} after {:.1f}s without it", index + 1, down)
                self._lost_at = None
            # Whose turn it is, a batch's or a listing's, first come first served.
            turn = trio.Lock()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._relist_when_asked, turn)
                nursery.start_soon(self._request_periodically)
                while True:
                    batch = await stream.receive()
                    await _take(turn)
                    try:
                        self.apply_batch(batch)
                    finally:
                        turn.release()
                    self._progressed()

    async def _relist(self, reasons: list[str]) -> int:
        self._busy_since = trio.current_time()
        try:
            index = await self.relist()
        finally:
            self._busy_since = None
        self._progressed()
        release_free_memory()  # the listing's decoded objects are freed by now
        for reason in reasons:
            self.relisted[reason] = self.relisted.get(reason, 0) + 1
        logger.debug("relisted at index {} ({})", index, ", ".join(reasons))
        return index

    async def _relist_when_asked(self, turn: trio.Lock) -> None:
        """Carry out the relists asked for, in turn with the stream's batches, never beside one."""
        while True:
            reasons = await self.relists.wait()
            async with turn:
                await self._relist(reasons)

    async def _request_periodically(self) -> None:
        """Nomad can lose jobs without an event (all agents restarting): only a listing shows it."""
        while True:
            await trio.sleep(self.resync_interval)
            self.relists.request("periodic")

    # -- agents' silence ------------------------------------------------------------------------

    async def watch_silence(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Every second, ``avoid_silent_agents``."""
        task_status.started()
        while True:
            await trio.sleep(_SILENCE_CHECKS)
            self.avoid_silent_agents()

    def avoid_silent_agents(self) -> None:
        """While the event stream is up: new runners avoid the nodes whose agent has reported
        nothing for a few seconds of the stream's flow since a runner's allocation was placed there,
        while other agents reported (``NodeTracker.silent``). Nomad keeps placing runners
        there until the agent's heartbeats have been missed for their TTL and grace, 20 s or more."""
        if self.gate.state is StreamState.UP:
            at = self.moment()
            for node_id in self._pool.silent_nodes(at):
                self._apply(SilentAgent(node_id), at)

    # -- listing --------------------------------------------------------------------------------

    async def relist(self) -> int:
        """List what the pool needs and reconcile it at the listing's index; returns that index.

        Only ``run`` calls this, between the batches it applies. The listing reads
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
                self._effects.claims_adopted(self._pool.runners_in(RunnerState.USED))
                self._apply(JobsListed((await self.client.list_jobs(meta=True)).value))
        self._effects.deadlines_changed()  # adopted claims bring their inactivity deadlines
        self.last_index = max(self.last_index, index)
        self.synced.set()
        return self.last_index

    async def _registrations(self, nodes: list[NodeListStub]) -> dict[str, int]:
        """The last registration of the agent of each node changed since its events were last read
        (every node, at the start of a term), from its events: an agent that restarted before this
        process began, or while its stream was lost, left no event it saw, and the servers list a
        container its agent came back without as running until its client says."""
        registered: dict[str, int] = {}
        reads = trio.CapacityLimiter(_CLAIM_READS)

        async def read(node_id: str) -> None:
            async with reads:
                try:
                    node = (await self.client.get_node(node_id)).value
                except NomadNotFound:
                    return  # purged meanwhile: it holds no runner
                registered[node_id] = last_registration(node)

        async with trio.open_nursery() as nursery:
            for stub in nodes:
                if stub.status != "down" and self._nodes_read.get(stub.id) != stub.modify_index:
                    self._nodes_read[stub.id] = stub.modify_index
                    nursery.start_soon(read, stub.id)
        return registered

    async def _list_and_reconcile(self) -> int:
        """The listing and its reconcile; the listing (tens of MB at 10,000 runners) is freed on
        return, before anything else is listed."""
        seen = self.last_index
        nodes = await self.client.list_nodes()
        registered = await self._registrations(nodes.value)
        self._apply(NodesListed(nodes.value, nodes.index, registered))
        templates = await self.client.list_jobs(TEMPLATE_PREFIX, meta=True)
        await self.environments.adopt(templates.value, fill=False)  # the reconcile below refills
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
                for environment_id in self._pool.environment_ids():
                    nursery.start_soon(list_runners, environment_id)
        except BaseExceptionGroup as group:
            raise_alone(group)  # the first read that failed ended the others
        for environment_id in sorted(by_environment):
            jobs += by_environment[environment_id].value
            index = min(index, by_environment[environment_id].index)
        allocs = listed[0]
        index = max(seen, min(index, allocs.index))
        self._apply(RunnersListed(jobs, allocs.value, index))
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
            if self._pool.unknown(j.id) and (self.synced.is_set() or j.job_modify_index > j.create_index)
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
            self._apply(StreamResumed(self._flowed))
        self.last_batch_at = now
        at = Moment(now, self._flowed)  # one batch, one moment
        for event in batch.events:
            payload = event.payload
            if isinstance(payload, Allocation) and event.type == "AllocationUpdated":
                self._apply(AgentReport(payload), at)  # a listing does not say what agents reported
            if covered and not isinstance(payload, Node):
                continue
            if isinstance(payload, Allocation):
                self._apply(AllocationSeen(payload), at)
            elif isinstance(payload, Job):
                self._apply(JobSeen(payload.id, deleted=event.deleted, stopped=payload.stop), at)
            elif isinstance(payload, Node):
                self._apply(NodeSeen(event.type, payload, event.index), at)
        self.last_index = max(self.last_index, batch.index)


async def _take(turn: trio.Lock) -> None:
    """Take the turn: at once, without a turn of the scheduler, when nobody holds it or waits."""
    try:
        turn.acquire_nowait()
    except trio.WouldBlock:
        await turn.acquire()
        try:
            # A listing that failed hands the turn over as the stream's nursery is cancelled: its
            # batch must not be applied over a reconcile left halfway.
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            turn.release()
            raise
