"""How the pool rolls out an image: ``force_pull`` as Poseidon sets it, and a PUT of an unchanged
environment replacing its runners. Plain synchronous tests, no I/O."""

from __future__ import annotations

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import Moment
from supervisor.core.orders import Release, SetEnvironment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import CreateRunner, DestroyRunner, MarkUsed
from supervisor.nomad import Allocation, JobListStub, NodeListStub

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())
AT = Moment(0.0)


def running(pool: RunnerPool, runner_id: str, index: int, node: str = "node-1") -> None:
    pool.registered(runner_id, 5)
    alloc = Allocation(
        id=f"alloc-{runner_id}",
        job_id=runner_id,
        client_status="running",
        desired_status="run",
        create_index=index,
        modify_index=index,
        node_id=node,
    )
    pool.apply_allocation(alloc, AT)


def warm_pool() -> tuple[RunnerPool, list[str]]:
    pool = RunnerPool()
    actions = pool.handle(SetEnvironment(ENVIRONMENT), AT)
    ids = [a.runner_id for a in actions if isinstance(a, CreateRunner)]
    for i, runner_id in enumerate(ids):
        running(pool, runner_id, 10 + i)
    return pool, ids


def test_runners_that_fill_a_pool_pull_and_the_replacement_of_a_claimed_one_does_not() -> None:
    pool = RunnerPool()
    fill = pool.handle(SetEnvironment(ENVIRONMENT), AT)
    assert [a.force_pull for a in fill if isinstance(a, CreateRunner)] == [True, True]
    for i, action in enumerate(fill):
        running(pool, action.runner_id, 10 + i)  # type: ignore[union-attr]
    runner, actions = pool.claim(10, 60, now=1.0)
    mark, replacement = actions
    assert mark == MarkUsed(runner.id, ENVIRONMENT, 60, force_pull=True), "its job is written again as it was"
    assert isinstance(replacement, CreateRunner)
    assert replacement.force_pull is False
    replaced = pool.destroy(fill[1].runner_id, "its node is draining")  # type: ignore[union-attr]
    refill = [a for a in replaced if isinstance(a, CreateRunner)]
    assert [a.force_pull for a in refill] == [True], "a loss refills as a fill does"


def test_an_identical_put_replaces_the_idle_runners_at_once_and_the_used_ones_when_given_back() -> None:
    pool, ids = warm_pool()
    used, _ = pool.claim(10, 60, now=1.0)
    idle = [r for r in pool.runners if r != used.id]
    assert pool.set_environment(ENVIRONMENT)[1] == [], "an unchanged environment adopted: nothing"
    actions = pool.handle(SetEnvironment(ENVIRONMENT, roll_out=True), AT)
    destroyed = {a.runner_id for a in actions if isinstance(a, DestroyRunner)}
    created = [a for a in actions if isinstance(a, CreateRunner)]
    assert destroyed == set(idle)
    assert len(created) == 2
    assert all(a.force_pull for a in created)
    assert used.id in pool.runners, "never under a running execution"
    assert pool.runners[used.id].retired
    released = pool.handle(Release(used.id), AT)
    assert [a.runner_id for a in released if isinstance(a, DestroyRunner)] == [used.id]
    assert used.id not in pool.runners
    assert set(ids) & set(pool.runners) == set(), "none of the runners from before the roll-out is left"


def test_an_adopted_runner_keeps_the_force_pull_its_job_was_made_with() -> None:
    pool = RunnerPool()
    pool.handle(SetEnvironment(ENVIRONMENT, fill=False), AT)
    pulled = "10-00000000-0000-0000-0000-000000000001"
    stub = JobListStub(id=pulled, meta={"environment": "10", "forcePull": "true"}, create_index=3)
    pool.reconcile([stub], [], AT, index=20)
    running(pool, pulled, 21)
    runner, actions = pool.claim(10, 60, now=1.0)
    assert runner.id == pulled
    assert actions[0] == MarkUsed(pulled, ENVIRONMENT, 60, force_pull=True)


def test_a_claims_replacement_pulls_until_every_node_holds_a_runner_that_pulled_since_the_put() -> None:
    pool = RunnerPool()
    nodes = [
        NodeListStub(id=n, status="ready", scheduling_eligibility="eligible") for n in ("node-1", "node-2")
    ]
    pool.replace_nodes(nodes, 2)
    fill = [a for a in pool.handle(SetEnvironment(ENVIRONMENT), AT) if isinstance(a, CreateRunner)]
    for i, action in enumerate(fill):
        running(pool, action.runner_id, 10 + i)  # both on node-1: node-2 may keep an older image
    _, actions = pool.claim(10, 60, now=1.0)
    (replacement,) = [a for a in actions if isinstance(a, CreateRunner)]
    assert replacement.force_pull is True, "it may land on node-2, which pulled nothing since the put"
    running(pool, replacement.runner_id, 20, node="node-2")
    _, actions = pool.claim(10, 60, now=2.0)
    (replacement,) = [a for a in actions if isinstance(a, CreateRunner)]
    assert replacement.force_pull is False, "every node holds a runner that pulled: as Poseidon"
