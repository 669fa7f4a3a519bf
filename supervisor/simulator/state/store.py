"""The simulated cluster's replicated state: tables, the Raft index, and the events each write emits.

Every change happens inside ``write(message_type)``: the objects touched in it get the next Raft
index, job statuses are recomputed by Nomad's rules (``getJobStatus``), and one batch of events is
published, every event carrying the write's message type whatever its topic (nomad-api.md §1.5).
Objects touched twice in one write yield one event (go-memdb coalesces them). Deleting allocations
and evaluations (GC) emits nothing, as in Nomad; nor does any write of a Variable (Nomad has no
Variables topic), though it takes a Raft index as every write does.

Code here is synchronous and does no I/O; time comes from ``clock`` and delayed work is handed to
``timers``, so the trio layer decides how time passes.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable, ItemsView, Iterator, ValuesView
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from typing import Any, Final, Protocol

import attrs
import orjson
from attrs import define, field, frozen

from ..config import SimConfig
from .encode import alloc_full, eval_full, job_full, node_full, register_fingerprint, rfc3339
from .images import ImageRegistry
from .node_usage import NodeUsage
from .objects import SimAlloc, SimEval, SimJob, SimNode, SimVariable

__all__ = ["ClusterState", "PublishedBatch", "PublishedEvent", "Timers", "Write"]

JobKey = tuple[str, str]


class Timers(Protocol):
    """Deferred calls, on the trio clock of the running cluster."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` after ``delay`` seconds; returns a function that cancels it."""
        ...


@frozen
class PublishedEvent:
    """One event of a write, encoded once for every subscriber."""

    topic: str
    key: str
    namespace: str
    filter_keys: tuple[str, ...]
    data: bytes


@frozen
class PublishedBatch:
    """Every event of one write, at its Raft index."""

    index: int
    events: tuple[PublishedEvent, ...]


@define
class Write:
    """The objects one Raft message changes."""

    message_type: str
    touched: dict[int, tuple[str, Any]] = field(factory=dict)
    deleted_jobs: list[SimJob] = field(factory=list)
    # Variables written in this write, and whether one was deleted: they move the variables table's
    # index but emit no event.
    variables: dict[int, SimVariable] = field(factory=dict)
    variable_deleted: bool = False
    # A Raft message takes an index even when it changes nothing (a Variables apply that is a no-op).
    applied: bool = False

    def touch(self, obj: SimAlloc | SimJob | SimEval | SimNode) -> None:
        """Mark an object changed in this write: it is emitted and its ModifyIndex set."""
        self.touched[id(obj)] = (_TOPICS[type(obj)], obj)

    def delete_job(self, job: SimJob) -> None:
        """Delete a job in this write (its Job event carries ``Deleted: true``)."""
        self.deleted_jobs.append(job)
        self.touched.pop(id(job), None)

    def touch_variable(self, variable: SimVariable) -> None:
        """Mark a variable written in this write: its CreateIndex (if new) and ModifyIndex are set."""
        self.variables[id(variable)] = variable


_TOPICS: Final[dict[type, str]] = {
    SimAlloc: "Allocation",
    SimJob: "Job",
    SimEval: "Evaluation",
    SimNode: "Node",
}
_TABLES: Final = {"Allocation": "allocs", "Job": "jobs", "Evaluation": "evals", "Node": "nodes"}
_UNRESPONSIVE: Final = frozenset({"down", "disconnected"})
# Job versions Nomad keeps (JobTrackedVersions).
_TRACKED_VERSIONS: Final = 6


