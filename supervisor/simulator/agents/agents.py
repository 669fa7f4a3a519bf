"""The client agents: nodes that register, heartbeat, run allocations' tasks, restart them by policy,
drain, and go away; and the faults the field saw them suffer.

Agents react to each write (``after_write``): a pending allocation on a node whose agent is up starts
after ``alloc_start_delay``; one the scheduler wants stopped is killed after ``task_kill_delay``. An
agent that stops sends no heartbeats; after ``heartbeat_grace`` the node turns ``down`` and the
scheduler replaces its allocations as lost. When it comes back, it re-registers by heartbeat and
catches up with what the servers decided meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..scheduling.scheduler import Scheduler, restart_policy
from ..state.encode import ZERO_TIME, rfc3339
from ..state.objects import TASK_EVENT_LIMIT, SimAlloc, SimNode
from ..state.store import ClusterState, JobKey, Write
from .exec_hooks import ExecHooks, NoExec
from .restarts import AgentRestarts
from .task_events import task_event

__all__ = ["Agents"]


class Agents:
    """The client agents: node status, task start and stop, policies, drains and faults."""

    def __init__(self, state: ClusterState, scheduler: Scheduler) -> None:
        self.state = state
        self.config = state.config
        self.scheduler = scheduler
        self.exec: ExecHooks = NoExec()
        self._starting: set[str] = set()
        # The allocations each node's agent is starting now, for the reschedule flood.
        self._starting_on: dict[str, set[str]] = {}
        self._stopping: set[str] = set()
        self._drain_timers: dict[str, Callable[[], None]] = {}
        # Called when an agent stops and when it starts again (its HTTP port closes and opens).
        self._on_agent_stopped: list[Callable[[SimNode], None]] = []
        self._on_agent_started: list[Callable[[SimNode], None]] = []
        self.restarts = AgentRestarts(self)
        state.after_write.append(self._after_write)

    def call_when_an_agent_stops(self, hook: Callable[[SimNode], None]) -> None:
        """Call ``hook`` with the node each time its agent stops."""
        self._on_agent_stopped.append(hook)

    def call_when_an_agent_starts(self, hook: Callable[[SimNode], None]) -> None:
        """Call ``hook`` with the node each time its agent starts."""
        self._on_agent_started.append(hook)

    def stop_calling_when_an_agent_starts(self, hook: Callable[[SimNode], None]) -> None:
        """Stop calling ``hook`` when an agent starts."""
        self._on_agent_started.remove(hook)

    # -- nodes ----------------------------------------------------------------------------------

    def register_node(self, name: str, address: str, http_addr: str = "") -> SimNode:
        """Add a client node: NodeRegistration ("Node registered"), then ready; its agent serves
        Nomad's HTTP API at ``http_addr``."""
        state = self.state
        node = SimNode(
            id=state.new_id(),
            name=name,
            datacenter=state.config.datacenter,
            address=address,
            http_addr=http_addr or f"{address}:4646",
            attributes={
                "kernel.name": "linux",
                "unique.hostname": name,
                "unique.name": name,
                "nomad.version": state.config.nomad_version,
                "driver.docker": "1",
            },
        )
        state.nodes[node.id] = node
        with state.write("NodeRegistration") as tx:
            node.status_updated_at = int(state.now_ns() // 10**9)
            node.add_event("Node registered", "Cluster", state.time_string(), state.index + 1)
            tx.touch(node)
        self._set_status(node, "ready")
        return node

    def _set_status(self, node: SimNode, status: str, message: str = "") -> None:
        state = self.state
        with state.write("NodeStreamEvent") as tx:
            node.status = status
            node.status_updated_at = int(state.now_ns() // 10**9)
            if message:
                node.add_event(
                    message,
                    "Heartbeat" if status == "down" else "Cluster",
                    state.time_string(),
                    state.index + 1,
                )
            tx.touch(node)

    def stop_agent(self, node: SimNode) -> None:
        """The agent process stops: no more heartbeats; running tasks keep running."""
        if not node.agent_up:
            return
        node.agent_up = False
        node.agent_down_since = self.state.now()
        self._starting -= self._starting_on.pop(node.id, set())
        self.exec.drop_node(node.id)
        for hook in self._on_agent_stopped:
            hook(node)
        since = node.agent_down_since
        self.state.call_later(self.config.heartbeat_grace, lambda: self._heartbeat_missed(node, since))

    def _heartbeat_missed(self, node: SimNode, since: float) -> None:
        if node.agent_up or node.agent_down_since != since or node.status == "down":
            return
        self._set_status(node, "down", "Node heartbeat missed")
        jobs = {
            (a.namespace, a.job_id)
            for a in self.state.every_alloc()
            if a.node_id == node.id and not a.client_terminal
        }
        self._evaluate(jobs, "node-update", node_id=node.id)

    def start_agent(
        self,
        node: SimNode,
        *,
        recreate_containers: bool = False,
        lose_containers: float = 0.0,
        report_delay: float = 1.0,
    ) -> None:
        """The agent is back. A Nomad client registers on every start, whatever its node's status
        (nomad-api.md §4): ``NodeRegistration`` with status ``initializing`` and the node event
        "Node re-registered", then, once fingerprinted, ``NodeStreamEvent`` with ``ready``. It
        restores its allocations meanwhile: ``lose_containers`` of its running tasks have no
        container left (``restarts.py``)."""
        if node.agent_up:
            return
        node.agent_up = True
        for hook in self._on_agent_started:
            hook(node)
        node.back_since = self.state.now()
        state = self.state
        self.restarts.restore(node, lose_containers, report_delay)
        with state.write("NodeRegistration") as tx:
            node.status = "initializing"
            node.status_updated_at = int(state.now_ns() // 10**9)
            node.add_event("Node re-registered", "Cluster", state.time_string(), state.index + 1)
            tx.touch(node)
        state.timers.call_later(state.config.agent_ready_delay, lambda: self._ready_after_start(node))
        for alloc in [a for a in self.state.every_alloc() if a.node_id == node.id]:
            if alloc.client_status == "lost":
                self.exec.kill_alloc(alloc.id)
            elif recreate_containers and alloc.client_status == "running" and not alloc.server_terminal:
                self._restart_tasks(alloc, reason="Restart after the agent recreated the task")
            elif alloc.client_status == "pending" and alloc.task_states and not alloc.server_terminal:
                # A task that waited for its restart when the agent stopped: the restored task
                # runner runs it again (a restart still due meanwhile finds it running).
                state.timers.call_later(state.config.alloc_start_delay, partial(self.restarted, alloc.id))
            else:
                self._schedule(alloc)

    def _ready_after_start(self, node: SimNode) -> None:
        """Ready again. Nomad evaluates every job with an allocation on a node that moves from
        initializing to ready (``createNodeEvals``), which replaces a service job's allocation
        that ended complete (the reconciler's ``shouldFilter``; a batch job's is kept). Only
        service jobs here: a batch job's evaluation changes nothing the simulator models."""
        if node.agent_up and node.status == "initializing":
            self._set_status(node, "ready")
            keys = {(a.namespace, a.job_id) for a in self.state.every_alloc() if a.node_id == node.id}
            services = {k for k in keys if (job := self.state.job(k)) is not None and job.type == "service"}
            self._evaluate(services, "node-update", node_id=node.id)
            self.scheduler.unblock()

    def _check_flood(self, node: SimNode) -> None:
        if not self.config.flood_limit or not node.agent_up:
            return
        if (
            self.state.now() - node.back_since <= self.config.flood_window
            and len(self._starting_on.get(node.id, ())) > self.config.flood_limit
        ):
            node.flood_crashes += 1
            self.stop_agent(node)
            self.state.call_later(self.config.flood_downtime, lambda: self.start_agent(node))

    # -- drain and eligibility ------------------------------------------------------------------

    def drain(
        self,
        node: SimNode,
        *,
        deadline_ns: int | None,
        mark_eligible: bool,
        meta: dict[str, str],
        accessor: str,
    ) -> None:
        """Start (or, with ``deadline_ns`` None, cancel) a drain of the node, as Nomad's drainer does."""
        state = self.state
        now_ns, now = state.now_ns(), state.time_string()
        cancel_timer = self._drain_timers.pop(node.id, None)
        if cancel_timer:
            cancel_timer()
        with state.write("NodeDrain") as tx:
            if deadline_ns is None:
                node.drain_strategy = None
                if node.last_drain:
                    node.last_drain = {**node.last_drain, "Status": "canceled", "UpdatedAt": now}
                if mark_eligible:
                    node.eligibility = "eligible"
                node.add_event("Node drain strategy removed", "Drain", now, state.index + 1)
            else:
                node.drain_strategy = {
                    "Deadline": deadline_ns,
                    "ForceDeadline": rfc3339(now_ns + deadline_ns) if deadline_ns > 0 else ZERO_TIME,
                    "IgnoreSystemJobs": False,
                    "StartedAt": rfc3339(now_ns),
                }
                node.eligibility = "ineligible"
                node.last_drain = {
                    "AccessorID": accessor,
                    "Meta": meta or None,
                    "StartedAt": now,
                    "Status": "draining",
                    "UpdatedAt": now,
                }
                node.add_event("Node drain strategy set", "Drain", now, state.index + 1)
            tx.touch(node)
        if deadline_ns is None:
            self.scheduler.unblock()
            return
        live = self._live_allocs(node)
        force = deadline_ns < 0
        self._migrate([a for a in live if force or a.job.get("Type") != "batch"])
        if deadline_ns > 0:
            self._drain_timers[node.id] = state.timers.call_later(
                deadline_ns / 1e9, lambda: self._drain_deadline(node)
            )
        self._check_drain_complete(node, deadline_reached=force)

    def _drain_deadline(self, node: SimNode) -> None:
        self._drain_timers.pop(node.id, None)
        if node.drain_strategy is None:
            return
        self._migrate(self._live_allocs(node))
        self._complete_drain(node, deadline_reached=True)

    def _live_allocs(self, node: SimNode) -> list[SimAlloc]:
        return [
            self.state.allocs[i]
            for i in self.state.live_alloc_ids(node.id)
            if not self.state.allocs[i].server_terminal
        ]

    def _migrate(self, allocs: list[SimAlloc]) -> None:
        if not allocs:
            return
        with self.state.write("AllocationUpdateDesiredStatus") as tx:
            for alloc in allocs:
                self.state.alloc_changed(
                    tx, alloc, desired_transition={**alloc.desired_transition, "Migrate": True}
                )
        self._evaluate({(a.namespace, a.job_id) for a in allocs}, "node-drain")

    def _check_drain_complete(self, node: SimNode, *, deadline_reached: bool = False) -> None:
        if node.drain_strategy is not None and not self.state.live_alloc_ids(node.id):
            self._complete_drain(node, deadline_reached=deadline_reached)

    def _complete_drain(self, node: SimNode, *, deadline_reached: bool) -> None:
        state = self.state
        cancel_timer = self._drain_timers.pop(node.id, None)
        if cancel_timer:
            cancel_timer()
        with state.write("NodeDrain") as tx:
            node.drain_strategy = None
            if node.last_drain:
                node.last_drain = {**node.last_drain, "Status": "complete", "UpdatedAt": state.time_string()}
            details = {"deadline_reached": "true"} if deadline_reached else None
            node.add_event("Node drain complete", "Drain", state.time_string(), state.index + 1, details)
            tx.touch(node)

    def set_eligibility(self, node: SimNode, eligible: bool) -> None:
        """Make the node eligible or ineligible for placements (NodeDrain or NodeEligibility by version)."""
        with self.state.write(self.config.eligibility_event_type) as tx:
            node.eligibility = "eligible" if eligible else "ineligible"
            tx.touch(node)
        if eligible:
            self.scheduler.unblock()

    # -- tasks ----------------------------------------------------------------------------------

    def _after_write(self, tx: Write) -> None:
        draining: set[str] = set()
        for topic, obj in tx.touched.values():
            if topic != "Allocation":
                continue
            self._schedule(obj)
            node = self.state.node(obj.node_id)
            if node is not None and node.drain_strategy is not None:
                draining.add(node.id)
        for node_id in draining:
            self._check_drain_complete(self.state.nodes[node_id])

    def _schedule(self, alloc: SimAlloc) -> None:
        node = self.state.node(alloc.node_id)
        if node is None or not node.agent_up or alloc.client_terminal:
            return
        if alloc.server_terminal:
            if alloc.id not in self._stopping:
                self._stopping.add(alloc.id)
                self.state.call_later(self.config.task_kill_delay, lambda: self._stop(alloc.id))
        elif alloc.client_status == "pending" and not alloc.task_states and alloc.id not in self._starting:
            self._starting.add(alloc.id)
            self._starting_on.setdefault(node.id, set()).add(alloc.id)
            self.state.call_later(self.config.alloc_start_delay, lambda: self._start(alloc.id))
            self._check_flood(node)

    def _pending_to_run(self, alloc_id: str) -> SimAlloc | None:
        """The allocation, if it still waits for its tasks to start on a live agent."""
        alloc = self.state.alloc(alloc_id)
        if (
            alloc is None
            or alloc.server_terminal
            or alloc.client_status != "pending"
            or not self._agent_up(alloc)
        ):
            return None
        return alloc

    def _start(self, alloc_id: str) -> None:
        self._starting.discard(alloc_id)
        for starting in self._starting_on.values():
            starting.discard(alloc_id)
        alloc = self._pending_to_run(alloc_id)
        if alloc is None:
            return
        now_ns = self.state.now_ns()
        started = rfc3339(now_ns)
        states = {
            task: {
                "Events": [
                    task_event("Received", "Task received by client", now_ns),
                    task_event(
                        "Task Setup", "Building Task Directory", now_ns, Message="Building Task Directory"
                    ),
                    task_event("Started", "Task started by client", now_ns),
                ],
                "Failed": False,
                "FinishedAt": ZERO_TIME,
                "LastRestart": ZERO_TIME,
                "Paused": "",
                "Restarts": 0,
                "StartedAt": started,
                "State": "running",
            }
            for task in alloc.tasks
        }
        with self.state.write("AllocationUpdated") as tx:
            self.state.alloc_changed(
                tx, alloc, client_status="running", client_description="Tasks are running", task_states=states
            )

    def _stop(self, alloc_id: str) -> None:
        self._stopping.discard(alloc_id)
        alloc = self.state.alloc(alloc_id)
        if alloc is None or alloc.client_terminal or not self._agent_up(alloc):
            return
        self.exec.kill_alloc(alloc.id)
        self.finish_tasks(alloc, "Killed", "Task successfully killed", killing=True)
        with self.state.write("AllocationUpdated") as tx:
            self.state.alloc_changed(
                tx, alloc, client_status="complete", client_description="All tasks have completed"
            )

    def _agent_up(self, alloc: SimAlloc) -> bool:
        node = self.state.node(alloc.node_id)
        return node is not None and node.agent_up

    def finish_tasks(
        self, alloc: SimAlloc, kind: str, display: str, *, killing: bool = False, **fields: Any
    ) -> None:
        """Every task of the allocation ends dead with ``kind``'s event (after the kill's, if
        ``killing``)."""
        now_ns = self.state.now_ns()
        for task in alloc.tasks:
            state = alloc.task_states.setdefault(
                task,
                {"Events": [], "Restarts": 0, "StartedAt": ZERO_TIME, "LastRestart": ZERO_TIME, "Paused": ""},
            )
            events = list(state.get("Events") or [])
            if killing:
                events.append(
                    task_event(
                        "Killing",
                        "Sent interrupt. Waiting 5s before force killing",
                        now_ns,
                        KillTimeout=5_000_000_000,
                    )
                )
                events.append(
                    task_event("Terminated", "Exit Code: 137, Signal: 9", now_ns, ExitCode=137, Signal=9)
                )
            events.append(task_event(kind, display, now_ns, **fields))
            state.update(
                Events=events[-TASK_EVENT_LIMIT:],
                State="dead",
                FinishedAt=rfc3339(now_ns),
                Failed=bool(fields.get("FailsTask", False)),
            )
        alloc.task_states = dict(alloc.task_states)

    def fail(self, alloc: SimAlloc, reason: str) -> None:
        """The task exits on its own: out of memory (137, oom_killed) or a crash (1); then its policy."""
        if alloc.client_status != "running" or not self._agent_up(alloc):
            raise ValueError(f"allocation {alloc.id} is {alloc.client_status}, not running")
        state = self.state
        key = (alloc.namespace, alloc.job_id)
        job = state.jobs.get(key)
        group = (job.group(alloc.task_group) if job else None) or {}
        policy = restart_policy(alloc.job, group)
        now, now_ns = state.now(), state.now_ns()
        oom = reason == "oom"
        code = 137 if oom else 1
        terminated = task_event(
            "Terminated",
            f"Exit Code: {code}" + (', Exit Message: "OOM Killed"' if oom else ""),
            now_ns,
            ExitCode=code,
            Details={"exit_code": str(code), "oom_killed": "true" if oom else "false", "signal": "0"},
            Message="OOM Killed" if oom else "",
        )
        self.exec.kill_alloc(alloc.id)
        interval = int(policy.get("Interval") or 0) / 1e9
        alloc.restart_times = [t for t in alloc.restart_times if not interval or now - t <= interval]
        if len(alloc.restart_times) < int(policy.get("Attempts") or 0):
            delay = int(policy.get("Delay") or 0) / 1e9 * state.config.policy_delay_scale
            self._restart_tasks(alloc, reason="Restart within policy", first_event=terminated, delay=delay)
            return
        attempts = int(policy.get("Attempts") or 0)
        self.finish_tasks(
            alloc,
            "Not Restarting",
            "Exceeded allowed attempts",
            FailsTask=True,
            RestartReason=f'Exceeded allowed attempts {attempts} in interval and mode is "fail"',
        )
        for task in alloc.tasks:
            events = alloc.task_states[task]["Events"]
            events.insert(len(events) - 1, terminated)
            del events[:-TASK_EVENT_LIMIT]
        with state.write("AllocationUpdated") as tx:
            fields: dict[str, Any] = {"client_status": "failed", "client_description": "Failed tasks"}
            if job is not None and not job.stop and self.scheduler.may_reschedule(job, alloc):
                delay_ns = round(
                    self.scheduler.reschedule_delay(job, alloc) * state.config.policy_delay_scale
                )
                followup = state.new_eval(
                    tx, key, "alloc-failure", status="pending", wait_until=self.scheduler.wait_until(delay_ns)
                )
                fields["followup_eval_id"] = followup.id
                state.timers.call_later(delay_ns / 1e9, lambda: self.scheduler.reschedule_failed(alloc))
            state.alloc_changed(tx, alloc, **fields)

    def _restart_tasks(
        self, alloc: SimAlloc, *, reason: str, first_event: dict[str, Any] | None = None, delay: float = 0.0
    ) -> None:
        state = self.state
        now, now_ns = state.now(), state.now_ns()
        alloc.restart_times.append(now)
        self.exec.kill_alloc(alloc.id)
        self.exec.reset_workspace(alloc)
        for task in alloc.tasks:
            task_state = alloc.task_states.setdefault(task, {"Events": [], "Restarts": 0})
            events = list(task_state.get("Events") or [])
            if first_event is not None:
                events.append(first_event)
            events.append(
                task_event(
                    "Restarting",
                    f"Task restarting in {delay:g}s",
                    now_ns,
                    RestartReason=reason,
                    StartDelay=round(delay * 1e9),
                )
            )
            task_state.update(Events=events[-TASK_EVENT_LIMIT:], State="pending")
        with state.write("AllocationUpdated") as tx:
            state.alloc_changed(
                tx,
                alloc,
                client_status="pending",
                client_description="Tasks are pending",
                task_states=dict(alloc.task_states),
            )
        state.timers.call_later(delay, lambda: self.restarted(alloc.id))

    def restarted(self, alloc_id: str, *, counted: bool = True) -> None:
        """The pending task runs again in a new container: a restart by its policy (``counted``),
        or a run after a failed restore, which Nomad does not count."""
        alloc = self._pending_to_run(alloc_id)
        if alloc is None:
            return
        now_ns = self.state.now_ns()
        for task in alloc.tasks:
            task_state = alloc.task_states[task]
            events = [*task_state["Events"], task_event("Started", "Task started by client", now_ns)]
            task_state.update(Events=events[-TASK_EVENT_LIMIT:], State="running")
            if counted:
                task_state.update(
                    Restarts=int(task_state.get("Restarts", 0)) + 1, LastRestart=rfc3339(now_ns)
                )
            else:
                task_state.update(StartedAt=rfc3339(now_ns))
        with self.state.write("AllocationUpdated") as tx:
            self.state.alloc_changed(
                tx,
                alloc,
                client_status="running",
                client_description="Tasks are running",
                task_states=dict(alloc.task_states),
            )

    # -- evaluations ----------------------------------------------------------------------------

    def _evaluate(self, jobs: set[JobKey], triggered_by: str, *, node_id: str = "") -> None:
        if not jobs:
            return
        with self.state.write("EvaluationUpdated") as tx:
            evaluations = [
                self.state.new_eval(tx, key, triggered_by, node_id=node_id) for key in sorted(jobs)
            ]
        for evaluation in evaluations:
            self.scheduler.enqueue(evaluation)
