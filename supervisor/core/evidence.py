"""Evidence: the typed facts the pool learns from, each the answer of one source.

The informer turns what Nomad says (events and listings) into ``NomadFact``s; the runner desk turns
what an exec session found about its runner into ``ExecFinding``s (and a runner it proved into
``RunnerProven``); the factory reports what Nomad answered its writes (``WriteAnswered``); the
Nomad client what it learned of agents (``AgentNews``). The pool takes them, and the orders of
``orders.py``, through one entry, ``RunnerPool.handle(change, at)``, with the moment as an argument
(``Moment``): it never reads a clock. What it returns are actions, which the effects carry out.
"""

from __future__ import annotations

import enum

from attrs import field, frozen

from ..nomad import Allocation, AllocListStub, JobListStub, Node, NodeListStub
from ..nomad.agents import AgentRoute
from .runners import FOUND_BY_EVENT

__all__ = [
    "AgentAddressLearned",
    "AgentNews",
    "AgentReport",
    "AgentUnreachable",
    "AllocationSeen",
    "ExecFinding",
    "Fact",
    "Finding",
    "JobPurged",
    "JobRefused",
    "JobRegistered",
    "JobSeen",
    "JobsListed",
    "Moment",
    "NodeSeen",
    "NodesListed",
    "NomadFact",
    "RunnerProven",
    "RunnersListed",
    "SilentAgent",
    "StreamResumed",
    "WriteAnswered",
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
    """Every node, as a listing at ``index`` showed them; with ``registered``, the index of each
    node's last registration of its agent, read once at the start of a term (its events)."""

    nodes: list[NodeListStub]
    index: int
    registered: dict[str, int] = field(factory=dict)


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


@frozen
class StreamResumed:
    """The event stream went on at ``flowed`` after a pause (``NodeTracker.stream_paused``)."""

    flowed: float


NomadFact = (
    AllocationSeen
    | AgentReport
    | JobSeen
    | NodeSeen
    | NodesListed
    | RunnersListed
    | JobsListed
    | SilentAgent
    | StreamResumed
)


@frozen
class JobRegistered:
    """Nomad accepted the runner's job at ``index``."""

    runner_id: str
    index: int


@frozen
class JobPurged:
    """Nomad confirmed the purge of a removed runner's job at ``index`` (0: the purge was cut short
    or refused, and only a listing that shows the job can have it destroyed again)."""

    runner_id: str
    index: int = 0


@frozen
class JobRefused:
    """Nomad refused the runner's job for good: the runner is forgotten, its pool not refilled (Nomad
    would refuse the same job again; the next change that fills the pool tries again)."""

    runner_id: str


WriteAnswered = JobRegistered | JobPurged | JobRefused


@frozen
class AgentAddressLearned:
    """Nomad gave the address of the route's node's agent (``NodeTracker.agent_learned``)."""

    route: AgentRoute
    http_addr: str
    tls: bool


@frozen
class AgentUnreachable:
    """An exec could not reach the route's agent (``NodeTracker.agent_unreachable``)."""

    route: AgentRoute


AgentNews = AgentAddressLearned | AgentUnreachable


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


@frozen
class RunnerProven:
    """Evidence newer than its agent's restart (a command that ran in it, or one GET of it) showed
    the runner's allocation ``alloc_id`` running."""

    runner_id: str
    alloc_id: str


Fact = NomadFact | ExecFinding | RunnerProven | WriteAnswered | AgentNews