class ClusterState:
    """One owner of every table; the API, scheduler and agents call its methods."""

    def __init__(self, config: SimConfig, timers: Timers, clock: Callable[[], float]) -> None:
        self.config = config
        self.timers = timers
        self.clock = clock
        self.rng = random.Random(config.seed)
        # The keyring's active key, which signs every placed allocation's workload identities.
        key = hashlib.blake2b(f"keyring {config.seed}".encode(), digest_size=16).digest()
        self.signing_key_id = str(uuid.UUID(bytes=key, version=4))
        self._epoch_ns = time.time_ns()
        self._clock_start = 0.0
        self.index = 1
        self.table_index = {"jobs": 1, "allocs": 1, "evals": 1, "nodes": 1, "variables": 1}
        self.jobs: dict[JobKey, SimJob] = {}
        self.allocs: dict[str, SimAlloc] = {}
        self.evals: dict[str, SimEval] = {}
        self.nodes: dict[str, SimNode] = {}
        # Nomad Variables by (namespace, path): Raft state, so they outlive any server's restart.
        self.variables: dict[tuple[str, str], SimVariable] = {}
        self.allocs_by_job: dict[JobKey, dict[str, SimAlloc]] = {}
        self.live_allocs_by_node: dict[str, set[str]] = {}
        # What the allocations that are not terminal hold of each node (placement's bin packing).
        self.usage = NodeUsage()
        # The registry's tags and the images each node pulled.
        self.images = ImageRegistry()
        self.open_evals_by_job: dict[JobKey, set[str]] = {}
        self.job_dead_since: dict[JobKey, float] = {}
        self.registrations: list[dict[str, Any]] = []
        self.subscribers: list[Callable[[PublishedBatch], None]] = []
        # Called after each write with the write, for the agents and the exec layer.
        self.after_write: list[Callable[[Write], None]] = []
        self.version_counter = 0

    # -- reads --------------------------------------------------------------------------------------

    def job(self, key: JobKey) -> SimJob | None:
        """The job with this (namespace, ID), if any."""
        return self.jobs.get(key)

    def alloc(self, alloc_id: str) -> SimAlloc | None:
        """The allocation with this ID, if any."""
        return self.allocs.get(alloc_id)

    def evaluation(self, eval_id: str) -> SimEval | None:
        """The evaluation with this ID, if any."""
        return self.evals.get(eval_id)

    def node(self, node_id: str) -> SimNode | None:
        """The node with this ID, if any."""
        return self.nodes.get(node_id)

    def variable(self, key: tuple[str, str]) -> SimVariable | None:
        """The variable at this (namespace, path), if any."""
        return self.variables.get(key)

    def every_job(self) -> ItemsView[JobKey, SimJob]:
        """Every job by its (namespace, ID), in the order they were added."""
        return self.jobs.items()

    def every_alloc(self) -> ValuesView[SimAlloc]:
        """Every allocation, in the order they were added."""
        return self.allocs.values()

    def every_evaluation(self) -> ValuesView[SimEval]:
        """Every evaluation, in the order they were added."""
        return self.evals.values()

    def every_node(self) -> ValuesView[SimNode]:
        """Every node, in the order they registered."""
        return self.nodes.values()

    def every_variable(self) -> ItemsView[tuple[str, str], SimVariable]:
        """Every variable by its (namespace, path), in the order they were written."""
        return self.variables.items()

    def job_allocs(self, key: JobKey) -> ValuesView[SimAlloc]:
        """The job's allocations, in the order they were placed."""
        return self.allocs_by_job.get(key, {}).values()

    def live_alloc_ids(self, node_id: str) -> AbstractSet[str]:
        """The IDs of the node's allocations whose client has not finished them."""
        return self.live_allocs_by_node.get(node_id, frozenset())

    def open_eval_ids(self, key: JobKey) -> AbstractSet[str]:
        """The IDs of the job's evaluations that are not terminal."""
        return self.open_evals_by_job.get(key, frozenset())

    # -- listeners and timers -------------------------------------------------------------------

    def subscribe(self, subscriber: Callable[[PublishedBatch], None]) -> None:
        """Hand ``subscriber`` every write's batch of events from now on."""
        self.subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Callable[[PublishedBatch], None]) -> None:
        """Stop handing ``subscriber`` the writes' events."""
        self.subscribers.remove(subscriber)

    def call_after_each_write(self, hook: Callable[[Write], None]) -> None:
        """Call ``hook`` with each write once its events are published."""
        self.after_write.append(hook)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` after ``delay`` seconds on the cluster's clock; returns its cancel."""
        return self.timers.call_later(delay, callback)

    # -- time and identity ----------------------------------------------------------------------

    def start_clock(self) -> None:
        """Time 0 of the cluster: called once it runs (trio's clock exists only inside a run)."""
        self._epoch_ns = time.time_ns() if self.config.epoch_ns is None else self.config.epoch_ns
        self._clock_start = self.clock()

    def now(self) -> float:
        """Seconds since the cluster started, on trio's clock."""
        return self.clock() - self._clock_start

    def now_ns(self) -> int:
        """Now as Unix nanoseconds."""
        return self._epoch_ns + round(self.now() * 1e9)

    def new_id(self) -> str:
        """A UUID from the seeded random generator."""
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    # -- writes ---------------------------------------------------------------------------------

    @contextmanager
    def write(self, message_type: str) -> Iterator[Write]:
        """One Raft write: every object touched in it is emitted with ``message_type``, at one index."""
        tx = Write(message_type)
        yield tx
        if tx.touched or tx.deleted_jobs or tx.variables or tx.variable_deleted or tx.applied:
            self._commit(tx)

    def _commit(self, tx: Write) -> None:
        self.index += 1
        index, now_ns = self.index, self.now_ns()
        self._update_job_statuses(tx)
        client_update = tx.message_type == "AllocationUpdated"
        events = []
        for topic, obj in tx.touched.values():
            if obj.create_index == 0:
                obj.create_index = index
            obj.modify_index = index
            if isinstance(obj, SimAlloc | SimEval):
                obj.modify_time = now_ns
                if obj.create_time == 0:
                    obj.create_time = now_ns
            if isinstance(obj, SimNode):
                self._node_written(obj, index, now_ns)
            elif client_update and isinstance(obj, SimAlloc) and (node := self.nodes.get(obj.node_id)):
                # Nomad notes it on the node row, with no Node event of its own here.
                node.last_alloc_update_index = index
            self.table_index[_TABLES[topic]] = index
            events.append(self._event(tx.message_type, topic, obj, index))
        for job in tx.deleted_jobs:
            job.modify_index = index
            self.table_index["jobs"] = index
            events.append(self._job_event(tx.message_type, job, index, deleted=True))
        for variable in tx.variables.values():
            variable.create_index = variable.create_index or index
            variable.modify_index = index
        if tx.variables or tx.variable_deleted:
            self.table_index["variables"] = index
        batch = PublishedBatch(index, tuple(events))
        for subscriber in list(self.subscribers):
            subscriber(batch)
        for hook in list(self.after_write):
            hook(tx)

    def _event(self, message_type: str, topic: str, obj: Any, index: int) -> PublishedEvent:
        if isinstance(obj, SimJob):
            return self._job_event(message_type, obj, index, deleted=False)
        if isinstance(obj, SimAlloc | SimEval):
            # Allocations and evaluations carry [JobID, DeploymentID] as filter keys.
            body = alloc_full(obj, with_job=False) if isinstance(obj, SimAlloc) else eval_full(obj)
            return self._encode(
                message_type, topic, obj.id, obj.namespace, (obj.job_id, ""), index, {topic: body}
            )
        return self._encode(message_type, topic, obj.id, "", (), index, {"Node": node_full(obj)})

    def _node_written(self, node: SimNode, index: int, now_ns: int) -> None:
        if node.node_resources is None:
            if node.size != self.config.host_size:
                node.resize(self.config.host_size)
            register_fingerprint(node, self.config.dynamic_port_range, rfc3339(now_ns))
            # The default capacity stands for no limit, as a client without max_allocs has.
            capacity = self.config.node_capacity
            node.max_allocs = 0 if capacity == attrs.fields(SimConfig).node_capacity.default else capacity
        if node.status in _UNRESPONSIVE and node.committed_status not in _UNRESPONSIVE:
            node.last_missed_heartbeat_index = index
        elif node.status == "ready" and node.committed_status != "ready":
            node.last_missed_heartbeat_index = 0
        node.committed_status = node.status

    def _job_event(self, message_type: str, job: SimJob, index: int, *, deleted: bool) -> PublishedEvent:
        full = job_full(job, self.config.region)
        if not deleted:
            # Each version as it last stood: the current one follows the job's every write.
            job.versions[job.version] = full
            for old in sorted(job.versions)[:-_TRACKED_VERSIONS]:
                del job.versions[old]
        payload: dict[str, Any] = {"Job": full}
        if deleted:
            payload["Deleted"] = True
        return self._encode(message_type, "Job", job.id, job.namespace, (), index, payload)

    @staticmethod
    def _encode(
        message_type: str,
        topic: str,
        key: str,
        namespace: str,
        filter_keys: tuple[str, ...],
        index: int,
        payload: dict[str, Any],
    ) -> PublishedEvent:
        event = {
            "Topic": topic,
            "Type": message_type,
            "Key": key,
            "Namespace": namespace,
            "FilterKeys": list(filter_keys) or None,
            "Index": index,
            "Payload": payload,
        }
        return PublishedEvent(topic, key, namespace, filter_keys, orjson.dumps(event))

    # -- job status (getJobStatus) --------------------------------------------------------------

    def job_status(self, job: SimJob) -> str:
        """The job's status by Nomad's getJobStatus rules."""
        key = (job.namespace, job.id)
        if job.type == "system":
            return "dead" if job.stop else "running"
        if any(not a.terminal for a in self.allocs_by_job.get(key, {}).values()):
            return "running"
        if self.open_evals_by_job.get(key):
            return "pending"
        return "dead" if job.has_evals or job.stop else "pending"

    def _update_job_statuses(self, tx: Write) -> None:
        keys = set()
        for _, obj in list(tx.touched.values()):
            if isinstance(obj, SimAlloc | SimEval):
                keys.add((obj.namespace, obj.job_id))
            elif isinstance(obj, SimJob):
                keys.add((obj.namespace, obj.id))
        for key in keys:
            job = self.jobs.get(key)
            if job is None:
                continue
            status = self.job_status(job)
            if status != job.status:
                job.status = status
                tx.touch(job)
            if status == "dead":
                self.job_dead_since.setdefault(key, self.now())
            else:
                self.job_dead_since.pop(key, None)

    # -- table maintenance ----------------------------------------------------------------------

    def add_alloc(self, tx: Write, alloc: SimAlloc) -> None:
        """Add an allocation in this write."""
        self.allocs[alloc.id] = alloc
        self.allocs_by_job.setdefault((alloc.namespace, alloc.job_id), {})[alloc.id] = alloc
        self.live_allocs_by_node.setdefault(alloc.node_id, set()).add(alloc.id)
        self.usage.book(alloc)
        tx.touch(alloc)

    def alloc_changed(self, tx: Write, alloc: SimAlloc, **changes: Any) -> None:
        """Apply ``changes`` to ``alloc`` in ``tx``, keeping the per-node live sets right."""
        for name, value in changes.items():
            setattr(alloc, name, value)
        if (alloc.client_terminal or alloc.server_terminal) and alloc.terminal_since == 0.0:
            alloc.terminal_since = self.now() or 1e-9
        if alloc.client_terminal:
            self.live_allocs_by_node.get(alloc.node_id, set()).discard(alloc.id)
        if alloc.terminal:
            self.usage.release(alloc)
        tx.touch(alloc)

    def add_eval(self, tx: Write, evaluation: SimEval) -> None:
        """Add an evaluation in this write."""
        self.evals[evaluation.id] = evaluation
        key = (evaluation.namespace, evaluation.job_id)
        if not evaluation.terminal:
            self.open_evals_by_job.setdefault(key, set()).add(evaluation.id)
        job = self.jobs.get(key)
        if job is not None:
            job.has_evals = True
        tx.touch(evaluation)

    def eval_changed(self, tx: Write, evaluation: SimEval, **changes: Any) -> None:
        """Apply ``changes`` to the evaluation in this write."""
        for name, value in changes.items():
            setattr(evaluation, name, value)
        if evaluation.terminal:
            self.open_evals_by_job.get((evaluation.namespace, evaluation.job_id), set()).discard(
                evaluation.id
            )
        tx.touch(evaluation)

    def new_eval(self, tx: Write, job_key: JobKey, triggered_by: str, **fields: Any) -> SimEval:
        """A new evaluation of the job, added in this write; a node's evaluation notes the node's
        ModifyIndex."""
        job = self.jobs.get(job_key)
        node = self.nodes.get(fields.get("node_id", ""))
        defaults: dict[str, Any] = {
            "type": job.type if job else "batch",
            "priority": int(job.spec.get("Priority") or 50) if job else 50,
            "job_modify_index": job.job_modify_index if job else 0,
            "node_modify_index": node.modify_index if node else 0,
        }
        evaluation = SimEval(
            id=self.new_id(),
            namespace=job_key[0],
            job_id=job_key[1],
            triggered_by=triggered_by,
            **{**defaults, **fields},
        )
        self.add_eval(tx, evaluation)
        return evaluation

    def forget_job_silently(self, key: JobKey) -> None:
        """Remove a job with its allocations and evaluations, emitting nothing (the field's lost jobs)."""
        self.jobs.pop(key, None)
        self.job_dead_since.pop(key, None)
        for alloc in self.allocs_by_job.pop(key, {}).values():
            self.allocs.pop(alloc.id, None)
            self.live_allocs_by_node.get(alloc.node_id, set()).discard(alloc.id)
            self.usage.release(alloc)
        for eval_id in self.open_evals_by_job.pop(key, set()):
            self.evals.pop(eval_id, None)
        self.index += 1
        self.table_index["jobs"] = self.table_index["allocs"] = self.index

    def collect_garbage(self, *, force: bool = False) -> None:
        """Job GC (JobBatchDeregistered, Deleted:true) and silent allocation and evaluation GC;
        ``force`` (``PUT /v1/system/gc``) collects whatever qualifies, however recent."""
        now = self.now()
        job_threshold = 0.0 if force else self.config.job_gc_threshold
        alloc_threshold = 0.0 if force else self.config.alloc_gc_threshold
        expired = [
            key
            for key, since in self.job_dead_since.items()
            if now - since >= job_threshold
            and (job := self.jobs.get(key)) is not None
            and (job.stop or job.type in ("batch", "sysbatch"))
        ]
        if expired:
            with self.write("JobBatchDeregistered") as tx:
                for key in expired:
                    tx.delete_job(self.jobs.pop(key))
                    self.job_dead_since.pop(key, None)
        for key in expired:
            for alloc in self.allocs_by_job.pop(key, {}).values():
                self.allocs.pop(alloc.id, None)
        old = [
            a
            for a in self.allocs.values()
            if a.client_terminal and a.terminal_since and now - a.terminal_since >= alloc_threshold
        ]
        for alloc in old:
            self.allocs.pop(alloc.id, None)
            self.allocs_by_job.get((alloc.namespace, alloc.job_id), {}).pop(alloc.id, None)
        stale_evals = [
            e.id for e in self.evals.values() if e.terminal and (e.namespace, e.job_id) not in self.jobs
        ]
        for eval_id in stale_evals:
            self.evals.pop(eval_id, None)

    def record_registration(self, job_id: str) -> None:
        """Note a job registration for ``GET /sim/v1/state``."""
        self.registrations.append({"t": round(self.now(), 6), "job_id": job_id})

    def node_by_name(self, name: str) -> SimNode | None:
        """The node called ``name``, if any."""
        return next((n for n in self.nodes.values() if n.name == name), None)

    def time_string(self) -> str:
        """Now as RFC 3339."""
        return rfc3339(self.now_ns())
