"""The pool's one entry for facts, and the effects that carry out what it returns: plain synchronous
tests, as the pool's own (``test_pool.py``), with the moment given as an argument."""

from __future__ import annotations

import trio

from supervisor.base.entropy import Entropy
from supervisor.base.levels import Requests
from supervisor.core.config import FactorySettings
from supervisor.core.environments import new_runner_id
from supervisor.core.evidence import (
    AgentReport,
    AllocationSeen,
    ExecFinding,
    Finding,
    JobSeen,
    Moment,
    NodesListed,
    RunnersListed,
    SilentAgent,
)
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import (
    REASON_ALLOCATION_UNKNOWN,
    REASON_JOB_GONE,
    REASON_UNSTOPPABLE,
    Action,
    CreateRunner,
    DestroyRunner,
    NodeAvoided,
    ProbeRunner,
    RelistWanted,
    RunnerGone,
)
from supervisor.effects.effects import Effects
from supervisor.effects.factory import RunnerFactory
from supervisor.effects.leftovers import LeftoverSweep
from supervisor.nomad import AllocListStub, JobListStub, NodeListStub

from .nomad_double import NomadDouble
from .test_pool import AT, ENVIRONMENT, alloc, warm_pool


def two_nodes(pool: RunnerPool) -> None:
    nodes = [NodeListStub(id=n, status="ready", scheduling_eligibility="eligible") for n in ("node-1", "n2")]
    pool.evidence(NodesListed(nodes, 2), AT)


def test_nomads_facts_do_what_the_pools_own_entries_do() -> None:
    pool, ids = warm_pool()
    used, _ = pool.claim(10, 60, 0.0)
    gone = pool.evidence(AllocationSeen(alloc(used.id, used.alloc_id, "complete", 50)), AT)
    assert any(isinstance(a, RunnerGone) and a.runner_id == used.id for a in gone)
    other = next(r for r in ids if r != used.id)
    job_gone = pool.evidence(JobSeen(other, deleted=True, stopped=False), AT)
    assert DestroyRunner(other, REASON_JOB_GONE) in job_gone
    assert pool.evidence(JobSeen("10-unknown", deleted=True, stopped=False), AT) == []


def test_a_listing_is_reconciled_at_the_moment_it_is_given() -> None:
    pool = RunnerPool()
    pool.set_environment(ENVIRONMENT)
    left = new_runner_id(10, Entropy().uuid())  # left by a previous run
    listed = [JobListStub(id=left, status="running", create_index=3, modify_index=3, job_modify_index=3)]
    stub = AllocListStub(id="a-left", job_id=left, client_status="running", create_index=4, modify_index=4)
    pool.evidence(RunnersListed(listed, [stub], 10), Moment(7.0))
    assert left in pool.runners, "adopted"
    assert pool.listed_index == 10


def test_exec_findings_reach_the_runner_they_are_about() -> None:
    pool, _ = warm_pool()
    two_nodes(pool)
    used, _ = pool.claim(10, 60, 0.0)
    assert pool.evidence(ExecFinding("10-nobody", Finding.ALLOCATION_UNKNOWN), AT) == []
    unreachable = pool.evidence(ExecFinding(used.id, Finding.AGENT_UNREACHABLE), Moment(5.0))
    assert NodeAvoided(used.node_id, silent=False) in unreachable
    assert pool.nodes.avoided(5.0) == (used.node_id,)
    pool.evidence(ExecFinding(used.id, Finding.AGENT_REACHED), Moment(6.0))
    assert pool.nodes.avoided(6.0) == (), "an exec that ran proves its agent back"
    pool.evidence(ExecFinding(used.id, Finding.AGENT_AWAY), AT)
    assert pool.runners[used.id].moving
    unstoppable = pool.evidence(ExecFinding(used.id, Finding.UNSTOPPABLE), AT)
    assert DestroyRunner(used.id, REASON_UNSTOPPABLE) in unstoppable
    other, _ = pool.claim(10, 60, 0.0)
    lost = pool.evidence(ExecFinding(other.id, Finding.ALLOCATION_UNKNOWN), AT)
    assert RelistWanted(REASON_ALLOCATION_UNKNOWN) in lost


def test_a_silent_agent_is_avoided_and_an_agents_report_is_heard() -> None:
    pool, _ = warm_pool()
    two_nodes(pool)
    assert NodeAvoided("node-1", silent=True) in pool.evidence(SilentAgent("node-1"), Moment(1.0))
    report = alloc("10-x", "a-x", "running", 60, node_id="n2")
    assert pool.evidence(AgentReport(report), Moment(2.0, flowed=2.0)) == []


class _Executions:
    def __init__(self) -> None:
        self.ended: list[tuple[str, str]] = []

    def runner_gone(self, runner_id: str, reason: str) -> None:
        self.ended.append((runner_id, reason))


async def test_the_effects_send_each_action_where_it_is_carried_out(nursery: trio.Nursery) -> None:
    pool = RunnerPool()
    factory = RunnerFactory(NomadDouble(), pool, FactorySettings())
    executions, relists = _Executions(), Requests()
    leftovers = LeftoverSweep(NomadDouble(), task="t", grace=1.0, alloc_of=lambda _: None, nursery=nursery)
    probed: list[tuple[str, str]] = []

    class _Probes:
        def __init__(self, tell: object) -> None:
            pass

        def probe(self, runner_id: str, alloc_id: str) -> None:
            probed.append((runner_id, alloc_id))

    effects = Effects(pool, factory, executions, relists, leftovers, _Probes)  # type: ignore[arg-type]
    actions: list[Action] = [
        RunnerGone("10-a", "the allocation stopped"),
        RelistWanted("proof"),
        NodeAvoided("worker-01", silent=True),
        CreateRunner("10-b", 10),
        ProbeRunner("10-c", "alloc-c"),
    ]
    effects.apply(actions)
    assert executions.ended == [("10-a", "the allocation stopped")]
    assert await relists.wait() == ["proof"]
    assert probed == [("10-c", "alloc-c")]
    assert factory.backlog == 1, "the write waits for the factory's loop"
