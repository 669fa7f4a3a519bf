"""Choosing a node for one allocation as Nomad's GenericStack does, and the AllocMetric that tells how
it went: an allocation's ``Metrics``, an evaluation's ``FailedTGAllocs``.

Every ready, eligible, non-draining node is looked at (``NodesEvaluated``). A node a constraint
excludes is filtered, by the constraint's text; once a constraint that does not name a node's
unique values has excluded a node, every node of its computed class is filtered as "computed class
ineligible" without a check, as Nomad's feasibility wrapper does. A node without the group
network's mode (``bridge``, ``cni/<name>``: its fingerprinted ``NodeResources.Networks``) is
filtered as "missing network", Nomad's NetworkChecker, one of the group's checkers that the
wrapper settles per class likewise. A node at its ``max_allocs`` is exhausted
("max allocation exceeded"); so is one where the group's tasks' CPU and memory and its ephemeral
disk, added to what the node's allocations hold, do not fit (``DimensionExhausted`` "cpu",
"memory" or "disk", the first that does not, as ``AllocsFit`` names it). Of the feasible nodes a
few are ranked: a batch job looks at 2 (the power of two choices), a service job at log2 of the
nodes, at least 2. The job's own allocations on a node count against it first, then the node's
load: the lighter wins under ``spread``, the heavier under ``binpack``. The ranked nodes' scores
are kept in ``ScoreMetaData``, Nomad's scorers' names and ranges (binpack's fit from the node's
CPU and memory with this allocation on it).
"""

from __future__ import annotations

import math
from typing import Any, Final

from attrs import define, field, frozen

from ..state.fingerprint import EMPTY_RESOURCES
from ..state.node_usage import Ask
from ..state.objects import SimAlloc, SimJob, SimNode
from ..state.store import ClusterState
from .constraints import satisfies

__all__ = ["Selection", "Unplaced", "exhausted_resources", "group_ask", "network_mode", "select_node"]

_CLASS_INELIGIBLE: Final = "computed class ineligible"
_MAX_ALLOCS: Final = "max allocation exceeded"
_MISSING_NETWORK: Final = "missing network"
# Canonical defaults of what a task and a group ask for.
_DEFAULT_CPU: Final = 100
_DEFAULT_MEMORY_MB: Final = 300
_DEFAULT_DISK_MB: Final = 300
_ESCAPING_PREFIXES: Final = ("${unique.", "${node.unique.", "${attr.unique.", "${meta.unique.")
# Nomad keeps the five best scored nodes (MaxRetainedNodeScores).
_RETAINED_SCORES: Final = 5
_BIN_PACKING_MAX_FIT: Final = 18.0
# What ranking costs per node looked at, for AllocationTime (ns): a deterministic stand-in for
# the scheduler's wall-clock time.
_ALLOCATION_TIME_NS: Final = (12_000, 3_000)


@frozen
class Selection:
    """The node chosen (None: the placement failed), the AllocMetric, and what the walk learnt of
    the node classes (empty when a constraint escaped them)."""

    node: SimNode | None
    metric: dict[str, Any]
    class_eligibility: dict[str, bool]
    escaped: bool


def _escapes(constraint: dict[str, Any]) -> bool:
    targets = (str(constraint.get("LTarget") or ""), str(constraint.get("RTarget") or ""))
    return any(target.startswith(_ESCAPING_PREFIXES) for target in targets)


def _text(constraint: dict[str, Any]) -> str:
    """Go's Constraint.String."""
    parts = (constraint.get(side) or "" for side in ("LTarget", "Operand", "RTarget"))
    return " ".join(str(part) for part in parts)


class _Feasibility:
    """One level's (the job's, or the group's) constraints, with the classes they settled; at the
    group's, its network's mode too (Nomad's task group checkers)."""

    def __init__(self, constraints: list[dict[str, Any]], network: str = "host") -> None:
        self.constraints = constraints
        self.network = network
        self.escaped = any(_escapes(c) for c in constraints)
        self.classes: dict[str, bool] = {}

    def reason(self, node: SimNode) -> str:
        """Why the node is filtered; "" if it passes."""
        known = self.classes.get(node.computed_class)
        if known is False:
            return _CLASS_INELIGIBLE
        if known is True:
            return ""
        failed = next((c for c in self.constraints if not satisfies(node, (c,))), None)
        reason = _text(failed) if failed is not None else ""
        if not reason and not _has_network(node, self.network):
            reason = _MISSING_NETWORK
        if not self.escaped:
            self.classes[node.computed_class] = not reason
        return reason


