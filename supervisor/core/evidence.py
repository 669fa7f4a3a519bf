"""Evidence: the typed facts the pool learns from, each the answer of one source.

The informer turns what Nomad says (events and listings) into ``NomadFact``s; the runner desk turns
what an exec session found about its runner into ``ExecFinding``s. The pool takes both through one
entry, ``RunnerPool.evidence(fact, at)``, with the moment as an argument (``Moment``): it never reads
a clock. What it returns are actions, which the effects carry out.
"""

from __future__ import annotations

import enum

from attrs import frozen

from ..nomad import Allocation, AllocListStub, JobListStub, Node, NodeListStub
from .runners import FOUND_BY_EVENT

__all__ = [
    "AgentReport",
    "AllocationSeen",
    "ExecFinding",
    "Fact",
    "Finding",
    "JobSeen",
    "JobsListed",
    "Moment",
    "NodeSeen",
    "NodesListed",
    "NomadFact",
    "RunnersListed",
    "SilentAgent",
]


@frozen
class Moment:
    """When a fact is applied: trio's time, and how far the event stream has flowed by then (the
    time agents' silence is measured in, see ``NodeTracker.silent``)."""

    now: float
    flowed: float = 0.0


@frozen
class AllocationSeen:
    """An allocation as an event, or one GET of it, showed it; ``found`` says which, for the figures."""

    alloc: Allocation
    found: str = FOUND_BY_EVENT


@frozen
class AgentReport:
    """An agent reported on an allocation (an ``AllocationUpdated`` event): its agent is alive."""

    alloc: Allocation


@frozen
class JobSeen:
    """A runner job's event: registered, stopped or deregistered."""

    job_id: str
    deleted: bool
    stopped: bool


@frozen
class NodeSeen:
    """A node's event, at the stream's index."""

    event_type: str
    node: Node
    index: int


@frozen
class NodesListed:
    """Every node, as a listing at ``index`` showed them."""

    nodes: list[NodeListStub]
    index: int


@frozen
class RunnersListed:
    """Every runner job and live allocation, as a listing at ``index`` showed them."""

    jobs: list[JobListStub]
    allocs: list[AllocListStub]
    index: int


@frozen
class JobsListed:
    """Every job of the namespace, once at the start: runner jobs of unknown environments are orphans."""

    jobs: list[JobListStub]


@frozen
class SilentAgent:
    """A node's agent said nothing of the runners placed there while others reported."""

    node_id: str


NomadFact = (
    AllocationSeen | AgentReport | JobSeen | NodeSeen | NodesListed | RunnersListed | JobsListed | SilentAgent
)


class Finding(enum.Enum):
    """What an exec session in a runner found out about it."""

    # Nomad no longer knows the runner's allocation: the runner is gone.
    ALLOCATION_UNKNOWN = "allocation unknown"
    # A server could not reach the runner's agent: new runners avoid its node a while.
    AGENT_UNREACHABLE = "agent unreachable"
    # The agent answered: it is back.
    AGENT_REACHED = "agent reached"
    # The agent stayed out of reach past the wait: the runner counts as moving.
    AGENT_AWAY = "agent away"
    # A command in the runner would not stop: the runner is replaced.
    UNSTOPPABLE = "unstoppable"


@frozen
class ExecFinding:
    """A finding about one runner."""

    runner_id: str
    finding: Finding


Fact = NomadFact | ExecFinding
