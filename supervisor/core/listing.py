"""The pool's reconcile of listings: every runner job and live allocation Nomad lists, brought into
the pool in place (``RunnerPool`` mixes this in; the state and its other changes are the pool's).

A listing is taken at one Raft index. It may hold live allocations only, it never brings back a
runner the pool removed (a tombstone stands for it), and one older than a listing reconciled before
is ignored. A runner job of an environment that does not exist is an orphan, destroyed once at the
start.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..nomad import Allocation, AllocListStub, JobListStub
from .allocation_state import is_live, is_running, written_by_its_client
from .environments import MAX_AMOUNT, ExecutionEnvironment, decimal, runner_environment_id
from .evidence import Moment
from .job_template import FORCE_PULL_META
from .nodes import NodeTracker
from .runners import (
    FOUND_BY_EVENT,
    FOUND_BY_LISTING,
    FOUND_BY_NODE_RESTART,
    REASON_ALLOCATION_STOPPED,
    REASON_JOB_GONE,
    Action,
    DestroyRunner,
    ProbeRunner,
    Runner,
    RunnerState,
    Tombstone,
)

__all__ = ["ListingReconcile", "own"]


def own(text: str) -> str:
    """A copy of a string decoded from a listing, made now: kept for as long as its runner, it would
    otherwise hold the listing's freed memory (pages it shares with it) from going back."""
    return text.encode().decode()


def _found_by_listing(runner: Runner | None) -> str:
    return FOUND_BY_NODE_RESTART if runner is not None and runner.suspect_since else FOUND_BY_LISTING


