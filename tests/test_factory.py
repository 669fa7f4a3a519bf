"""The runner factory against a fake Nomad client: what it does when a runner changes under it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio
import trio.testing

from supervisor.base.errors import NomadRequestError, NomadUnavailableError
from supervisor.core.config import FactorySettings
from supervisor.core.environments import ExecutionEnvironment, claim_meta, runner_job
from supervisor.core.evidence import AllocationSeen, Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import CreateRunner, DestroyRunner, MarkUsed, NodeAvoided, RunnerStarted
from supervisor.effects.factory import START_PATIENCE, RunnerFactory
from supervisor.nomad.models import (
    Allocation,
    JobDeregisterResponse,
    JobListStub,
    JobRegisterResponse,
    NodeListStub,
)

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 1, 100.0, 256, False, ())


class _SlowNomad:
    """Registrations wait until released; every call is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.release = trio.Event()
        self.registering = trio.Event()

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.calls.append(("register", job["ID"]))
        self.registering.set()
        await self.release.wait()
        self.calls.append(("registered", job["ID"]))
        return JobRegisterResponse(index=42)

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        self.calls.append(("deregister", job_id))
        return JobDeregisterResponse()


def one_runner_and_a_slow_factory() -> tuple[RunnerPool, str, _SlowNomad, RunnerFactory]:
    """A pool with one runner to create, and a factory whose registrations wait to be released."""
    pool = RunnerPool()
    _, actions = pool.set_environment(ENVIRONMENT)
    runner_id = actions[0].runner_id  # type: ignore[union-attr]
    nomad = _SlowNomad()
    factory = RunnerFactory(nomad, pool, FactorySettings(registrations_per_second=1000))
    return pool, runner_id, nomad, factory


