"""The runner factory: the only code that creates, updates and destroys runner jobs in Nomad.

It carries out the pool's actions with a few workers, spaces the registrations of new runner jobs
(each places an allocation, which an agent must start) to ``registrations_per_second``, places them
away from an agent that may be starting ``max_starting`` of its new jobs and holds them while every
agent may be (a pace alone would pile starts onto an agent that starts tasks slowly: the field's
reschedule storm; and an agent that is gone, not yet known so, starts nothing), and retries
transient failures with exponential backoff for as long as the action still matters (a runner
destroyed meanwhile is not created; a destroy is retried until Nomad confirms it, so no runner job
is leaked).
"""

from __future__ import annotations

import math
from typing import Any, Final

import trio
from loguru import logger

from ..base.backoff import Backoff, BackoffPolicy
from ..base.entropy import Entropy
from ..base.errors import NomadPermissionDenied, NomadRequestError, TerminalError, TransientError
from ..base.faults import FaultKind, Faults
from ..base.histogram import Histogram
from ..core.config import FactorySettings
from ..core.environments import CLAIM_GROUP, DEFAULT_SHAPE, runner_job
from ..core.evidence import JobPurged, JobRefused, JobRegistered, Moment, WriteAnswered
from ..core.job_template import JobShape
from ..core.orders import PoolDoor
from ..core.runners import CreateRunner, DestroyRunner, FactoryAction, MarkUsed, Runner, RunnerState
from ..nomad.api import JobWriter
from ..nomad.boundary import in_one_line, token_refused
from .environment_store import JOB_WRITES, JOB_WRITES_NEED

__all__ = ["RunnerFactory"]