def group_ask(group: dict[str, Any]) -> Ask:
    """What one allocation of the group asks of a node: its tasks' CPU and memory (MemoryMB, the
    reservation; MemoryMaxMB is a ceiling), and its ephemeral disk."""
    tasks = group.get("Tasks") or [{}]
    cpu = sum(int((t.get("Resources") or {}).get("CPU") or _DEFAULT_CPU) for t in tasks)
    memory = sum(int((t.get("Resources") or {}).get("MemoryMB") or _DEFAULT_MEMORY_MB) for t in tasks)
    disk = int((group.get("EphemeralDisk") or {}).get("SizeMB") or _DEFAULT_DISK_MB)
    return Ask(cpu, memory, disk)


def network_mode(group: dict[str, Any]) -> str:
    """The group network's mode ("host" when it has none or leaves it empty)."""
    networks = group.get("Networks") or [{}]
    return str(networks[0].get("Mode") or "host")


def _has_network(node: SimNode, mode: str) -> bool:
    """Nomad's NetworkChecker: "none" needs nothing; "host" and "bridge" every simulated node
    fingerprints (a bridge's CNI plugins are the implicit constraints' business); "cni/<name>"
    only a node with that CNI network."""
    if mode in ("none", "host", "bridge"):
        return True
    return mode.startswith("cni/") and mode.removeprefix("cni/") in node.size.cni_networks


def _metric(pool: list[SimNode], node_pool: str) -> dict[str, Any]:
    available: dict[str, int] = {}
    for node in pool:
        available[node.datacenter] = available.get(node.datacenter, 0) + 1
    return {
        "AllocationTime": _ALLOCATION_TIME_NS[0] + _ALLOCATION_TIME_NS[1] * len(pool),
        "ClassExhausted": None,
        "ClassFiltered": None,
        "CoalescedFailures": 0,
        "ConstraintFiltered": None,
        "DimensionExhausted": None,
        "NodePool": node_pool,
        "NodesAvailable": available,
        "NodesEvaluated": len(pool),
        "NodesExhausted": 0,
        "NodesFiltered": 0,
        "NodesInPool": len(pool),
        "QuotaExhausted": None,
        "ResourcesExhausted": None,
        "ScoreMetaData": None,
        "Scores": None,
    }


def _count(metric: dict[str, Any], field: str, key: str) -> None:
    counts = metric[field] = metric[field] or {}
    counts[key] = counts.get(key, 0) + 1


def select_node(
    state: ClusterState,
    job: SimJob,
    group: dict[str, Any],
    previous: SimAlloc | None,
) -> Selection:
    """Walk the nodes for one allocation of ``group``, rank a few feasible ones, take the best."""
    job_level = _Feasibility(list(job.spec.get("Constraints") or []))
    group_constraints = list(group.get("Constraints") or [])
    for task in group.get("Tasks") or []:
        group_constraints += task.get("Constraints") or []
    group_level = _Feasibility(group_constraints, network_mode(group))
    pool = [
        n
        for n in state.nodes.values()
        if n.status == "ready" and n.eligibility == "eligible" and n.drain_strategy is None
    ]
    metric = _metric(pool, str(job.spec.get("NodePool") or "default"))
    capacity = state.config.node_capacity
    ask = group_ask(group)
    candidates = []
    for node in pool:
        reason = job_level.reason(node) or group_level.reason(node)
        if reason:
            metric["NodesFiltered"] += 1
            _count(metric, "ConstraintFiltered", reason)
            continue
        dimension = (
            _MAX_ALLOCS
            if len(state.live_allocs_by_node.get(node.id, ())) >= capacity
            else (state.usage.used(node.id) + ask).exhausted(node.size)
        )
        if dimension:
            metric["NodesExhausted"] += 1
            _count(metric, "DimensionExhausted", dimension)
        else:
            candidates.append(node)
    escaped = job_level.escaped or group_level.escaped
    classes = {} if escaped else {**group_level.classes, **_ineligible(job_level.classes)}
    if previous is not None and len(candidates) > 1:
        candidates = [n for n in candidates if n.id != previous.node_id] or candidates
    if not candidates:
        return Selection(None, metric, classes, escaped)
    limit = 2
    if job.type != "batch":
        limit = max(limit, math.ceil(math.log2(len(state.nodes))))
    looked_at = state.rng.sample(candidates, min(limit, len(candidates)))
    per_node: dict[str, int] = {}
    for alloc in state.allocs_by_job.get((job.namespace, job.id), {}).values():
        if not alloc.terminal:
            per_node[alloc.node_id] = per_node.get(alloc.node_id, 0) + 1
    spread = state.config.scheduler_algorithm == "spread"
    lighter_first = 1 if spread else -1
    chosen = min(
        looked_at,
        key=lambda n: (per_node.get(n.id, 0), lighter_first * len(state.live_allocs_by_node.get(n.id, ()))),
    )
    scores = [
        _scores(state, n, ask, group, per_node.get(n.id, 0), previous, spread=spread) for n in looked_at
    ]
    scores.sort(key=lambda s: -float(s["NormScore"]))
    metric["ScoreMetaData"] = scores[:_RETAINED_SCORES]
    return Selection(chosen, metric, classes, escaped)


