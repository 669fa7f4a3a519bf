"""The leader's scheduler: evaluations in, plans out.

A plan is one ``PlanResult`` write: new allocations (pending/run), stopped ones (DesiredStatus stop
with Nomad's description), replacements linked both ways in the same write (PreviousAllocation on the
new one, NextAllocation on the old one), in-place updates. Placement picks ready, eligible,
non-draining nodes that meet the job's constraints and ranks a few of them as Nomad does
(``placement.py``); each allocation keeps the AllocMetric of its placement.

When a group cannot be placed, its evaluation completes with the group's AllocMetric in
``FailedTGAllocs`` (later failures of the group coalesced into it) and the count left in
``QueuedAllocations``, and a blocked evaluation waits for capacity (``blocked_evals.py``); run
again, it places what it can and is blocked again while anything is left, or completes. A failed
allocation whose reschedule found no node, or that a job evaluation forces, is rescheduled by the
next evaluation that can place it.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from ..config import ENVIRONMENT_JOB_PREFIX
from ..state.encode import job_full, rfc3339
from ..state.images import ImageError
from ..state.objects import SimAlloc, SimEval, SimJob, SimNode
from ..state.store import ClusterState, JobKey, Write
from .blocked_evals import BlockedEvals
from .constraints import job_constraints, satisfies
from .placement import Unplaced, group_ask, network_mode, select_node

__all__ = ["Scheduler", "reschedule_policy", "restart_policy"]

_BATCH_RESTART: Final = {"Attempts": 3, "Interval": 24 * 3600 * 10**9, "Delay": 15 * 10**9, "Mode": "fail"}
_SERVICE_RESTART: Final = {"Attempts": 2, "Interval": 30 * 60 * 10**9, "Delay": 15 * 10**9, "Mode": "fail"}
_BATCH_RESCHEDULE: Final = {
    "Attempts": 1,
    "Interval": 24 * 3600 * 10**9,
    "Delay": 5 * 10**9,
    "DelayFunction": "constant",
    "MaxDelay": 0,
    "Unlimited": False,
}
_SERVICE_RESCHEDULE: Final = {
    "Attempts": 0,
    "Interval": 0,
    "Delay": 30 * 10**9,
    "DelayFunction": "exponential",
    "MaxDelay": 3600 * 10**9,
    "Unlimited": True,
}
_INDEX_IN_NAME: Final = re.compile(r"\[(\d+)\]$")
_RESCHEDULED: Final = "alloc was rescheduled because it failed"


def restart_policy(job: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    """The group's restart policy, with the job type's defaults."""
    defaults = _BATCH_RESTART if job.get("Type") == "batch" else _SERVICE_RESTART
    return {**defaults, **{k: v for k, v in (group.get("RestartPolicy") or {}).items() if v is not None}}


def reschedule_policy(job: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    """The group's reschedule policy, with the job type's defaults."""
    defaults = _BATCH_RESCHEDULE if job.get("Type") == "batch" else _SERVICE_RESCHEDULE
    return {**defaults, **{k: v for k, v in (group.get("ReschedulePolicy") or {}).items() if v is not None}}


def _task_signature(job: dict[str, Any], group: dict[str, Any]) -> Any:
    """What an update must change to replace allocations instead of updating them in place (Nomad's
    ``tasksUpdated``): a task's driver, config, env, resources, or its meta combined with its
    group's and its job's; the group's networks."""
    meta = {**(job.get("Meta") or {}), **(group.get("Meta") or {})}
    return [
        (
            t.get("Name"),
            t.get("Driver"),
            t.get("Config"),
            t.get("Env"),
            t.get("Resources"),
            {**meta, **(t.get("Meta") or {})},
        )
        for t in group.get("Tasks") or []
    ], group.get("Networks")


