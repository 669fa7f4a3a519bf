"""Properties of the runner pool, checked by hypothesis against a small model of Nomad.

Whatever the interleaving of claims, releases, Nomad carrying out the pool's actions in any order,
jobs vanishing without an event, events delivered late or replayed, and listings applied long after
they were taken: a runner given back is never handed out again, and no runner ID is handed out
twice. And once everything has settled, the pool after all that history and a fresh listing
equals a pool built from that listing alone. The examples are kept small so that the test command
stays fast; raise ``HYPOTHESIS_MAX_EXAMPLES`` to run them longer.
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import Action, CreateRunner, DestroyRunner, MarkUsed, RunnerState
from supervisor.nomad import Allocation, AllocListStub, JobListStub

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 3, 100.0, 256, False, ())
Listing = tuple[list[JobListStub], list[AllocListStub], int]
Event = tuple[int, Allocation | str]  # (index, an allocation update or the ID of a purged job)

# The moment facts are applied at, where time does not matter.
AT = Moment(0.0)


class PoolAgainstNomad(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pool = RunnerPool()
        self.index = 1
        self.jobs: dict[str, int] = {}  # live runner jobs: ID -> registration index
        self.meta: dict[str, dict[str, str]] = {}  # their meta, once a claim is recorded in it
        self.allocs: dict[str, Allocation] = {}  # the live allocation of each job
        self.pending: list[CreateRunner | DestroyRunner | MarkUsed] = []
        self.registering: list[str] = []
        self.events: list[Event] = []
        self.delivered: list[Event] = []
        self.listings: list[Listing] = []
        self.handed_out: set[str] = set()
        self.released: set[str] = set()
        self.now = 0.0
        self._carry_out(self.pool.set_environment(ENVIRONMENT)[1])

    def _carry_out(self, actions: list[Action]) -> None:
        self.pending += [a for a in actions if isinstance(a, CreateRunner | DestroyRunner | MarkUsed)]

    def _next_index(self) -> int:
        self.index += 1
        return self.index

    # -- Nomad ----------------------------------------------------------------------------------

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def nomad_carries_out_an_action(self, data: st.DataObject) -> None:
        """The factory takes an action: a registration goes on the wire (and lands later), a purge
        is answered at once, as RunnerFactory does them."""
        action = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        runner_id = action.runner_id
        if isinstance(action, MarkUsed):  # an in-place update of a job that may be gone by now
            if runner_id in self.jobs:
                self.meta[runner_id] = {"used": "true", "timeout": str(action.timeout)}
                self._next_index()
            return
        if isinstance(action, CreateRunner):
            if runner_id in self.pool.runners:
                self.registering.append(runner_id)
            else:
                self.pool.purged(runner_id, 0)  # destroyed before its turn: never registered
            return
        index = self._purge(runner_id)
        if index or runner_id not in self.registering:  # a registration may still land
            self.pool.purged(runner_id, index)

    @precondition(lambda self: self.registering)
    @rule(data=st.data())
    def a_registration_lands(self, data: st.DataObject) -> None:
        runner_id = self.registering.pop(data.draw(st.integers(0, len(self.registering) - 1)))
        self.jobs[runner_id] = self._next_index()
        index = self._next_index()
        alloc = Allocation(
            id=f"alloc-{runner_id}",
            job_id=runner_id,
            client_status="running",
            create_index=index,
            modify_index=index,
            node_id="node-1",
        )
        self.allocs[runner_id] = alloc
        self.events.append((index, alloc))
        if runner_id in self.pool.runners:
            self.pool.registered(runner_id, self.jobs[runner_id])
        else:  # destroyed while its registration was on the wire: the factory purges it again
            self.pool.purged(runner_id, self._purge(runner_id))

    def _purge(self, runner_id: str) -> int:
        """Nomad's purge: the index of the write, or 0 for a job it does not know."""
        self.meta.pop(runner_id, None)
        if self.jobs.pop(runner_id, None) is None:
            return 0
        self.allocs.pop(runner_id, None)
        purged_at = self._next_index()
        self.events.append((purged_at, runner_id))
        return purged_at

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def a_job_vanishes_without_an_event(self, data: st.DataObject) -> None:
        runner_id = data.draw(st.sampled_from(list(self.jobs)))
        del self.jobs[runner_id]
        self.meta.pop(runner_id, None)
        self.allocs.pop(runner_id, None)
        self._next_index()

    @precondition(lambda self: self.events)
    @rule()
    def an_event_arrives(self) -> None:
        event = self.events.pop(0)
        self.delivered.append(event)
        self._apply_event(event)

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def an_old_event_is_replayed(self, data: st.DataObject) -> None:
        self._apply_event(data.draw(st.sampled_from(self.delivered)))

    def _apply_event(self, event: Event) -> None:
        _, payload = event
        if isinstance(payload, Allocation):
            self._carry_out(self.pool.apply_allocation(payload, AT))
        else:
            self._carry_out(self.pool.apply_job(payload, deleted=True, stopped=True))

    @rule()
    def a_listing_is_taken(self) -> None:
        jobs = [
            JobListStub(id=i, status="running", create_index=at, meta=self.meta.get(i, {}))
            for i, at in self.jobs.items()
        ]
        allocs = [
            AllocListStub(
                id=a.id,
                job_id=a.job_id,
                client_status=a.client_status,
                create_index=a.create_index,
                modify_index=a.modify_index,
                node_id=a.node_id,
            )
            for a in self.allocs.values()
        ]
        self.listings.append((jobs, allocs, self.index))

    @precondition(lambda self: self.listings)
    @rule(data=st.data())
    def a_listing_is_applied_late(self, data: st.DataObject) -> None:
        jobs, allocs, index = data.draw(st.sampled_from(self.listings))
        self._carry_out(self.pool.reconcile(jobs, allocs, Moment(self.now), index=index))

    # -- clients --------------------------------------------------------------------------------

    @precondition(lambda self: self.pool.stats()[10].idle > 0)
    @rule()
    def a_client_claims(self) -> None:
        runner, actions = self.pool.claim(10, 0, self.now)
        assert runner.id not in self.released, f"{runner.id} was given back and handed out again"
        assert runner.id not in self.handed_out, f"{runner.id} handed out twice"
        self.handed_out.add(runner.id)
        self._carry_out(actions)

    @precondition(lambda self: any(r.state is RunnerState.USED for r in self.pool.runners.values()))
    @rule(data=st.data())
    def a_client_gives_its_runner_back(self, data: st.DataObject) -> None:
        used = [r.id for r in self.pool.runners.values() if r.state is RunnerState.USED]
        runner_id = data.draw(st.sampled_from(used))
        self.released.add(runner_id)
        self._carry_out(self.pool.release(runner_id))

    # -- what must always hold ------------------------------------------------------------------

    @invariant()
    def a_released_runner_is_gone_for_good(self) -> None:
        assert not self.released & set(self.pool.runners), "a released runner is back in the pool"

    @invariant()
    def each_pool_counts_exactly_its_environments_runners(self) -> None:
        for environment_id in self.pool.environments:
            expected = {r.id for r in self.pool.runners.values() if r.environment_id == environment_id}
            assert {r.id for r in self.pool._runners_of(environment_id)} == expected
            warm = [r for r in self.pool._runners_of(environment_id) if r.state is not RunnerState.USED]
            assert self.pool._warm.get(environment_id, 0) == len(warm), "the refill's count drifted"
            assert not any(r.retired for r in warm), "only a used runner is ever retired"
        used = {r.id for r in self.pool.runners.values() if r.state is RunnerState.USED}
        assert set(self.pool._used) == used, "the expiry's index of used runners drifted"

    @rule()
    def everything_settles_and_a_fresh_listing_is_applied(self) -> None:
        """Nomad carries out every action and delivers every event; then a listing taken now agrees
        with Nomad, and the tombstones are down to the purges it has just ordered."""
        while self.pending or self.registering or self.events:
            while self.pending:
                self.nomad_carries_out_an_action(_First())
            while self.registering:
                self.a_registration_lands(_First())
            while self.events:
                self.an_event_arrives()
        self.a_listing_is_taken()
        jobs, allocs, index = self.listings[-1]
        self._carry_out(self.pool.reconcile(jobs, allocs, Moment(self.now), index=index))
        destroying = {a.runner_id for a in self.pending if isinstance(a, DestroyRunner)}
        assert set(self.pool.tombstones) <= destroying, "tombstones are dropped once a listing shows"
        for runner in self.pool.runners.values():
            if runner.state is RunnerState.IDLE:
                assert runner.id in self.jobs, f"idle runner {runner.id} has no job in Nomad"
        self._agrees_with_a_pool_built_from_the_listing_alone(jobs, allocs, index)

    def _agrees_with_a_pool_built_from_the_listing_alone(
        self, jobs: list[JobListStub], allocs: list[AllocListStub], index: int
    ) -> None:
        """The history before a listing changes nothing the listing shows: every runner whose job
        it lists has the same state, allocation and node as in a pool that saw only the listing, and
        no runner it does not list is handed out by either."""
        alone = RunnerPool()
        alone.set_environment(ENVIRONMENT)
        alone.reconcile(jobs, allocs, Moment(self.now), index=index)
        listed = {job.id for job in jobs}

        def view(pool: RunnerPool) -> dict[str, tuple[RunnerState, str, str]]:
            return {r.id: (r.state, r.alloc_id, r.node_id) for r in pool.runners.values() if r.id in listed}

        assert view(self.pool) == view(alone)
        for pool in (self.pool, alone):
            serving = {r.id for r in pool.runners.values() if r.state in (RunnerState.IDLE, RunnerState.USED)}
            assert serving <= listed


class _First:
    """A stand-in for hypothesis' data that always draws the first choice."""

    def draw(self, strategy: object) -> int:
        return 0


PoolAgainstNomad.TestCase.settings = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
)
test_pool_against_nomad = PoolAgainstNomad.TestCase