def _ineligible(classes: dict[str, bool]) -> dict[str, bool]:
    # A class the job's constraints exclude is ineligible whatever its groups say.
    return {c: False for c, eligible in classes.items() if not eligible}


def _scores(
    state: ClusterState,
    node: SimNode,
    ask: Ask,
    group: dict[str, Any],
    collisions: int,
    previous: SimAlloc | None,
    *,
    spread: bool,
) -> dict[str, Any]:
    """One ranked node's NodeScoreMeta: the binpack fit of the node with this allocation on it,
    job anti-affinity, the reschedule penalty, and their mean over the scorers that applied."""
    proposed = state.usage.used(node.id) + ask
    free_cpu = max(0.0, 1.0 - proposed.cpu / node.size.cpu_mhz)
    free_memory = max(0.0, 1.0 - proposed.memory_mb / node.size.memory_mb)
    total = 10**free_cpu + 10**free_memory
    fit = (total - 2.0 if spread else 20.0 - total) / _BIN_PACKING_MAX_FIT
    count = group.get("Count")
    desired = max(int(count) if count is not None else 1, 1)
    anti_affinity = -(collisions + 1) / desired if collisions else 0.0
    penalty = -1.0 if previous is not None and previous.node_id == node.id else 0.0
    applied = [fit] + ([anti_affinity] if collisions else []) + ([penalty] if penalty else [])
    return {
        "NodeID": node.id,
        "NormScore": sum(applied) / len(applied),
        "Scores": {
            "binpack": fit,
            "job-anti-affinity": anti_affinity,
            "node-affinity": 0.0,
            "node-reschedule-penalty": penalty,
        },
    }


def exhausted_resources(metric: dict[str, Any], group: dict[str, Any]) -> None:
    """Nomad's ExhaustResources: once a dimension was exhausted, what each task asked for of it."""
    dimensions = metric["DimensionExhausted"]
    if not dimensions:
        return
    exhausted = metric["ResourcesExhausted"] = metric["ResourcesExhausted"] or {}
    for task in group.get("Tasks") or []:
        asked = task.get("Resources") or {}
        resources = exhausted.setdefault(str(task.get("Name")), dict(EMPTY_RESOURCES))
        if dimensions.get("memory"):
            resources["MemoryMB"] += int(asked.get("MemoryMB") or 300)
        if dimensions.get("cpu"):
            resources["CPU"] += int(asked.get("CPU") or 100)


@define
class Unplaced:
    """What one evaluation's plan could not place: each failed group's AllocMetric and count, and
    what the node walks learnt of the node classes."""

    failed: dict[str, dict[str, Any]] = field(factory=dict)
    counts: dict[str, int] = field(factory=dict)
    class_eligibility: dict[str, bool] = field(factory=dict)
    escaped: bool = False

    def fail(self, group: str, spec: dict[str, Any], selection: Selection) -> None:
        """The group's first failed placement: its metric stands for the group's later ones."""
        exhausted_resources(selection.metric, spec)
        self.failed[group] = selection.metric
        self.counts[group] = 1
        self.escaped = self.escaped or selection.escaped
        for node_class, eligible in selection.class_eligibility.items():
            self.class_eligibility[node_class] = self.class_eligibility.get(node_class, False) or eligible

    def coalesce(self, group: str, spec: dict[str, Any]) -> None:
        """Another placement of a group that failed once: not tried again (Nomad's
        CoalescedFailures)."""
        metric = self.failed[group]
        metric["CoalescedFailures"] += 1
        exhausted_resources(metric, spec)
        self.counts[group] += 1

    def queued(self, job: SimJob | None) -> dict[str, int]:
        """QueuedAllocations: every group of the job, with what was left unplaced."""
        if job is None:
            return {}
        return {str(g.get("Name")): self.counts.get(str(g.get("Name")), 0) for g in job.task_groups}