async def test_a_runner_released_while_marked_used_does_not_come_back() -> None:
    pool, runner_id, nomad, factory = one_runner_and_a_slow_factory()
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(CreateRunner(runner_id, 10))
        await trio.testing.wait_all_tasks_blocked()
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert pool.runners[runner_id].registered_index == 42
        pool.apply_allocation(
            Allocation(id="a1", job_id=runner_id, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        nomad.release, nomad.registering = trio.Event(), trio.Event()
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        with trio.fail_after(5):
            await nomad.registering.wait()  # the write is under way (past the rate limiter's pause)
        for action in pool.release(runner.id):  # the client gives it back while the write is under way
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.testing.wait_all_tasks_blocked()
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel("test over")
    assert nomad.calls[2:] == [
        ("register", runner_id),  # the claim's meta write starts
        ("deregister", runner_id),  # the release purges the job meanwhile
        ("registered", runner_id),  # the write lands late and brings the job back...
        ("deregister", runner_id),  # ...so it is undone
    ]


class _QuickNomad(_SlowNomad):
    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.calls.append(("register", job["ID"]))
        return JobRegisterResponse(index=42)


async def _two_creations(
    nursery: trio.Nursery,
    nomad: _SlowNomad,
    *,
    registrations_per_second: float,
    pool_size: int = 2,
    max_starting: int = FactorySettings().max_starting,
    pool: RunnerPool | None = None,
) -> tuple[RunnerPool, RunnerFactory]:
    """A factory running in ``nursery`` with the creations of a new environment (two, unless
    ``pool_size`` says otherwise) submitted, in ``pool`` or a new one."""
    pool = pool or RunnerPool()
    _, actions = pool.set_environment(attrs.evolve(ENVIRONMENT, prewarming_pool_size=pool_size))
    settings = FactorySettings(registrations_per_second=registrations_per_second, max_starting=max_starting)
    factory = RunnerFactory(nomad, pool, settings)
    await nursery.start(factory.run)
    for action in actions:
        if isinstance(action, CreateRunner | DestroyRunner | MarkUsed):
            factory.submit(action)
    return pool, factory


async def test_an_environment_removed_while_a_creation_waits_for_its_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    nomad = _QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await _two_creations(nursery, nomad, registrations_per_second=1)
        await trio.testing.wait_all_tasks_blocked()  # the first is registered, the second waits
        assert len(nomad.calls) == 1
        for action in pool.remove_environment(10):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.sleep(5)
        nursery.cancel_scope.cancel("test over")
    created = nomad.calls[0][1]
    assert [call for call in nomad.calls if call[0] == "register"] == [("register", created)], (
        "nothing is registered after the removal"
    )
    assert ("deregister", created) in nomad.calls


async def test_a_claims_meta_write_does_not_wait_for_the_registration_pace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The pace is for new runner jobs, each of which places an allocation; marking a runner used
    updates its job in place, so a claim's write never queues behind a refill."""
    nomad = _QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await _two_creations(nursery, nomad, registrations_per_second=0.1)
        await trio.testing.wait_all_tasks_blocked()  # the first is registered, the second waits 10 s
        first = nomad.calls[0][1]
        pool.apply_allocation(
            Allocation(id="a1", job_id=first, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        started = trio.current_time()
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        await trio.testing.wait_all_tasks_blocked()
        assert nomad.calls[1:] == [("register", first)], "written at once"
        assert trio.current_time() == started
        await trio.sleep(11)
        assert len(nomad.calls) == 3, "the second creation still came at its pace"
        nursery.cancel_scope.cancel("test over")


class _BrokenOnceNomad(_QuickNomad):
    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        if not self.calls:
            self.calls.append(("broken", job["ID"]))
            raise ValueError("a bug in one action")
        return await super().register_job(job)


async def test_an_unexpected_error_fails_one_action_and_the_factory_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    nomad = _BrokenOnceNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await _two_creations(nursery, nomad, registrations_per_second=10)
        await trio.sleep(1)
        nursery.cancel_scope.cancel("test over")
    broken, created = nomad.calls[0][1], nomad.calls[1][1]
    assert nomad.calls == [("broken", broken), ("register", created)]
    assert factory.failed == 1
    assert broken not in pool.runners, "the failed runner is forgotten, so the pool refills"
    assert pool.runners[created].registered_index == 42


async def test_a_tombstone_waits_for_a_registration_still_under_way() -> None:
    """A runner removed while its job's registration is on the wire: Nomad answers the purge with
    index 0 (no such job yet), and no listing may drop the tombstone before that registration lands
    and is purged in turn, or the job would be adopted as a fresh idle runner."""
    pool, runner_id, nomad, factory = one_runner_and_a_slow_factory()
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(CreateRunner(runner_id, 10))
        with trio.fail_after(5):
            await nomad.registering.wait()
        for action in pool.destroy(runner_id, "the execution environment changed"):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.testing.wait_all_tasks_blocked()
        assert ("deregister", runner_id) in nomad.calls
        assert pool.tombstones[runner_id].gone_at is None, "the registration may still land"
        pool.reconcile([], [], Moment(1.0), index=100)
        assert runner_id in pool.tombstones
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert nomad.calls[-1] == ("deregister", runner_id), "purged once its registration landed"
        assert pool.tombstones[runner_id].gone_at is not None
        nursery.cancel_scope.cancel("test over")


class _LostAnswerNomad(_QuickNomad):
    """The first claim write lands in Nomad, but its answer is lost (a server restarted)."""

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        if claim_meta(job).get("used") == "true" and not any(c[0] == "lost" for c in self.calls):
            self.calls.append(("lost", job["ID"]))
            raise NomadUnavailableError("the server restarted before it answered")
        return await super().register_job(job)


async def _claim_whose_write_is_lost_then_release(nomad: _LostAnswerNomad) -> str:
    """A runner is claimed; its claim's write is lost; its client gives it back while the write
    waits for its retry. Two minutes pass; returns the runner's ID."""
    async with trio.open_nursery() as nursery:
        pool, factory = await _two_creations(nursery, nomad, registrations_per_second=1000)
        await trio.testing.wait_all_tasks_blocked()
        first = nomad.calls[0][1]
        pool.apply_allocation(
            Allocation(id="a1", job_id=first, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        await trio.testing.wait_all_tasks_blocked()  # the write failed; its retry waits
        assert ("lost", runner.id) in nomad.calls
        for action in pool.release(runner.id):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.sleep(120)
        nursery.cancel_scope.cancel("test over")
    return runner.id


async def test_a_claim_write_whose_answer_was_lost_is_undone_once_the_runner_is_released(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its write may have landed after the release's purge and brought the job back, marked used:
    nobody would ever give that runner back."""
    nomad = _LostAnswerNomad()
    runner_id = await _claim_whose_write_is_lost_then_release(nomad)
    after_loss = nomad.calls[nomad.calls.index(("lost", runner_id)) + 1 :]
    assert after_loss.count(("deregister", runner_id)) == 2, "the release's purge, then the write undone"
    assert ("register", runner_id) not in after_loss, "the write is not retried for a released runner"


async def test_a_purge_does_not_wait_behind_creations_waiting_for_their_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    nomad = _QuickNomad()
    pool = RunnerPool()
    _, actions = pool.set_environment(attrs.evolve(ENVIRONMENT, prewarming_pool_size=40))
    factory = RunnerFactory(nomad, pool, FactorySettings(registrations_per_second=1))
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        for action in actions:
            if isinstance(action, CreateRunner):
                factory.submit(action)
        await trio.sleep(0.5)
        factory.submit(DestroyRunner("10-elsewhere", "a released runner"))
        await trio.testing.wait_all_tasks_blocked()
        assert ("deregister", "10-elsewhere") in nomad.calls, "purged at once"
        assert trio.current_time() < 1.0
        assert factory.backlog > 20, "the creations still wait for their turn"
        nursery.cancel_scope.cancel("test over")


class _TimedNomad(_QuickNomad):
    """Records when each registration reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.registered_at: list[float] = []
        self.twenty = trio.Event()

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.registered_at.append(trio.current_time())
        if len(self.registered_at) == 20:
            self.twenty.set()
        return await super().register_job(job)


async def test_after_a_stall_the_overdue_creations_still_go_one_interval_apart(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The event loop stalls (the clock jumps while every creation waits for its turn): the turns
    that came due meanwhile go one by one, never together, so a stall never becomes a burst of
    placements."""
    nomad = _TimedNomad()
    pool = RunnerPool()
    _, actions = pool.set_environment(attrs.evolve(ENVIRONMENT, prewarming_pool_size=20))
    # No allocation runs here: the cap on starting ones must not be what spaces the twenty.
    settings = FactorySettings(registrations_per_second=10, max_starting=20)
    factory = RunnerFactory(nomad, pool, settings)
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        for action in actions:
            if isinstance(action, CreateRunner):
                factory.submit(action)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(1.0)  # a stall of 1 s: ten turns' worth
        mock_clock.autojump_threshold = 0
        await nomad.twenty.wait()
        nursery.cancel_scope.cancel("test over")
    gaps = [b - a for a, b in zip(nomad.registered_at, nomad.registered_at[1:], strict=False)]
    assert min(gaps) >= 0.1 - 1e-9, gaps


class _LeaderlessNomad(_LostAnswerNomad):
    """After the lost answer, the cluster has no leader for a while: every purge fails at first."""

    def __init__(self) -> None:
        super().__init__()
        self.failing_purges = 3

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        if any(c[0] == "lost" for c in self.calls) and self.failing_purges:
            self.failing_purges -= 1
            self.calls.append(("no leader", job_id))
            raise NomadUnavailableError("HTTP 500: No cluster leader")
        return await super().deregister_job(job_id, purge=purge)


async def test_undoing_a_late_write_is_retried_while_nomad_elects_a_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The purge that undoes a lost claim write fails too: it is retried like any purge, and the
    factory goes on (the job would leak otherwise)."""
    nomad = _LeaderlessNomad()
    runner_id = await _claim_whose_write_is_lost_then_release(nomad)
    assert nomad.failing_purges == 0, "the leader election was seen"
    after_loss = nomad.calls[nomad.calls.index(("lost", runner_id)) + 1 :]
    assert after_loss.count(("deregister", runner_id)) == 2, "the release's purge, then the write undone"


async def test_registrations_wait_while_max_starting_allocations_have_not_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The pace alone would pile starts onto an agent that starts tasks slowly (the field's storm):
    new jobs wait until an earlier one's allocation runs."""
    nomad = _QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, _ = await _two_creations(
            nursery, nomad, registrations_per_second=100, pool_size=5, max_starting=2
        )
        await trio.sleep(5)
        registered = [job_id for kind, job_id in nomad.calls if kind == "register"]
        assert len(registered) == 2, "two allocations are starting: the rest wait"
        pool.apply_allocation(
            Allocation(
                id="a1", job_id=registered[0], client_status="running", create_index=43, modify_index=43
            ),
            Moment(trio.current_time()),
        )
        await trio.sleep(1)
        registered = [job_id for kind, job_id in nomad.calls if kind == "register"]
        assert len(registered) == 3, "one started, so one more is registered"
        pool.apply_allocation(
            Allocation(
                id="a2", job_id=registered[1], client_status="failed", create_index=44, modify_index=44
            ),
            Moment(trio.current_time()),
        )
        await trio.sleep(1)
        assert sum(1 for kind, _ in nomad.calls if kind == "register") == 4, "a failed one frees its place"
        nursery.cancel_scope.cancel("test over")


async def test_max_starting_counts_per_agent_the_placed_and_on_each_the_not_yet_placed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The storm is one agent starting too many tasks at once: runners starting on different agents
    do not hold each other back, but one not placed yet may still land on the busiest agent."""
    nomad = _QuickNomad()

    def registered() -> list[str]:
        return [job_id for kind, job_id in nomad.calls if kind == "register"]

    def placed(index: int, node: str, status: str = "pending") -> None:
        job_id = registered()[index]
        pool.apply_allocation(
            Allocation(
                id=f"a{index}",
                job_id=job_id,
                client_status=status,
                node_id=node,
                create_index=43 + index,
                modify_index=50 + len(nomad.calls),
            ),
            Moment(trio.current_time()),
        )

    async with trio.open_nursery() as nursery:
        pool, factory = await _two_creations(
            nursery, nomad, registrations_per_second=100, pool_size=5, max_starting=2
        )
        await trio.sleep(1)
        assert len(registered()) == 2, "neither is placed yet: both may land on one agent"
        placed(0, "node-1")
        placed(1, "node-2")
        await trio.sleep(1)
        assert len(registered()) == 3, "each agent starts one: room for one more"
        assert factory.starting == 2, "one on the busiest agent, and one not placed yet"
        placed(2, "node-1")
        await trio.sleep(1)
        assert len(registered()) == 3, "node-1 starts two"
        placed(0, "node-1", "running")
        await trio.sleep(1)
        assert len(registered()) == 4, "one of node-1's runs"
        nursery.cancel_scope.cancel("test over")


async def test_a_runner_pending_past_the_patience_no_longer_holds_back_the_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its agent is away (restarting, or down and not yet marked so): it starts nothing meanwhile,
    and must not stop every refill for as long."""
    nomad = _QuickNomad()
    async with trio.open_nursery() as nursery:
        await _two_creations(nursery, nomad, registrations_per_second=100, pool_size=3, max_starting=1)
        await trio.sleep(START_PATIENCE - 1)
        assert sum(1 for kind, _ in nomad.calls if kind == "register") == 1
        await trio.sleep(2)
        assert sum(1 for kind, _ in nomad.calls if kind == "register") == 2, "the next one went"
        nursery.cancel_scope.cancel("test over")


async def _one_start(wait: float) -> tuple[int, RunnerFactory]:
    """A runner registered, then running ``wait`` seconds later: how many held back registrations
    just before it ran, and the factory."""
    nomad = _QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await _two_creations(nursery, nomad, registrations_per_second=100, pool_size=1)
        await trio.sleep(wait)
        starting = factory.starting
        alloc = Allocation(
            id="a1", job_id=nomad.calls[0][1], client_status="running", create_index=43, modify_index=43
        )
        actions = pool.handle(AllocationSeen(alloc), Moment(trio.current_time()))
        assert actions == [RunnerStarted(nomad.calls[0][1])], "the pool tells of the first start"
        factory.started(nomad.calls[0][1])
        nursery.cancel_scope.cancel("test over")
    assert factory.starting == 0
    return starting, factory


async def test_each_start_is_timed_from_its_registration_to_its_allocation_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    starting, factory = await _one_start(2.5)
    assert starting == 1
    assert factory.start_seconds.count == 1
    assert 2.5 <= factory.start_seconds.total < 3.0
    buckets = dict(factory.start_seconds.cumulative())
    assert (buckets["1"], buckets["5"]) == (0, 1)


async def test_a_start_slower_than_the_patience_is_still_timed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Past the patience it no longer holds back registrations, but its start is still a start."""
    starting, factory = await _one_start(START_PATIENCE + 20)
    assert starting == 0, "past the patience"
    assert factory.start_seconds.count == 1
    assert factory.start_seconds.total >= START_PATIENCE + 20


class _JobKeepingNomad(_QuickNomad):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[Mapping[str, Any]] = []

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.jobs.append(job)
        return await super().register_job(job)


async def test_new_runner_jobs_avoid_the_nodes_whose_agent_an_exec_could_not_reach() -> None:
    nomad = _JobKeepingNomad()
    pool = RunnerPool()
    nodes = [NodeListStub(id=n, status="ready", scheduling_eligibility="eligible") for n in ("n1", "n2")]
    pool.replace_nodes(nodes, 2)
    _, actions = pool.set_environment(attrs.evolve(ENVIRONMENT, prewarming_pool_size=2))
    first, second = (a.runner_id for a in actions if isinstance(a, CreateRunner))
    pool.registered(first, 5)
    pool.apply_allocation(
        Allocation(
            id="a1", job_id=first, node_id="n1", client_status="running", create_index=6, modify_index=6
        ),
        Moment(trio.current_time()),
    )
    avoided = pool.avoid("n1", Moment(trio.current_time()))
    assert avoided == [NodeAvoided("n1", silent=False)], "nothing waits to start on n1"
    factory = RunnerFactory(nomad, pool, FactorySettings(registrations_per_second=1000))
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(CreateRunner(second, 10))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel("test over")
    (job,) = nomad.jobs
    assert job["Constraints"] == [{"LTarget": "${node.unique.id}", "RTarget": "n1", "Operand": "!="}]
    assert "Constraints" not in runner_job(ENVIRONMENT, first, used=True), "a claim's write drops them"


def _avoided_in(job: Mapping[str, Any]) -> set[str]:
    return {c["RTarget"] for c in job.get("Constraints", ()) if c["LTarget"] == "${node.unique.id}"}


async def test_new_runner_jobs_go_around_an_agent_starting_max_starting_and_wait_when_all_are(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An agent that is gone, not yet known so by Nomad, starts nothing: the jobs placed there hold
    it at the cap for as long as they wait, and the rest go to the agents that start theirs,
    rather than wait for it."""
    nomad = _JobKeepingNomad()
    pool = RunnerPool()
    nodes = [NodeListStub(id=n, status="ready", scheduling_eligibility="eligible") for n in ("n1", "n2")]
    pool.replace_nodes(nodes, 2)

    def place(index: int, node: str) -> None:
        pool.apply_allocation(
            Allocation(
                id=f"a{index}",
                job_id=nomad.jobs[index]["ID"],
                client_status="pending",
                node_id=node,
                create_index=43 + index,
                modify_index=43 + index,
            ),
            Moment(trio.current_time()),
        )

    async with trio.open_nursery() as nursery:
        _, factory = await _two_creations(
            nursery, nomad, registrations_per_second=100, pool_size=6, max_starting=2, pool=pool
        )
        await trio.sleep(1)
        assert len(nomad.jobs) == 2, "neither is placed yet: both may land on one agent"
        place(0, "n1")
        place(1, "n1")
        await trio.sleep(1)
        assert len(nomad.jobs) == 4, "n1 starts two: two more go, around it"
        assert [_avoided_in(job) for job in nomad.jobs] == [set(), set(), {"n1"}, {"n1"}]
        place(2, "n2")
        place(3, "n2")
        await trio.sleep(START_PATIENCE + 1)
        assert len(nomad.jobs) == 4, "both agents hold two waiting jobs, however long they have waited"
        assert factory.starting == 2
        pool.apply_allocation(
            Allocation(
                id="a2", job_id=nomad.jobs[2]["ID"], client_status="running", node_id="n2", modify_index=60
            ),
            Moment(trio.current_time()),
        )
        await trio.sleep(1)
        assert len(nomad.jobs) == 5, "one of n2's runs"
        assert _avoided_in(nomad.jobs[4]) == {"n1"}
        nursery.cancel_scope.cancel("test over")


async def test_a_claim_learns_whether_its_used_mark_reached_nomad(autojump_clock: trio.abc.Clock) -> None:
    """The claim is answered only once its runner's job says 'used' in Nomad: a daemon that takes
    over before that would list the runner as idle and hand it out again."""
    pool, runner_id, nomad, factory = one_runner_and_a_slow_factory()
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(CreateRunner(runner_id, 10))
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        pool.apply_allocation(
            Allocation(id="a1", job_id=runner_id, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        nomad.release = trio.Event()
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        with trio.move_on_after(5) as waited:
            await factory.marked(runner.id)
        assert waited.cancelled_caught, "not while the write is under way"
        nomad.release.set()
        assert await factory.marked(runner.id) is True
        nursery.cancel_scope.cancel("test over")


async def test_a_used_mark_that_nomad_refuses_is_no_claim(autojump_clock: trio.abc.Clock) -> None:
    pool, runner_id, _, _ = one_runner_and_a_slow_factory()

    class _Refusing(_SlowNomad):
        async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
            raise NomadRequestError("PUT /v1/jobs", status_code=400, body="refused")

    factory = RunnerFactory(_Refusing(), pool, FactorySettings(registrations_per_second=1000))
    pool.registered(runner_id, 42)
    pool.apply_allocation(
        Allocation(id="a1", job_id=runner_id, client_status="running", create_index=43, modify_index=43),
        Moment(0.0),
    )
    runner, _ = pool.claim(10, 0, now=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        assert await factory.marked(runner.id) is False
        nursery.cancel_scope.cancel("test over")


async def test_a_purge_cut_short_by_the_factorys_restart_is_left_to_the_next_listing() -> None:
    """A purge on the wire when the factory is cancelled (a crash restarts it): whether Nomad
    still has the job is unknown. The tombstone no longer waits for a purge that will never
    answer: a listing that shows the job has it destroyed again, so that it is not leaked."""
    pool, runner_id, _, _ = one_runner_and_a_slow_factory()

    class _Hanging(_SlowNomad):
        async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
            self.calls.append(("deregister", job_id))
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    hanging = _Hanging()
    factory = RunnerFactory(hanging, pool, FactorySettings(registrations_per_second=1000))
    pool.registered(runner_id, 42)
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        for action in pool.destroy(runner_id, "the execution environment changed"):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.testing.wait_all_tasks_blocked()
        assert ("deregister", runner_id) in hanging.calls
        assert pool.tombstones[runner_id].gone_at is None
        nursery.cancel_scope.cancel("the factory restarts")
    assert pool.tombstones[runner_id].gone_at is not None
    listed = JobListStub(id=runner_id, status="running", create_index=42, modify_index=42)
    again = pool.reconcile([listed], [], Moment(1.0), index=100)
    assert any(isinstance(a, DestroyRunner) and a.runner_id == runner_id for a in again)