class ListingReconcile:
    """Listings into the pool; the state it reads and the changes it makes are ``RunnerPool``'s."""

    environments: dict[int, ExecutionEnvironment]
    runners: dict[str, Runner]
    nodes: NodeTracker
    tombstones: dict[str, Tombstone]
    listed_index: int

    def orphans(self, jobs: Iterable[JobListStub]) -> list[Action]:
        """Runner jobs of environments that do not exist (their template job is gone): destroy
        them, since nothing will ever hand them out. A job of an environment the pool knows, or a
        job that is not ours (its ID and its meta both say whose runner it is), is left alone."""
        actions: list[Action] = []
        for job in jobs:
            environment_id = runner_environment_id(job.id)
            if environment_id is None or environment_id in self.environments or job.id in self.runners:
                continue
            if job.meta.get("environment") != str(environment_id):
                continue  # named like a runner, but another system's job
            if job.id not in self.tombstones:
                self.tombstones[job.id] = Tombstone(max(job.modify_index, self.listed_index), None)
                actions.append(DestroyRunner(job.id, f"its environment {environment_id} does not exist"))
        return actions

    def reconcile(
        self, jobs: Iterable[JobListStub], allocs: Iterable[AllocListStub], at: Moment, *, index: int
    ) -> list[Action]:
        """Bring local state to what Nomad lists at ``index``, in place, then refill the pools.

        ``allocs`` may hold the live allocations only: a runner whose known allocation was placed
        before ``index`` and is not listed as live has ended. A runner missing from the listing is
        gone only if its job was known to exist at or before ``index``: one registered after the
        listing was taken is simply not in it yet. A tombstoned runner never comes back, and a
        listing older than one reconciled before is ignored: the tombstones it could contradict may
        have been dropped by the newer one. A suspect runner whose node was ready again before the
        listing began is proven if listed running; one that is missing is removed.
        """
        if index < self.listed_index:
            return []
        self.listed_index = index
        latest: dict[str, AllocListStub] = {}
        for alloc in allocs:
            current = latest.get(alloc.job_id)
            if current is None or (is_live(alloc), alloc.create_index) > (
                is_live(current),
                current.create_index,
            ):
                latest[alloc.job_id] = alloc
        actions: list[Action] = []
        listed: set[str] = set()
        for job in jobs:
            environment_id = runner_environment_id(job.id)
            if environment_id is None or environment_id not in self.environments:
                continue
            listed.add(job.id)
            if job.id in self.tombstones:
                actions += self._listed_after_removal(job.id, index)
            else:
                actions += self._reconcile_job(job, environment_id, latest.get(job.id), at, index)
        for runner in list(self.runners.values()):
            if 0 < runner.registered_index <= index and runner.id not in listed:
                found = _found_by_listing(runner)
                actions += self._remove(runner, REASON_JOB_GONE, vanished_at=index, found=found)
        for runner_id, tombstone in list(self.tombstones.items()):
            gone_at = tombstone.gone_at
            if gone_at is not None and gone_at <= index and runner_id not in listed:
                del self.tombstones[runner_id]
        return actions + self.fill_all()

    def _reconcile_job(
        self, job: JobListStub, environment_id: int, job_alloc: AllocListStub | None, at: Moment, index: int
    ) -> list[Action]:
        """One listed runner job that is not tombstoned, with its latest listed allocation."""
        runner = self.runners.get(job.id)
        found = _found_by_listing(runner)
        if job.stop or (job.status == "dead" and (job_alloc is None or not is_live(job_alloc))):
            if runner is not None:
                return self._remove(runner, REASON_JOB_GONE, found=found)
            self.tombstones[job.id] = Tombstone(index)
            return [DestroyRunner(job.id, "its Nomad job is dead")]
        if runner is None:
            runner = self._adopt(job, environment_id, at.now)
            if job_alloc is not None:  # its agent may have restarted before this process began
                server_side = not written_by_its_client(job_alloc) and isinstance(job_alloc, Allocation)
                written = 0 if server_side else job_alloc.modify_index  # a listing's stub cannot tell
                runner.suspect_since = self.nodes.registered_since(job_alloc.node_id, written)
        if job_alloc is not None:
            back = runner.suspect_since and self.nodes.back(runner.node_id or job_alloc.node_id)
            probes: list[Action] = []
            if back and runner.alloc_id in ("", job_alloc.id) and is_running(job_alloc):
                # Listed running by a listing that began after its node was ready again (the
                # watcher applies events and listings in turn, never beside each other): what the
                # servers knew, which a command run in it must confirm.
                probes.append(ProbeRunner(runner.id, job_alloc.id))
            return probes + self.apply_allocation(job_alloc, at, found=found)
        if runner.alloc_id and runner.alloc_create_index <= index:
            return self._remove(runner, REASON_ALLOCATION_STOPPED, found=found)
        return []

    def _listed_after_removal(self, runner_id: str, index: int) -> list[Action]:
        """A removed runner's job in a listing: stale if taken before its purge; otherwise the job
        came back (a write that raced the purge) and is destroyed again. Never handed out."""
        tombstone = self.tombstones[runner_id]
        if tombstone.gone_at is None or index < tombstone.gone_at:
            return []
        self.tombstones[runner_id] = Tombstone(index)
        return [DestroyRunner(runner_id, "a removed runner's job outlived its purge")]

    def _adopt(self, job: JobListStub, environment_id: int, now: float) -> Runner:
        """A runner job this process did not know: its meta says whether a client holds it. One
        without our ``forcePull`` job meta is not of our shape (Poseidon's runner jobs have no job
        meta at all): rebuilt from our template, its claim would change its task (job meta,
        network, memory) and Nomad would replace its allocation, so its claims are written in place."""
        used = job.meta.get("used") == "true"
        state = RunnerState.USED if used else RunnerState.STARTING
        runner = Runner(own(job.id), environment_id, state, registered_index=max(job.create_index, 1))
        runner.force_pull = job.meta.get(FORCE_PULL_META) == "true"
        runner.foreign_shape = FORCE_PULL_META not in job.meta
        if used:
            timeout = job.meta.get("timeout", "0")
            seconds = decimal(timeout)
            runner.inactivity_timeout = float(min(seconds, MAX_AMOUNT)) if seconds is not None else 60.0
            runner.last_activity = now
        self._keep(runner)
        return runner

    # -- the pool's own changes, which a listing makes too ----------------------------------------

    def apply_allocation(
        self, alloc: Allocation | AllocListStub, at: Moment, *, found: str = FOUND_BY_EVENT
    ) -> list[Action]:
        """An allocation's state (``RunnerPool.apply_allocation``)."""
        raise NotImplementedError

    def fill_all(self) -> list[Action]:
        """Refill every environment's pool (``RunnerPool.fill_all``)."""
        raise NotImplementedError

    def _keep(self, runner: Runner) -> None:
        raise NotImplementedError

    def _remove(
        self, runner: Runner, reason: str, *, vanished_at: int | None = None, found: str | None = None
    ) -> list[Action]:
        raise NotImplementedError
