"""The runner pool: which runners exist, which are idle, starting or used, and what to do about it.

Synchronous and without I/O: it takes typed Nomad objects (events, listings) and requests, updates
its state in place, and returns actions (create, destroy, mark used) for the trio layer to carry out.
Reconcile is level-based and idempotent: each runner remembers the ModifyIndex of the allocation
state it last applied, so a replayed or duplicated event changes nothing, and a relist updates the
existing runner objects (allocation, node, ports) instead of replacing them under running executions.
One decision also weighs history and time: an idle runner whose task failed and waits 2 s or more
to restart (off a draining node) is replaced at once while its environment's budget lasts
(``replacements.py``), and waits for its restart otherwise.

A runner is handed out only when its allocation runs. A used runner whose container is lost or
replaced (restart, reschedule, migration, lost node) is gone for its client (410) and its job is
destroyed: its files are gone, and its ID must never come back as another client's idle runner.

A removed runner is gone for good. The pool keeps a tombstone for it: the Raft index from which
Nomad no longer shows its job (the index of its purge, or of the listing that found it missing), or
none while its purge is under way. A listing taken before that index still shows the job and never
brings the runner back; a listing taken at or after it that still shows the job means the job
outlived its purge, and it is destroyed again. A tombstone is dropped once a listing taken at or
after its index no longer shows the job, so they stay as many as the runners recently removed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from attrs import define, field

from ..base.entropy import Entropy
from ..base.errors import NoIdleRunner, RunnerGoneError, UnknownEnvironment
from ..nomad import Allocation, AllocListStub, Node, NodeListStub
from .allocation_state import end_reason, is_live, is_running, restart_delay, written_by_its_client
from .environments import ExecutionEnvironment, new_runner_id
from .evidence import (
    AgentAddressLearned,
    AgentReport,
    AgentUnreachable,
    AllocationSeen,
    ExecFinding,
    Fact,
    Finding,
    JobPurged,
    JobRefused,
    JobRegistered,
    JobSeen,
    JobsListed,
    Moment,
    NodeSeen,
    NodesListed,
    RunnerProven,
    RunnersListed,
    SilentAgent,
    StreamResumed,
)
from .listing import ListingReconcile, own
from .nodes import NodeChanges, NodeTracker
from .orders import Change, Claim, Destroy, Order, Release, RemoveEnvironment, SetEnvironment, Touch
from .pool_view import PoolView
from .replacements import SLOWER_THAN_A_START, ReplacementBudget
from .runners import (
    FOUND_BY_EVENT,
    FOUND_BY_EXEC_REFUSAL,
    REASON_AGENT_AWAY,
    REASON_ALLOCATION_STOPPED,
    REASON_ALLOCATION_UNKNOWN,
    REASON_DESTROYED,
    REASON_ENVIRONMENT,
    REASON_FAILED_IDLE,
    REASON_JOB_GONE,
    REASON_REPLACED,
    REASON_UNSTOPPABLE,
    Action,
    CreateRunner,
    DestroyRunner,
    MarkUsed,
    NodeAvoided,
    RelistWanted,
    Runner,
    RunnerGone,
    RunnerStarted,
    RunnerState,
    Tombstone,
)

__all__ = ["RunnerPool"]


@define
class RunnerPool(ListingReconcile, PoolView):
    """Every environment's runners: changes in (facts and orders, through ``handle``), actions out.

    The pool is the one writer of its state. Everyone else reads it through ``view``, a
    ``PoolView`` over the same structures, which has no way to change them.
    """

    environments: dict[int, ExecutionEnvironment] = field(factory=dict)
    runners: dict[str, Runner] = field(factory=dict)
    nodes: NodeTracker = field(factory=NodeTracker)
    # Runners found gone, by how (FOUND_BY_*).
    found_gone: dict[str, int] = field(factory=dict)
    tombstones: dict[str, Tombstone] = field(factory=dict)
    # The index of the newest listing reconciled: an older one has nothing newer to tell.
    listed_index: int = 0
    # Idle runners per environment, oldest first (dicts keep insertion order).
    _idle: dict[int, dict[str, None]] = field(factory=dict)
    # Each runner's allocation, the other way round: for exec straight to the allocation's agent.
    _by_alloc: dict[str, str] = field(factory=dict)
    # The runners of each environment, and how many of them are not used (idle or starting): a
    # refill reads that count on every change. Only a used runner is ever retired, and a used one
    # stays used until it is removed, so the count changes only in _keep, _forget and claim.
    _of_environment: dict[int, dict[str, Runner]] = field(factory=dict)
    _warm: dict[int, int] = field(factory=dict)
    # The used runners: the inactivity expiry looks at them only, not at every runner.
    _used: dict[str, Runner] = field(factory=dict)
    # Runners whose allocation ran for the first time since the last change was handled.
    _started: list[str] = field(factory=list)
    _replacements: ReplacementBudget = field(factory=ReplacementBudget)
    # The nodes given a runner that pulled its environment's image since the environment was put.
    _pulled: dict[int, set[str]] = field(factory=dict)
    # Where new runners' IDs come from: the daemon's source, which a simulation seeds.
    entropy: Entropy = field(factory=Entropy, kw_only=True)
    # The readers' face of this pool.
    view: PoolView = field(init=False)

    def __attrs_post_init__(self) -> None:
        self.view = PoolView.sharing(self)

    # -- the one entry --------------------------------------------------------------------------

    def handle(self, change: Change, at: Moment) -> list[Action]:
        """Apply one change, a fact or an order, at the moment ``at``; the actions it calls for. An
        order the pool cannot carry out raises its error (``orders.py``) and changes nothing."""
        actions = self._order(change, at) if isinstance(change, Order) else self._fact(change, at)
        if self._started:
            actions += [RunnerStarted(runner_id) for runner_id in self._started]
            self._started.clear()
        return actions

    def _order(self, order: Order, at: Moment) -> list[Action]:
        match order:
            case Claim(environment_id, inactivity_timeout):
                return self.claim(environment_id, inactivity_timeout, at.now)[1]
            case Touch(runner_id, working):
                self.activity(runner_id, at.now, working=working)
                return []
            case Release(runner_id):
                return self.release(runner_id)
            case Destroy(runner_id, reason):
                return self.destroy(runner_id, reason)
            case SetEnvironment(environment, fill, roll_out):
                return self.set_environment(environment, fill=fill, roll_out=roll_out)[1]
            case RemoveEnvironment(environment_id):
                return self.remove_environment(environment_id)
        raise AssertionError(f"not an order: {order!r}")  # pragma: no cover

    def _fact(self, fact: Fact, at: Moment) -> list[Action]:
        match fact:
            case JobRegistered(runner_id, index):
                self.registered(runner_id, index)
            case JobPurged(runner_id, index):
                self.purged(runner_id, index)
            case JobRefused(runner_id):
                self.registration_failed(runner_id)
            case RunnerProven(runner_id, alloc_id):
                self.prove(runner_id, alloc_id)
            case StreamResumed(flowed):
                self.nodes.stream_paused(flowed)
            case AgentAddressLearned(route, http_addr, tls):
                self.nodes.agent_learned(route, http_addr, tls)
            case AgentUnreachable(route):
                self.nodes.agent_unreachable(route)
            case _:
                return self.evidence(fact, at)
        return []

    def evidence(self, fact: Fact, at: Moment) -> list[Action]:
        """Apply one fact from Nomad or from an exec session at the moment ``at`` (``handle``'s)."""
        match fact:
            case AllocationSeen(alloc, found):
                return self.apply_allocation(alloc, at, found=found)
            case AgentReport(alloc):
                self.agent_reported(alloc, at)
                return []
            case JobSeen(job_id, deleted, stopped):
                return self.apply_job(job_id, deleted=deleted, stopped=stopped)
            case NodeSeen(event_type, node, index):
                return self.apply_node(event_type, node, index)
            case NodesListed(nodes, index, registered):
                return self.replace_nodes(nodes, index, registered)
            case RunnersListed(jobs, allocs, index):
                return self.reconcile(jobs, allocs, at, index=index)
            case JobsListed(jobs):
                return self.orphans(jobs)
            case SilentAgent(node_id):
                return self.avoid(node_id, at, silent=True)
            case ExecFinding(runner_id, finding):
                return self._finding(runner_id, finding, at)
        raise AssertionError(f"not a change: {fact!r}")  # pragma: no cover

    def _finding(self, runner_id: str, finding: Finding, at: Moment) -> list[Action]:
        runner = self.runners.get(runner_id)
        if runner is None:
            return []
        if finding is Finding.ALLOCATION_UNKNOWN:
            return self.lost(runner_id, REASON_ALLOCATION_UNKNOWN)
        if finding is Finding.AGENT_UNREACHABLE:
            return self.avoid(runner.node_id, at)
        if finding is Finding.AGENT_REACHED:
            self.agent_reached(runner_id)
        elif finding is Finding.AGENT_AWAY:
            self.set_moving(runner_id)
        elif finding is Finding.UNSTOPPABLE:
            return self.destroy(runner_id, REASON_UNSTOPPABLE)
        return []

    # -- environments ---------------------------------------------------------------------------

    def set_environment(
        self, environment: ExecutionEnvironment, *, fill: bool = True, roll_out: bool = False
    ) -> tuple[bool, list[Action]]:
        """Create or replace; returns whether it was new. Idle runners of a replaced environment (or,
        ``roll_out``, of one put again unchanged: its image may have moved) are destroyed at once,
        used ones when their client releases them. Without ``fill``, the pool is not refilled here:
        a listing of its runner jobs is about to be reconciled, which refills."""
        previous = self.environments.get(environment.id)
        self.environments[environment.id] = environment
        actions: list[Action] = []
        if previous != environment or roll_out:
            self._pulled.pop(environment.id, None)
        if previous is not None and (previous != environment or roll_out):
            why = "changed" if previous != environment else "was put again (rolled out)"
            for runner in self._runners_of(environment.id):
                if runner.state is RunnerState.USED:
                    runner.retired = True
                else:
                    actions += self._remove(runner, f"the execution environment {why}")
        return previous is None, actions + (self.fill(environment.id) if fill else [])

    def remove_environment(self, environment_id: int) -> list[Action]:
        """Forget the environment and destroy its runners (their executions end)."""
        if environment_id not in self.environments:
            raise UnknownEnvironment(environment_id)
        del self.environments[environment_id]
        actions: list[Action] = []
        for runner in self._runners_of(environment_id):
            actions += self._remove(runner, REASON_ENVIRONMENT)
        self._idle.pop(environment_id, None)
        self._pulled.pop(environment_id, None)
        self._replacements.forget(environment_id)
        return actions

    def fill(self, environment_id: int, *, force_pull: bool = True) -> list[Action]:
        """Create runners until idle plus starting reaches the prewarming pool size, pulling their
        image anew unless they replace a claimed runner (``force_pull``, as Poseidon)."""
        environment = self.environments.get(environment_id)
        if environment is None:
            return []
        actions: list[Action] = []
        for _ in range(environment.prewarming_pool_size - self._warm.get(environment_id, 0)):
            runner = Runner(
                new_runner_id(environment_id, self.entropy.uuid()),
                environment_id,
                RunnerState.STARTING,
                environment=environment,
                force_pull=force_pull,
            )
            self._keep(runner)
            actions.append(CreateRunner(runner.id, environment_id, force_pull))
        return actions

    def fill_all(self) -> list[Action]:
        """Refill every environment's pool."""
        return [action for environment_id in list(self.environments) for action in self.fill(environment_id)]

    # -- clients --------------------------------------------------------------------------------

    def claim(self, environment_id: int, inactivity_timeout: int, now: float) -> tuple[Runner, list[Action]]:
        """Hand out an idle runner at once (never waiting for one to start) and order its replacement."""
        if environment_id not in self.environments:
            raise UnknownEnvironment(environment_id)
        idle = self._idle.get(environment_id)
        if not idle:
            raise NoIdleRunner(environment_id)
        runner = self.runners[self._pick(idle, now)]
        del idle[runner.id]
        runner.state = RunnerState.USED
        self._used[runner.id] = runner
        self._warm[runner.environment_id] -= 1
        runner.inactivity_timeout = float(inactivity_timeout)
        runner.last_activity = now
        spec = runner.environment or self.environments[environment_id]
        actions: list[Action] = [
            MarkUsed(runner.id, spec, inactivity_timeout, runner.force_pull, in_place=runner.foreign_shape)
        ]
        return runner, actions + self.fill(
            environment_id, force_pull=not self.pulled_everywhere(environment_id)
        )

    def _pick(self, idle: dict[str, None], now: float) -> str:
        """The oldest idle runner whose node new runners do not avoid, if there is one: an exec
        could not reach the agents of the others lately."""
        avoided = self.nodes.avoided(now)
        if avoided:
            for runner_id in idle:
                if self.runners[runner_id].node_id not in avoided:
                    return runner_id
        return next(iter(idle))

    def release(self, runner_id: str) -> list[Action]:
        """The client gives the runner back: it is destroyed, never handed out again."""
        runner = self.used_runner(runner_id)
        if runner is None:
            raise RunnerGoneError(f"no used runner {runner_id}")
        return self._remove(runner, REASON_DESTROYED)

    def destroy(self, runner_id: str, reason: str) -> list[Action]:
        """End the runner for ``reason`` (expiry, an unstoppable command): gone for good."""
        runner = self.runners.get(runner_id)
        return self._remove(runner, reason) if runner is not None else []

    def activity(self, runner_id: str, now: float, *, working: int = 0) -> None:
        """Its client used the runner at ``now``; ``working`` counts the requests and executions
        that start (+1) or end (-1) in it: it never expires while one works in it."""
        runner = self.used_runner(runner_id)
        if runner is not None:
            runner.executions += working
            runner.last_activity = now

    # -- Nomad ----------------------------------------------------------------------------------

    def purged(self, runner_id: str, index: int) -> None:
        """Nomad confirmed the purge of a removed runner's job at ``index``."""
        tombstone = self.tombstones.get(runner_id)
        if tombstone is not None:
            self.tombstones[runner_id] = tombstone.purged(index)

    def registered(self, runner_id: str, index: int) -> None:
        """Nomad accepted the runner's job at ``index``."""
        runner = self.runners.get(runner_id)
        if runner is not None and not runner.registered_index:
            runner.registered_index = max(index, 1)

    def apply_node(self, event_type: str, node: Node, index: int) -> list[Action]:
        """A Node event: drains, agent restarts and returns, as the node tracker reads them."""
        return self._node_changes(self.nodes.apply_event(event_type, node, index))

    def replace_nodes(
        self, nodes: Iterable[NodeListStub], index: int, registered: dict[str, int] | None = None
    ) -> list[Action]:
        """Every node, from a listing at ``index`` (``registered``: ``NodesListed``'s)."""
        return self._node_changes(self.nodes.replace(nodes, index, registered or {}))

    def _node_changes(self, changes: NodeChanges) -> list[Action]:
        actions: list[Action] = []
        for node_id in changes.began_draining:
            actions += self._node_draining(node_id)
        for node_id, index in changes.restarted:
            self._node_restarted(node_id, index)
        if changes.ready_again:
            actions.append(RelistWanted("an agent restarted"))
        return actions

    def _node_draining(self, node_id: str) -> list[Action]:
        """Its idle runners are replaced at once, elsewhere; its used runners keep their running
        executions but take nothing new."""
        actions: list[Action] = []
        for runner in [r for r in self.runners.values() if r.node_id == node_id]:
            if runner.state is RunnerState.USED:
                runner.moving = True
            else:
                actions += self._remove(runner, "its node is draining")
        return actions

    def _node_restarted(self, node_id: str, index: int) -> None:
        """Its runners are suspect, never handed out, until evidence newer than ``index`` proves
        them: an allocation update written after it, or (once the node is ready again) a listing."""
        for runner in self.runners.values():
            if runner.node_id == node_id:
                runner.suspect_since = max(runner.suspect_since, index)
                self._set_state(runner, runner.state)

    def prove(self, runner_id: str, alloc_id: str) -> None:
        """Evidence newer than its agent's restart says the runner's allocation runs."""
        runner = self.runners.get(runner_id)
        if runner is not None and runner.suspect_since and runner.alloc_id == alloc_id:
            runner.suspect_since = 0
            self._set_state(runner, runner.state)

    def lost(self, runner_id: str, reason: str) -> list[Action]:
        """Nomad refused an exec in the runner because it no longer knows its allocation."""
        runner = self.runners.get(runner_id)
        if runner is None:
            return []
        return [*self._remove(runner, reason, found=FOUND_BY_EXEC_REFUSAL), RelistWanted(reason)]

    def avoid(self, node_id: str, at: Moment, *, silent: bool = False) -> list[Action]:
        """The node's agent is away: new runners avoid the node for a while
        (``NodeTracker.mark_away``; NodeAvoided when it is newly avoided), and the runners waiting
        to start there are replaced, since they would wait for that agent."""
        if not self.nodes.mark_away(node_id, at.now, silent=silent):
            return []
        starting = RunnerState.STARTING
        waiting = [r for r in self.runners.values() if r.node_id == node_id and r.state is starting]
        node = self.nodes.nodes[node_id]
        avoided = NodeAvoided(node.name or node.id, silent)
        return [avoided, *(action for r in waiting for action in self._remove(r, REASON_AGENT_AWAY))]

    def agent_reached(self, runner_id: str) -> None:
        """An exec in the runner ran: its agent is reachable, whatever an earlier one met."""
        runner = self.runners.get(runner_id)
        if runner is not None:
            self.nodes.agent_reached(runner.node_id)

    def _waits_away(self, runner: Runner, now: float) -> bool:
        """A runner not handed out, whose allocation waits to start on a node new runners avoid."""
        return runner.state is RunnerState.STARTING and runner.node_id in self.nodes.avoided(now)

    def set_moving(self, runner_id: str) -> None:
        """Its agent stayed unreachable: nothing new starts on it (410 for its client)."""
        runner = self.runners.get(runner_id)
        if runner is not None:
            runner.moving = True

    def registration_failed(self, runner_id: str) -> list[Action]:
        """Nomad refused the job for good: forget the runner. The pool is not refilled here, since
        Nomad would refuse the same job again; the next change that fills the pool tries again."""
        runner = self._forget(runner_id)
        if runner is not None:
            self._by_alloc.pop(runner.alloc_id, None)
            self._idle.get(runner.environment_id, {}).pop(runner_id, None)
        return []

    def agent_reported(self, alloc: Allocation, at: Moment) -> None:
        """The allocation's agent reported it (an ``AllocationUpdated`` event): the agent is there,
        and the allocation no longer waits for it."""
        self.nodes.heard(alloc.node_id, at.flowed)
        self.nodes.reported(alloc.job_id, alloc.id)

    def apply_allocation(
        self, alloc: Allocation | AllocListStub, at: Moment, *, found: str = FOUND_BY_EVENT
    ) -> list[Action]:
        """An allocation's state, from an event or (``found``: how a runner found gone was found) a
        listing."""
        runner = self.runners.get(alloc.job_id)
        if runner is None:
            return []
        runner.registered_index = runner.registered_index or max(alloc.create_index, 1)
        if alloc.id == runner.alloc_id:
            if alloc.modify_index <= runner.alloc_modify_index:
                return []  # replayed or duplicated: that state was applied already
        elif alloc.create_index < runner.alloc_create_index:
            return []  # an older allocation of this job
        elif runner.alloc_id and not is_live(alloc):
            return []  # a terminal allocation that is not the runner's current one
        replaced = bool(runner.alloc_id) and alloc.id != runner.alloc_id
        if runner.state is RunnerState.USED:
            if replaced:
                return self._remove(runner, REASON_REPLACED, found=found)
            if not is_live(alloc):
                return self._remove(runner, end_reason(alloc), found=found)
            if alloc.client_status == "pending":
                # Its task restarts in a fresh container.
                reason = end_reason(alloc)
                return self._remove(
                    runner, REASON_REPLACED if reason == REASON_ALLOCATION_STOPPED else reason, found=found
                )
            self._update(runner, alloc)
            runner.moving = runner.moving or self.nodes.draining(alloc.node_id)
            return []
        return self._apply_to_unused(runner, alloc, found, at)

    def _apply_to_unused(
        self, runner: Runner, alloc: Allocation | AllocListStub, found: str, at: Moment
    ) -> list[Action]:
        """An allocation's state, for an idle or starting runner."""
        if self._failed_while_idle(runner, alloc, at.now):
            return self._remove(runner, REASON_FAILED_IDLE, found=found)
        if not is_live(alloc):
            if alloc.next_allocation:
                self._set_state(runner, RunnerState.STARTING)
                self._update(runner, alloc)
                return []
            return self._remove(runner, REASON_ALLOCATION_STOPPED, found=found)
        self._update(runner, alloc)
        if self.nodes.draining(alloc.node_id):
            return self._remove(runner, "its node is draining")
        if alloc.client_status == "pending" and self._waits_away(runner, at.now):
            return self._remove(runner, REASON_AGENT_AWAY)
        if found == FOUND_BY_EVENT and alloc.client_status == "pending" and not alloc.received:
            self.nodes.waiting(runner.id, alloc.node_id, runner.alloc_id, at.flowed)
        if found == FOUND_BY_EVENT and runner.state is RunnerState.STARTING and is_running(alloc):
            self.nodes.agent_reached(alloc.node_id)  # its agent just started a task
        self._set_state(
            runner, RunnerState.IDLE if alloc.client_status == "running" else RunnerState.STARTING
        )
        return []

    def _failed_while_idle(self, runner: Runner, alloc: Allocation | AllocListStub, now: float) -> bool:
        """Whether an idle runner's task failed and waits to restart in place longer than a new
        runner takes to start, and its environment may replace it at once rather than wait."""
        if runner.state is not RunnerState.IDLE or alloc.id != runner.alloc_id:
            return False
        if not is_live(alloc) or alloc.client_status != "pending" or self.nodes.draining(alloc.node_id):
            return False
        if restart_delay(alloc) < SLOWER_THAN_A_START:
            return False
        environment = self.environments.get(runner.environment_id)
        size = environment.prewarming_pool_size if environment is not None else 0
        return self._replacements.take(runner.environment_id, size, now)

    def apply_job(self, job_id: str, *, deleted: bool, stopped: bool) -> list[Action]:
        """A Job event: a stopped or deleted runner job ends its runner."""
        runner = self.runners.get(job_id)
        if runner is None or not (deleted or stopped):
            return []
        return self._remove(runner, REASON_JOB_GONE, found=FOUND_BY_EVENT)

    # -- state changes --------------------------------------------------------------------------

    def _update(self, runner: Runner, alloc: Allocation | AllocListStub) -> None:
        if (
            alloc.modify_index > runner.suspect_since > 0
            and is_running(alloc)
            and alloc.id == runner.alloc_id
            and written_by_its_client(alloc)
        ):
            runner.suspect_since = 0  # its client reported the allocation running since the restart
        if runner.alloc_id != alloc.id:
            self.nodes.done_waiting(runner.id)  # that allocation waits no more
            self._by_alloc.pop(runner.alloc_id, None)
            runner.alloc_id = own(alloc.id)
            self._by_alloc[runner.alloc_id] = runner.id
        runner.alloc_create_index = alloc.create_index
        runner.alloc_modify_index = alloc.modify_index
        runner.node_id = sys.intern(alloc.node_id)
        if runner.force_pull and runner.node_id and not runner.retired:
            self._pulled.setdefault(runner.environment_id, set()).add(runner.node_id)
        if alloc.allocated_resources is not None:
            runner.ports = tuple(alloc.ports)

    def _set_state(self, runner: Runner, state: RunnerState) -> None:
        if state is RunnerState.IDLE and runner.state is RunnerState.STARTING:
            self._started.append(runner.id)
        runner.state = state
        if state is not RunnerState.STARTING:
            self.nodes.done_waiting(runner.id)
        idle = self._idle.setdefault(runner.environment_id, {})
        if state is RunnerState.IDLE and not runner.retired and not runner.suspect_since:
            idle[runner.id] = None
        else:
            idle.pop(runner.id, None)

    def _remove(
        self, runner: Runner, reason: str, *, vanished_at: int | None = None, found: str | None = None
    ) -> list[Action]:
        """Forget the runner for good; tell its executions; destroy its job, unless a listing at
        ``vanished_at`` showed it gone already; refill its pool. ``found``: how it was found gone,
        when nobody asked for its end."""
        if found is not None:
            self.found_gone[found] = self.found_gone.get(found, 0) + 1
        self._forget(runner.id)
        self._by_alloc.pop(runner.alloc_id, None)
        self._idle.get(runner.environment_id, {}).pop(runner.id, None)
        floor = max(runner.registered_index, runner.alloc_modify_index, self.listed_index)
        self.tombstones[runner.id] = Tombstone(floor, vanished_at)
        actions: list[Action] = []
        if runner.state is RunnerState.USED:
            actions.append(RunnerGone(runner.id, reason))
        if vanished_at is None:
            actions.append(DestroyRunner(runner.id, reason))
        return actions + self.fill(runner.environment_id)

    def _keep(self, runner: Runner) -> None:
        self.runners[runner.id] = runner
        self._of_environment.setdefault(runner.environment_id, {})[runner.id] = runner
        if runner.state is RunnerState.USED:
            self._used[runner.id] = runner
        else:
            self._warm[runner.environment_id] = self._warm.get(runner.environment_id, 0) + 1

    def _forget(self, runner_id: str) -> Runner | None:
        runner = self.runners.pop(runner_id, None)
        self.nodes.done_waiting(runner_id)
        if runner is not None:
            self._of_environment.get(runner.environment_id, {}).pop(runner_id, None)
            if runner.state is RunnerState.USED:
                del self._used[runner_id]
            else:
                self._warm[runner.environment_id] -= 1
        return runner