# Workers per lane. New runner jobs wait for their turn at the pace; purges and claims' writes
# never queue behind them, nor behind a write that backs off while Nomad elects a leader.
_WORKERS: Final = 8
# A new runner holds back registrations this long at most: one still pending after it waits for an
# agent that is away (restarting, or down but not yet marked so), and starts nothing meanwhile.
# Without the limit a few such runners would hold back every refill; they still keep new runners
# from their node for as long as they wait, so an agent that is away holds max_starting at most.
START_PATIENCE: Final = 10.0
# Seconds from a registration to its allocation running: a task from a local image starts
# in about a second, one whose image is pulled first in minutes.
START_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class RunnerFactory:
    """The only writer of runner jobs in Nomad: carries out the pool's create, mark-used, destroy."""

    def __init__(
        self,
        client: JobWriter,
        pool: PoolDoor,
        settings: FactorySettings,
        *,
        entropy: Entropy | None = None,
        faults: Faults | None = None,
        shape: JobShape = DEFAULT_SHAPE,
    ) -> None:
        self._client = client
        # What every runner job is built from: the template, the network, force_pull's switch.
        self._shape = shape
        # What Nomad answered goes through the pool's entry; everything else is read from its view.
        self._door = pool
        self._pool = pool.view
        self._settings = settings
        self._faults = Faults() if faults is None else faults
        # The retries' jitter (the runners' IDs are the pool's to draw).
        self._entropy = Entropy() if entropy is None else entropy
        # Two lanes: new runner jobs, and purges and claims' writes.
        self._to_paced, self._paced = trio.open_memory_channel[FactoryAction](math.inf)
        self._to_unpaced, self._unpaced = trio.open_memory_channel[FactoryAction](math.inf)
        self._next_registration = 0.0
        # Runners whose registration is queued or under way: a purge may come before it lands.
        self._creating: set[str] = set()
        # Runners whose registration has its turn, until their allocation runs or they go, with
        # when they took it.
        self._starting: dict[str, float] = {}
        # Claims whose 'used' mark is queued or under way, by runner: set once it is done, and
        # whether it landed, until its claim asks.
        self._marks: dict[str, trio.Event] = {}
        self._landed: dict[str, bool] = {}
        # From a registration to its runner's allocation running, for those that got there.
        self.start_seconds = Histogram(START_BUCKETS)
        self.created = 0
        self.destroyed = 0
        self.failed = 0

    @property
    def backlog(self) -> int:
        """Actions waiting for a worker."""
        lanes = (self._paced, self._unpaced)
        return sum(lane.statistics().current_buffer_used for lane in lanes)

    @property
    def starting(self) -> int:
        """New runner jobs that hold back registrations (at most ``max_starting``): of those not
        running yet, the ones turned in the last ``START_PATIENCE`` seconds and not placed yet,
        which Nomad may place on any agent, and the ones placed on the agent that a new job may go
        to and starts the fewest (if the node tracker knows of no such agent, those of the last
        ``START_PATIENCE`` seconds on the agent that starts the most)."""
        unplaced, recent, placed = self._load()
        away = self._pool.avoided_nodes(trio.current_time())
        open_nodes = [placed.get(n, 0) for n in self._pool.placeable_nodes() if n not in away]
        if not open_nodes:
            return unplaced + max(recent.values(), default=0)
        return unplaced + min(open_nodes)

    def _load(self, *, excluding: str = "") -> tuple[int, dict[str, int], dict[str, int]]:
        """Of the runners this factory registered that are not running yet (but ``excluding``):
        how many of those turned in the last ``START_PATIENCE`` seconds are not placed yet, and how
        many are placed on each node, of those turned in that time and of all of them."""
        since = trio.current_time() - START_PATIENCE
        unplaced = 0
        recent: dict[str, int] = {}
        placed: dict[str, int] = {}
        for runner_id, at in self._starting.items():
            if runner_id == excluding or not self._is_starting(runner_id):
                continue
            node_id = self._runner(runner_id).node_id
            if node_id:
                placed[node_id] = placed.get(node_id, 0) + 1
                if at > since:
                    recent[node_id] = recent.get(node_id, 0) + 1
            elif at > since:
                unplaced += 1
        return unplaced, recent, placed

    def _avoided(self, runner_id: str) -> tuple[str, ...]:
        """The nodes the runner's new job avoids: those whose agent is away, and those where
        ``max_starting`` of this factory's new jobs may be waiting to start, however long they have
        waited (counting the ones not placed yet), unless that leaves no node Nomad could place it on."""
        away = self._pool.avoided_nodes(trio.current_time())
        unplaced, _, placed = self._load(excluding=runner_id)
        most = self._settings.max_starting
        full = tuple(n for n, count in placed.items() if count + unplaced >= most and n not in away)
        if full and any(n not in away and n not in full for n in self._pool.placeable_nodes()):
            return away + full
        return away

    def started(self, runner_id: str) -> None:
        """The runner's allocation runs: if this factory registered it, the time it took counts."""
        at = self._starting.pop(runner_id, None)
        if at is not None:
            self.start_seconds.observe(trio.current_time() - at)

    def submit(self, action: FactoryAction) -> None:
        """Queue one of the pool's actions; a worker carries it out."""
        if isinstance(action, CreateRunner):
            self._creating.add(action.runner_id)
            self._to_paced.send_nowait(action)
        else:
            if isinstance(action, MarkUsed):
                self._marks[action.runner_id] = trio.Event()
            self._to_unpaced.send_nowait(action)

    async def marked(self, runner_id: str) -> bool:
        """Wait until the claim's 'used' mark is in Nomad (True) or given up (False): until it is,
        a daemon that takes over (a restart, an HA standby) would take the runner for an idle one."""
        done = self._marks.get(runner_id)
        try:
            if done is not None:
                await done.wait()
            else:
                await trio.lowlevel.checkpoint()
        finally:
            landed = self._landed.pop(runner_id, False)
        return landed

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Carry out the pool's actions until cancelled (it never returns otherwise)."""
        async with trio.open_nursery() as nursery:
            for lane in (self._paced, self._unpaced):
                for _ in range(_WORKERS):
                    nursery.start_soon(self._work, lane)
            task_status.started()

    async def _work(self, lane: trio.MemoryReceiveChannel[FactoryAction]) -> None:
        async for action in lane:
            await self._perform(action)

    async def _perform(self, action: FactoryAction) -> None:
        performed = False
        try:
            await self._retrying(action)
            performed = True
        finally:
            if isinstance(action, DestroyRunner) and not performed:
                # Cut short (this factory restarted): the job may still be there, and only a
                # listing that shows it can have it destroyed again.
                self._answered(JobPurged(action.runner_id))
            if isinstance(action, CreateRunner):
                self._creating.discard(action.runner_id)
            elif (
                isinstance(action, MarkUsed) and (done := self._marks.pop(action.runner_id, None)) is not None
            ):
                done.set()

    async def _retrying(self, action: FactoryAction) -> None:
        backoff = Backoff(
            BackoffPolicy(0.5, self._settings.max_backoff), random_fraction=self._entropy.fraction
        )
        attempted = False
        while self._still_wanted(action):
            try:
                attempted = True
                await self._once(action)
                return
            except TransientError as exc:
                delay = backoff.failed(trio.current_time())
                cause = f"factory: {type(action).__name__} failed: {type(exc).__name__}"
                logger.bind(cause=cause).warning(
                    "{} failed ({}); retry {} in {:.1f}s", _describe(action), exc, backoff.failures, delay
                )
                await trio.sleep(delay)
            except TerminalError as exc:
                if not self._fault(action, exc):
                    cause = f"factory: {type(action).__name__} refused by Nomad"
                    logger.bind(cause=cause).error("{} refused by Nomad: {}", _describe(action), exc)
                self._failed(action)
                return
            except Exception:
                # A bug in one action must not end the daemon and the executions running in it.
                logger.exception("{} failed unexpectedly", _describe(action))
                self._failed(action)
                return
        if attempted and isinstance(action, CreateRunner | MarkUsed):
            # The runner went after a write whose answer was lost: that write may have landed after
            # the runner's purge (and brought its job back). Purge it again, retried as any purge.
            await self._retrying(DestroyRunner(action.runner_id, "a late write may have brought it back"))
        elif isinstance(action, CreateRunner):
            self._answered(JobPurged(action.runner_id))  # destroyed before its turn: never registered

    def _fault(self, action: FactoryAction, exc: TerminalError) -> bool:
        """Whether the refusal is a fault (told once, by the faults): a refused token, or the
        runner job of an environment, which every runner of it would meet again."""
        if isinstance(exc, NomadPermissionDenied):
            self._faults.report(
                FaultKind.TOKEN_REFUSED, JOB_WRITES, *token_refused(exc.body, JOB_WRITES_NEED)
            )
        elif isinstance(action, CreateRunner) and isinstance(exc, NomadRequestError):
            text = in_one_line(exc.body) or str(exc)
            self._faults.report(
                FaultKind.ENVIRONMENT_REFUSED,
                str(action.environment_id),
                f"Nomad refuses the runner jobs of execution environment {action.environment_id}: {text}",
                f"change the environment (PUT execution-environments/{action.environment_id}) so that "
                "Nomad takes its job",
            )
        else:
            return False
        return True

    def _failed(self, action: FactoryAction) -> None:
        self.failed += 1
        if isinstance(action, CreateRunner):
            self._answered(JobRefused(action.runner_id))
        elif isinstance(action, DestroyRunner):
            # Its job may still be there: a listing that shows it has it destroyed again.
            self._answered(JobPurged(action.runner_id))

    def _still_wanted(self, action: FactoryAction) -> bool:
        if isinstance(action, CreateRunner):
            runner_there = self._pool.runner(action.runner_id) is not None
            return runner_there and self._pool.environment(action.environment_id) is not None
        if isinstance(action, MarkUsed):
            return self._pool.used_runner(action.runner_id) is not None
        return True

    async def _rate_limit(self) -> None:
        """Take the next turn, one interval after the last. A turn the event loop woke late for
        (a stall) is taken again at the back of the line, so that the turns that came due during a
        stall go one interval apart, never at once: a burst of placements is what the pace prevents."""
        interval = 1.0 / self._settings.registrations_per_second
        while True:
            now = trio.current_time()
            slot = max(now, self._next_registration)
            self._next_registration = slot + interval
            if slot <= now:
                return
            await trio.sleep_until(slot)
            if trio.current_time() - slot < interval:
                return

    async def _room_to_start(self) -> None:
        """Wait until an agent that a new job may go to cannot be starting ``max_starting`` of the
        runners this factory registered (see ``starting``)."""
        while True:
            self._forget_started()
            if self.starting < self._settings.max_starting:
                return
            await trio.sleep(max(1.0 / self._settings.registrations_per_second, 0.01))

    def _forget_started(self) -> None:
        """Drop from ``_starting`` the runners that went, or run (and were not told as started)."""
        self._starting = {runner: at for runner, at in self._starting.items() if self._is_starting(runner)}

    def _is_starting(self, runner_id: str) -> bool:
        runner = self._pool.runner(runner_id)
        return runner is not None and runner.state is RunnerState.STARTING

    async def _once(self, action: FactoryAction) -> None:
        if isinstance(action, DestroyRunner):
            await self._purge(action.runner_id, registration_may_follow=action.runner_id in self._creating)
            self.destroyed += 1
            logger.debug("destroyed runner {}: {}", action.runner_id, action.reason)
            return
        if isinstance(action, MarkUsed):
            # A claim's meta update is an in-place update: no placement, so not paced.
            if action.in_place:
                job = await self._claimed_in_place(action)
            else:
                job = runner_job(
                    action.environment,
                    action.runner_id,
                    used=True,
                    timeout=action.timeout,
                    force_pull=action.force_pull,
                    shape=self._shape,
                )
            await self._client.register_job(job)
            if self._pool.used_runner(action.runner_id) is None:
                # Released while the write was under way: its purge may have come first and this
                # registration brought the job back.
                await self._purge(action.runner_id)
            else:
                self._landed[action.runner_id] = True
            return
        await self._room_to_start()
        self._starting[action.runner_id] = trio.current_time()
        await self._rate_limit()
        self._starting[action.runner_id] = trio.current_time()  # its start is timed from here
        if not self._still_wanted(action):
            # The runner (or its environment) went while the creation waited for its turn.
            self._answered(JobPurged(action.runner_id))
            return
        environment = self._runner(action.runner_id).environment or self._pool.environment(
            action.environment_id
        )
        assert environment is not None, "a runner wanted has its environment (_still_wanted)"
        avoid = self._avoided(action.runner_id)
        job = runner_job(
            environment, action.runner_id, avoid=avoid, force_pull=action.force_pull, shape=self._shape
        )
        registered = await self._client.register_job(job)
        self.created += 1
        self._faults.clear(FaultKind.ENVIRONMENT_REFUSED, str(action.environment_id))
        self._faults.clear(FaultKind.TOKEN_REFUSED, JOB_WRITES)
        if self._pool.runner(action.runner_id) is None:
            # Destroyed while its registration was under way: the destroy may have come first.
            await self._purge(action.runner_id)
            return
        self._answered(JobRegistered(action.runner_id, registered.index))

    async def _claimed_in_place(self, action: MarkUsed) -> dict[str, Any]:
        """The runner job as Nomad holds it, with the claim in its claim group's meta and nothing
        else changed, as Poseidon writes a claim (``SetRunnerMetaUsed``): Nomad replaces an
        allocation whose task's meta (its job's, group's or own) or config changes, and a job
        Poseidon wrote is not of our shape. A job purged meanwhile is NomadNotFound: the claim
        fails, and its runner goes, rather than writing the job anew."""
        job = (await self._client.read_job(action.runner_id)).value
        groups = job.get("TaskGroups") or []
        group = next((g for g in groups if isinstance(g, dict) and g.get("Name") == CLAIM_GROUP), None)
        if group is None:
            # As Poseidon's FindAndValidateConfigTaskGroup adds it; a new group replaces no other's
            # allocation.
            task = {"Name": CLAIM_GROUP, "Driver": "exec", "Config": {"command": "true"}}
            group = {"Name": CLAIM_GROUP, "Count": 0, "Tasks": [task]}
            job["TaskGroups"] = [*groups, group]
        group["Meta"] = {**(group.get("Meta") or {}), "used": "true", "timeout": str(action.timeout)}
        return job

    async def _purge(self, runner_id: str, *, registration_may_follow: bool = False) -> None:
        response = await self._client.deregister_job(runner_id, purge=True)
        if response.index == 0 and registration_may_follow:
            # Nomad did not know the job, but its registration may still land: that path purges it
            # again and settles the tombstone, so no listing meanwhile may drop it.
            return
        self._answered(JobPurged(runner_id, response.index))

    def _runner(self, runner_id: str) -> Runner:
        runner = self._pool.runner(runner_id)
        assert runner is not None, f"runner {runner_id} is not the pool's"
        return runner

    def _answered(self, fact: WriteAnswered) -> None:
        """What Nomad answered a write, for the pool (which calls for nothing more on such news)."""
        self._door.handle(fact, Moment(trio.current_time()))


def _describe(action: FactoryAction) -> str:
    kind = type(action).__name__
    return f"{kind} {getattr(action, 'runner_id', '')}"
