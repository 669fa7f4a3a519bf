"""The runner factory's pace and placement against a fake Nomad client: registrations one interval
apart, at most ``max_starting`` waiting to start per agent, avoided nodes, and each start timed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio
import trio.testing

from supervisor.core.config import FactorySettings
from supervisor.core.environments import runner_job
from supervisor.core.evidence import AllocationSeen, Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import CreateRunner, DestroyRunner, NodeAvoided, RunnerStarted
from supervisor.effects.factory import START_PATIENCE, RunnerFactory
from supervisor.nomad.models import (
    Allocation,
    JobRegisterResponse,
    NodeListStub,
)

from .factory_doubles import ENVIRONMENT, QuickNomad, two_creations


async def test_a_purge_does_not_wait_behind_creations_waiting_for_their_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    nomad = QuickNomad()
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


class _TimedNomad(QuickNomad):
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


async def test_registrations_wait_while_max_starting_allocations_have_not_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The pace alone would pile starts onto an agent that starts tasks slowly (the field's storm):
    new jobs wait until an earlier one's allocation runs."""
    nomad = QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, _ = await two_creations(
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
    nomad = QuickNomad()

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
        pool, factory = await two_creations(
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
    nomad = QuickNomad()
    async with trio.open_nursery() as nursery:
        await two_creations(nursery, nomad, registrations_per_second=100, pool_size=3, max_starting=1)
        await trio.sleep(START_PATIENCE - 1)
        assert sum(1 for kind, _ in nomad.calls if kind == "register") == 1
        await trio.sleep(2)
        assert sum(1 for kind, _ in nomad.calls if kind == "register") == 2, "the next one went"
        nursery.cancel_scope.cancel("test over")


async def _one_start(wait: float) -> tuple[int, RunnerFactory]:
    """A runner registered, then running ``wait`` seconds later: how many held back registrations
    just before it ran, and the factory."""
    nomad = QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await two_creations(nursery, nomad, registrations_per_second=100, pool_size=1)
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


class _JobKeepingNomad(QuickNomad):
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
        _, factory = await two_creations(
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