class Scheduler:
    """Evaluations into plans: placements, replacements and stops."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.config = state.config
        self.blocked_evals = BlockedEvals(state, self._run_unblocked)
        self._port_cursor: dict[str, int] = {}
        self._used_ports: dict[str, set[int]] = {}

    def forget_blocked(self, key: JobKey) -> None:
        """Drop the job's blocked evaluation, if any, without running it (the job is gone)."""
        self.blocked_evals.forget(key)

    # -- evaluations ----------------------------------------------------------------------------

    def enqueue(self, evaluation: SimEval) -> None:
        """Process the evaluation after ``eval_delay``."""
        self.state.call_later(self.config.eval_delay, lambda: self.process(evaluation.id))

    def process(self, eval_id: str, *, unblocked: bool = False) -> None:
        """Turn an evaluation into a plan and apply it: stops, in-place updates, placements; then
        complete it, or block what is left (a blocked evaluation run again stays blocked)."""
        evaluation = self.state.evaluation(eval_id)
        if evaluation is None or evaluation.terminal or (evaluation.status == "blocked" and not unblocked):
            return
        key = (evaluation.namespace, evaluation.job_id)
        snapshot = self.state.index
        unplaced = Unplaced()
        with self.state.write("PlanResult") as tx:
            for name, count in self._groups(key):
                self._reconcile_group(tx, key, name, count, evaluation, unplaced)
            # A blocked evaluation that still places nothing submits no plan.
            if tx.touched or not unblocked:
                tx.touch(evaluation)
        with self.state.write("EvaluationUpdated") as tx:
            if evaluation.status == "blocked" and unplaced.failed:
                self.blocked_evals.reblock(tx, evaluation, unplaced, snapshot)
            else:
                self._complete(tx, evaluation, unplaced, snapshot)

    def _complete(self, tx: Write, evaluation: SimEval, unplaced: Unplaced, snapshot: int) -> None:
        key = (evaluation.namespace, evaluation.job_id)
        job = self.state.job(key)
        queued = unplaced.queued(job)
        if job is not None and any(job.queued.get(g) != n for g, n in queued.items()):
            job.queued.update(queued)
            job.queued_index = self.state.index + 1
        fields: dict[str, Any] = {
            "status": "complete",
            "status_description": "",
            "failed_tg_allocs": unplaced.failed,
            "queued_allocations": queued,
            "snapshot_index": snapshot,
        }
        if unplaced.failed:
            fields["blocked_eval"] = self.blocked_evals.block(tx, evaluation, unplaced, snapshot).id
        else:
            self.blocked_evals.cancel(tx, key, succeeded=evaluation)
        self.state.eval_changed(tx, evaluation, **fields)

    def unblock(self) -> None:
        """Capacity changed (a node ready or eligible again, a drain cancelled): every blocked
        evaluation is run again."""
        self.blocked_evals.unblock_all()

    def _run_unblocked(self, evaluation: SimEval) -> None:
        self.state.call_later(self.config.eval_delay, lambda: self.process(evaluation.id, unblocked=True))

    def _groups(self, key: JobKey) -> list[tuple[str, int]]:
        job = self.state.job(key)
        names = {a.task_group for a in self.state.job_allocs(key)}
        if job is None or job.stop:
            return [(name, 0) for name in sorted(names)]
        counts = {
            g["Name"]: int(g.get("Count", 1) if g.get("Count") is not None else 1) for g in job.task_groups
        }
        return [(name, counts.get(name, 0)) for name in sorted(names | set(counts))]

    # -- reconciling one task group -------------------------------------------------------------

    def _reconcile_group(
        self, tx: Write, key: JobKey, group: str, count: int, evaluation: SimEval, unplaced: Unplaced
    ) -> None:
        """Stop, update and place allocations of one group; what cannot be placed goes to
        ``unplaced``."""
        state = self.state
        job = state.jobs.get(key)
        allocs = [a for a in state.allocs_by_job.get(key, {}).values() if a.task_group == group]
        batch = job is not None and job.type == "batch"
        description = "alloc not needed due to job update"
        if job is None or job.stop or count == 0:
            for alloc in allocs:
                if not alloc.server_terminal:
                    state.alloc_changed(tx, alloc, desired_status="stop", desired_description=description)
            return
        spec = job.group(group) or {}
        self._mark_lost_on_gone_nodes(tx, allocs)
        kept, replace = self._sort_out(tx, job, group, spec, allocs, batch)
        # A failed allocation keeps its slot: its reschedule policy replaces it, or it stays failed.
        for alloc in kept[count:]:
            state.alloc_changed(tx, alloc, desired_status="stop", desired_description=description)
        missing = count - min(count, len(kept))
        used_indexes = {self._name_index(a.name) for a in kept[:count]}
        for i in range(missing):
            previous = replace[i] if i < len(replace) else None
            index = self._free_index(used_indexes)
            used_indexes.add(index)
            if group in unplaced.failed:
                unplaced.coalesce(group, spec)
                self._not_rescheduled(tx, previous)
                continue
            selection = select_node(state, job, spec, previous)
            if selection.node is None:
                unplaced.fail(group, spec, selection)
                self._not_rescheduled(tx, previous)
                continue
            tracker = None
            if previous is not None and previous.client_status == "failed":
                tracker = self._rescheduled_tracker(job, previous)
                state.alloc_changed(tx, previous, desired_status="stop", desired_description=_RESCHEDULED)
            self.place(
                tx,
                job,
                spec,
                selection.node,
                index,
                evaluation,
                previous=previous,
                tracker=tracker,
                metrics=selection.metric,
            )

    def _not_rescheduled(self, tx: Write, previous: SimAlloc | None) -> None:
        """A failed allocation whose replacement found no node is marked so (Nomad's
        LastRescheduleFailedToPlace), to be rescheduled when its blocked evaluation runs."""
        if previous is None or previous.client_status != "failed":
            return
        tracker = previous.reschedule_tracker or {"Events": None}
        if tracker.get("LastReschedule") != "no placement":
            self.state.alloc_changed(
                tx, previous, reschedule_tracker={**tracker, "LastReschedule": "no placement"}
            )

    def _mark_lost_on_gone_nodes(self, tx: Write, allocs: list[SimAlloc]) -> None:
        """Allocations on a node that is down, or was purged, are lost."""
        lost = "alloc is lost since its node is down"
        for alloc in allocs:
            node = self.state.node(alloc.node_id)
            if (node is None or node.status == "down") and not alloc.client_terminal:
                self.state.alloc_changed(
                    tx,
                    alloc,
                    client_status="lost",
                    client_description=lost,
                    desired_status="stop",
                    desired_description=lost,
                )

    def _sort_out(
        self, tx: Write, job: SimJob, group: str, spec: dict[str, Any], allocs: list[SimAlloc], batch: bool
    ) -> tuple[list[SimAlloc], list[SimAlloc]]:
        """The group's allocations to keep (updated in place where no task changed), and those
        to replace; the others are stopped."""
        state = self.state
        description = "alloc not needed due to job update"
        constraints = job_constraints(job.spec, spec)
        kept: list[SimAlloc] = []
        replace: list[SimAlloc] = []
        for alloc in sorted(allocs, key=lambda a: a.create_index):
            if alloc.next_allocation:
                continue
            if alloc.client_status == "lost":
                replace.append(alloc)
            elif alloc.server_terminal:
                continue
            elif alloc.client_status == "failed" and self._reschedules_now(alloc):
                replace.append(alloc)
            elif alloc.desired_transition.get("Migrate"):
                state.alloc_changed(
                    tx, alloc, desired_status="stop", desired_description="alloc is being migrated"
                )
                replace.append(alloc)
            elif alloc.client_status == "complete" and not batch:
                replace.append(alloc)
            elif alloc.job_version != job.version:
                old_groups: list[dict[str, Any]] = alloc.job.get("TaskGroups") or []
                old_group = next((g for g in old_groups if g.get("Name") == group), {})
                node = state.nodes.get(alloc.node_id)
                # In place only where its own node still meets the job's constraints.
                in_place = node is not None and satisfies(node, constraints)
                if in_place and _task_signature(alloc.job, old_group) == _task_signature(job.spec, spec):
                    alloc.job, alloc.job_version = job_full(job, state.config.region), job.version
                    alloc.alloc_modify_index = state.index + 1
                    state.alloc_changed(tx, alloc)
                    kept.append(alloc)
                else:
                    state.alloc_changed(tx, alloc, desired_status="stop", desired_description=description)
            else:
                kept.append(alloc)
        return kept, replace

    @staticmethod
    def _reschedules_now(alloc: SimAlloc) -> bool:
        """A failed allocation forced to reschedule (a job evaluation's ForceReschedule), or one
        whose delayed reschedule found no node."""
        tracker = alloc.reschedule_tracker or {}
        forced = bool(alloc.desired_transition.get("ForceReschedule"))
        return forced or tracker.get("LastReschedule") == "no placement"

    @staticmethod
    def _name_index(name: str) -> int:
        match = _INDEX_IN_NAME.search(name)
        return int(match.group(1)) if match else 0

    @staticmethod
    def _free_index(used: set[int]) -> int:
        index = 0
        while index in used:
            index += 1
        return index

    # -- placement ------------------------------------------------------------------------------

    def place(
        self,
        tx: Write,
        job: SimJob,
        group: dict[str, Any],
        node: SimNode,
        index: int,
        evaluation: SimEval,
        *,
        previous: SimAlloc | None = None,
        tracker: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> SimAlloc:
        """Place a new allocation of the group on ``node`` (linking it to ``previous`` both ways),
        with the AllocMetric of its placement."""
        state = self.state
        tasks = group.get("Tasks") or [{"Name": group.get("Name", "task")}]
        resources = tasks[0].get("Resources") or {}
        alloc = SimAlloc(
            id=state.new_id(),
            namespace=job.namespace,
            eval_id=evaluation.id,
            name=f"{job.id}.{group.get('Name')}[{index}]",
            node_id=node.id,
            node_name=node.name,
            job_id=job.id,
            job=job_full(job, state.config.region),
            job_version=job.version,
            task_group=str(group.get("Name")),
            tasks=[str(t.get("Name")) for t in tasks],
            host_ip=node.address,
            ports=self._allocate_ports(node, group),
            cpu=int(resources.get("CPU") or 100),
            memory_mb=int(resources.get("MemoryMB") or 300),
            memory_max_mb=int(resources.get("MemoryMaxMB") or 0),
            disk_mb=group_ask(group).disk_mb,
            network_mode=network_mode(group),
            previous_allocation=previous.id if previous else "",
            reschedule_tracker=tracker,
            metrics=orjson.Fragment(orjson.dumps(metrics)) if metrics is not None else None,
            signing_key_id=state.signing_key_id,
        )
        alloc.images = self._pull_images(node, tasks)
        alloc.alloc_modify_index = state.index + 1
        state.add_alloc(tx, alloc)
        if previous is not None:
            state.alloc_changed(tx, previous, next_allocation=alloc.id)
        return alloc

    def _pull_images(self, node: SimNode, tasks: list[dict[str, Any]]) -> dict[str, str]:
        """The image each docker task runs on the node: what the node has, unless it pulls."""
        images = {}
        for task in tasks:
            config = task.get("Config") or {}
            if task.get("Driver") != "docker" or not isinstance(config.get("image"), str):
                continue
            try:
                images[str(task.get("Name"))] = self.state.images.run_on(
                    node.id, config["image"], force_pull=config.get("force_pull") in (True, "true")
                )
            except ImageError:
                continue  # an image interpolated at the client: not modelled
        return images

    def _allocate_ports(self, node: SimNode, group: dict[str, Any]) -> list[dict[str, Any]]:
        low, high = self.config.dynamic_port_range
        used = self._used_ports.setdefault(node.id, set())
        ports = []
        for network in group.get("Networks") or []:
            for reserved in network.get("ReservedPorts") or []:
                ports.append(
                    {"Label": reserved["Label"], "To": reserved.get("To", 0), "Value": reserved["Value"]}
                )
            for dynamic in network.get("DynamicPorts") or []:
                value = self._port_cursor.get(node.id, low)
                while value in used:
                    value = low if value >= high else value + 1
                used.add(value)
                self._port_cursor[node.id] = value + 1
                ports.append({"Label": dynamic["Label"], "To": dynamic.get("To", 0), "Value": value})
        return ports

    # -- replacements outside an evaluation -----------------------------------------------------

    def reschedule_failed(self, alloc: SimAlloc) -> None:
        """Place the replacement of a failed allocation, after its reschedule delay; with no node
        for it, its follow-up evaluation fails the group and blocks."""
        state = self.state
        key = (alloc.namespace, alloc.job_id)
        job = state.jobs.get(key)
        followup = state.evals.get(alloc.followup_eval_id)
        if job is None or job.stop or alloc.next_allocation or alloc.server_terminal:
            return
        group = job.group(alloc.task_group) or {}
        selection = select_node(state, job, group, alloc)
        evaluation = followup or SimEval(
            id="", namespace=job.namespace, job_id=job.id, type=job.type, triggered_by="alloc-failure"
        )
        snapshot = state.index
        unplaced = Unplaced()
        if selection.node is None:
            unplaced.fail(alloc.task_group, group, selection)
            with state.write("PlanResult") as tx:
                self._not_rescheduled(tx, alloc)
            with state.write("EvaluationUpdated") as tx:
                blocked = self.blocked_evals.block(tx, evaluation, unplaced, snapshot)
                if followup is not None:
                    state.eval_changed(
                        tx,
                        followup,
                        status="complete",
                        failed_tg_allocs=unplaced.failed,
                        queued_allocations=unplaced.queued(job),
                        blocked_eval=blocked.id,
                        snapshot_index=snapshot,
                    )
            return
        tracker = self._rescheduled_tracker(job, alloc)
        with state.write("PlanResult") as tx:
            state.alloc_changed(tx, alloc, desired_status="stop", desired_description=_RESCHEDULED)
            self.place(
                tx,
                job,
                group,
                selection.node,
                self._name_index(alloc.name),
                evaluation,
                previous=alloc,
                tracker=tracker,
                metrics=selection.metric,
            )
            if followup is not None:
                self.blocked_evals.cancel(tx, key, succeeded=followup)
                state.eval_changed(
                    tx,
                    followup,
                    status="complete",
                    queued_allocations=unplaced.queued(job),
                    snapshot_index=snapshot,
                )

    def _rescheduled_tracker(self, job: SimJob, alloc: SimAlloc) -> dict[str, Any]:
        """The failed allocation's RescheduleTracker, one event more, for its replacement."""
        events = list((alloc.reschedule_tracker or {}).get("Events") or [])
        events.append(
            {
                "Delay": self.reschedule_delay(job, alloc),
                "PrevAllocID": alloc.id,
                "PrevNodeID": alloc.node_id,
                "RescheduleTime": self.state.now_ns(),
            }
        )
        return {"Events": events, "LastReschedule": "ok"}

    def reschedule_delay(self, job: SimJob, alloc: SimAlloc) -> int:
        """The delay before the next reschedule, in ns, by the policy's delay function."""
        policy = reschedule_policy(job.spec, job.group(alloc.task_group) or {})
        delay = int(policy.get("Delay") or 0)
        attempts = len((alloc.reschedule_tracker or {}).get("Events") or [])
        if policy.get("DelayFunction") == "exponential":
            delay *= 2**attempts
        elif policy.get("DelayFunction") == "fibonacci":
            a, b = delay, delay
            for _ in range(attempts):
                a, b = b, a + b
            delay = a
        max_delay = int(policy.get("MaxDelay") or 0)
        return min(delay, max_delay) if max_delay else delay

    def may_reschedule(self, job: SimJob, alloc: SimAlloc) -> bool:
        """Whether the failed allocation's reschedule policy allows another attempt."""
        policy = reschedule_policy(job.spec, job.group(alloc.task_group) or {})
        if policy.get("Unlimited"):
            return True
        interval_ns = int(policy.get("Interval") or 0)
        now = self.state.now_ns()
        events = (alloc.reschedule_tracker or {}).get("Events") or []
        recent = [e for e in events if not interval_ns or now - e["RescheduleTime"] <= interval_ns]
        return len(recent) < int(policy.get("Attempts") or 0)

    def is_environment_job(self, key: JobKey) -> bool:
        """Whether the job is an environment's template job (``template-``)."""
        return key[1].startswith(ENVIRONMENT_JOB_PREFIX)

    def wait_until(self, delay_ns: int) -> str:
        """The RFC 3339 time ``delay_ns`` from now, for an evaluation's WaitUntil."""
        return rfc3339(self.state.now_ns() + delay_ns)
