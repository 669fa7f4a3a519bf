"""Failed idle runners: replaced at once within each environment's budget, then left to Nomad."""

from __future__ import annotations

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.replacements import REFILL_SECONDS, ReplacementBudget
from supervisor.core.runners import REASON_FAILED_IDLE, CreateRunner, DestroyRunner, RunnerState
from supervisor.nomad import AllocListStub

from .test_pool import alloc, node

# A pool of 20: a budget of two replacements at once.
ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 20, 100.0, 256, False, ())


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def moment(self) -> Moment:
        """Now, with the event stream flowing as fast as time passes."""
        return Moment(self.now, self.now)


def idle_pool() -> tuple[RunnerPool, Clock, list[str]]:
    clock = Clock()
    pool = RunnerPool()
    _, actions = pool.set_environment(ENVIRONMENT)
    ids = [a.runner_id for a in actions if isinstance(a, CreateRunner)]
    for i, runner_id in enumerate(ids):
        pool.registered(runner_id, 5)
        pool.apply_allocation(alloc(runner_id, f"a{i}", "running", 10 + i), clock.moment())
    return pool, clock, ids


def restarting(
    pool: RunnerPool, clock: Clock, runner_id: str, index: int, *, delay: float = 15.0
) -> list[object]:
    """The runner's task failed: its allocation is pending again while the task waits ``delay``
    seconds to restart (the runner template's restart delay)."""
    runner = pool.runners[runner_id]
    events = [
        {"Type": "Terminated", "ExitCode": 1},
        {"Type": "Restarting", "StartDelay": round(delay * 1e9)},
    ]
    states = {"default-task": {"State": "pending", "Events": events}}
    pending = alloc(runner_id, runner.alloc_id, "pending", index, created=0, raw={"TaskStates": states})
    return list(pool.apply_allocation(pending, clock.moment()))


def test_a_failed_idle_runner_is_destroyed_and_replaced_at_once() -> None:
    pool, clock, ids = idle_pool()
    actions = restarting(pool, clock, ids[0], 100)
    assert DestroyRunner(ids[0], REASON_FAILED_IDLE) in actions
    created = [a for a in actions if isinstance(a, CreateRunner)]
    assert len(created) == 1, "its replacement is ordered with its end"
    assert ids[0] not in pool.runners
    assert pool.stats()[10].idle == 19


def test_past_the_budget_a_failed_idle_runner_waits_for_its_restart() -> None:
    pool, clock, ids = idle_pool()
    assert ReplacementBudget.capacity(20) == 2
    assert restarting(pool, clock, ids[0], 100)
    assert restarting(pool, clock, ids[1], 101)
    assert restarting(pool, clock, ids[2], 102) == [], "the budget is spent"
    assert pool.runners[ids[2]].state is RunnerState.STARTING, "not handed out while it restarts"
    pool.apply_allocation(
        alloc(ids[2], pool.runners[ids[2]].alloc_id, "running", 103, created=5), clock.moment()
    )
    assert pool.runners[ids[2]].state is RunnerState.IDLE, "its restart brings it back"
    clock.now = REFILL_SECONDS / 2
    assert DestroyRunner(ids[3], REASON_FAILED_IDLE) in restarting(pool, clock, ids[3], 104), "one came back"
    assert restarting(pool, clock, ids[4], 105) == []


def test_only_idle_runners_are_replaced_this_way() -> None:
    pool, clock, _ids = idle_pool()
    _, actions = pool.set_environment(ExecutionEnvironment(11, "python:3.12", 1, 100.0, 256, False, ()))
    starting = next(a.runner_id for a in actions if isinstance(a, CreateRunner))
    pool.apply_allocation(alloc(starting, "s0", "pending", 200), clock.moment())
    again = pool.apply_allocation(alloc(starting, "s0", "pending", 201), clock.moment())
    assert again == [], "it never ran: its image may not either"
    used, _ = pool.claim(10, 60, now=0)
    gone = restarting(pool, clock, used.id, 202)
    assert DestroyRunner(used.id, REASON_FAILED_IDLE) not in gone, "a used runner ends as its client's"
    assert pool.stats()[10].idle == 19


def test_each_environment_has_a_budget_of_its_own() -> None:
    budget = ReplacementBudget()
    assert [budget.take(10, 5, now=0.0) for _ in range(2)] == [True, False], "at least one"
    assert budget.take(11, 5, now=0.0), "another environment's is whole"
    budget.forget(10)
    assert budget.take(10, 5, now=0.0), "a new environment of the same ID starts whole"


def test_a_restart_sooner_than_a_new_runner_or_not_seen_is_waited_for() -> None:
    pool, clock, ids = idle_pool()
    assert restarting(pool, clock, ids[0], 100, delay=0) == [], "an agent that recreated its containers"
    assert pool.runners[ids[0]].state is RunnerState.STARTING
    stub = AllocListStub(
        id=pool.runners[ids[1]].alloc_id, job_id=ids[1], client_status="pending", modify_index=101
    )
    assert pool.apply_allocation(stub, clock.moment()) == [], "a lean listing does not say why it is pending"
    assert restarting(pool, clock, ids[2], 102), "the budget is whole: neither spent it"


def test_on_a_draining_node_it_goes_as_its_neighbours_do_without_spending_the_budget() -> None:
    pool, clock, ids = idle_pool()
    pool.nodes.apply_event("NodeDrain", node(drain=True), 90)  # the tracker alone: the event's first
    assert DestroyRunner(ids[0], "its node is draining") in restarting(pool, clock, ids[0], 100)
    pool.nodes.apply_event("NodeDrain", node(drain=False), 91)
    assert DestroyRunner(ids[1], REASON_FAILED_IDLE) in restarting(pool, clock, ids[1], 101)
    assert DestroyRunner(ids[2], REASON_FAILED_IDLE) in restarting(pool, clock, ids[2], 102), (
        "both still there"
    )
