"""Typed models of what the supervisor reads from Nomad.

Only the fields we use are modelled; every other key Nomad sends is ignored when decoding. Each
field has a default because Nomad omits zero-valued fields of Allocation, Evaluation and ports, so a
missing key means the zero value. Attribute names are Nomad's keys in snake case (``EvalID`` is
``eval_id``); unit suffixes say how Nomad encodes a number: ``_ns`` for Unix nanoseconds and
``time.Duration``, ``_s`` for Unix seconds. RFC 3339 times are aware ``datetime`` objects, and Nomad's
zero time (``0001-01-01T00:00:00Z``) is ``None``. An allocation keeps Nomad's whole object in
``raw``: what the pool reads of every event is decoded at once, everything else when first read.

The models are frozen but not slotted: a frozen slotted class sets each field through
``object.__setattr__``, a frozen dict class writes its ``__dict__``, and the event stream builds
several of them for every event.

``decode.py`` turns Nomad's JSON into these classes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from typing import Any, Final, Generic, TypeAlias, TypeVar, cast, overload

from attrs import field, frozen

__all__ = [
    "EVENT_TYPES_NODE_ELIGIBILITY",
    "AllocListStub",
    "AllocStopResponse",
    "AllocatedResources",
    "Allocation",
    "DesiredTransition",
    "DrainStrategy",
    "Evaluation",
    "Event",
    "EventBatch",
    "EventPayload",
    "Job",
    "JobDeregisterResponse",
    "JobListStub",
    "JobRegisterResponse",
    "Node",
    "NodeEvent",
    "NodeListStub",
    "NodeUpdateResponse",
    "PortMapping",
    "RescheduleEvent",
    "RescheduleTracker",
    "SharedResources",
    "Task",
    "TaskEvent",
    "TaskGroup",
    "TaskState",
]

_T = TypeVar("_T")

# Changing eligibility is emitted as NodeDrain up to Nomad 2.0.0 and as NodeEligibility from 2.0.1.
EVENT_TYPES_NODE_ELIGIBILITY: Final = frozenset({"NodeDrain", "NodeEligibility"})


def _empty_dict() -> dict[str, Any]:
    return {}


# How a part kept raw is decoded on first read: decode.py, which sits above these models, hands
# down its decoder with use_decoder() when it is imported (supervisor.nomad imports it).
_decoder: Callable[[Any, Any, str], Any] | None = None


def use_decoder(decoder: Callable[[Any, Any, str], Any]) -> None:
    global _decoder
    _decoder = decoder


def _decode(value: Any, tp: Any, key: str) -> Any:
    """``value``, found under ``key`` in a part kept raw, as ``tp``."""
    if _decoder is None:
        raise RuntimeError("supervisor.nomad.decode was never imported")
    return _decoder(value, tp, key)


class _Raw(Generic[_T]):
    """An attribute decoded from the model's ``raw`` object (Nomad's whole object) when read."""

    def __init__(self, key: str, tp: type[_T]) -> None:
        self.key = key
        self.tp = tp

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> _Raw[_T]: ...

    @overload
    def __get__(self, instance: _AllocationFields, owner: type[Any]) -> _T: ...

    def __get__(self, instance: _AllocationFields | None, owner: type[Any]) -> _Raw[_T] | _T:
        if instance is None:
            return self
        return cast(_T, _decode(instance.raw.get(self.key), self.tp, self.key))


@frozen(slots=False)
class PortMapping:
    """An entry of ``AllocatedResources.Shared.Ports``: container port ``to`` is at ``host_ip:value``."""

    label: str = ""
    value: int = 0
    to: int = 0
    host_ip: str = ""


@frozen(slots=False)
class SharedResources:
    """``AllocatedResources.Shared``: the ports of the allocation's group network."""

    ports: list[PortMapping] = field(factory=list)


@frozen(slots=False)
class AllocatedResources:
    """An allocation's resources: only the shared ports are modelled."""

    shared: SharedResources = field(factory=SharedResources)


@frozen(slots=False)
class DesiredTransition:
    """Each flag is ``*bool`` in Nomad: absent or null reads as False."""

    migrate: bool = False
    reschedule: bool = False
    force_reschedule: bool = False
    no_shutdown_delay: bool = False


@frozen(slots=False)
class TaskEvent:
    """One of a task's last 10 events (``Started``, ``Terminated`` with its exit, ...)."""

    type: str = ""
    time_ns: int = 0
    message: str = ""
    display_message: str = ""
    details: dict[str, str] = field(factory=_empty_dict)
    fails_task: bool = False
    exit_code: int = 0
    signal: int = 0
    kill_reason: str = ""
    driver_error: str = ""
    restart_reason: str = ""
    # A Restarting event's wait before the task starts again.
    start_delay_ns: int = 0


@frozen(slots=False)
class TaskState:
    """A task's state within an allocation, with its last events."""

    state: str = ""
    failed: bool = False
    restarts: int = 0
    last_restart: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    events: list[TaskEvent] = field(factory=list)


@frozen(slots=False)
class RescheduleEvent:
    """One reschedule of a failed allocation."""

    reschedule_time_ns: int = 0
    prev_alloc_id: str = ""
    prev_node_id: str = ""
    delay_ns: int = 0


@frozen(slots=False)
class RescheduleTracker:
    """The reschedules an allocation's chain went through."""

    events: list[RescheduleEvent] = field(factory=list)
    last_reschedule: str = ""


@frozen(slots=False)
class _AllocationFields:
    """What the full Allocation and its list stub have in common.

    The fields the pool reads of every allocation event are decoded at once. ``raw`` is Nomad's
    whole object, and each of the others is decoded from it on first read: most are never read,
    and task states and the reschedule tracker are most of an allocation's bytes.
    """

    id: str = ""
    job_id: str = ""
    node_id: str = ""
    desired_status: str = ""
    desired_description: str = ""
    client_status: str = ""
    next_allocation: str = ""
    allocated_resources: AllocatedResources | None = None
    create_index: int = 0
    modify_index: int = 0
    raw: dict[str, Any] = field(factory=_empty_dict, repr=False, metadata={"raw": True})

    namespace = _Raw("Namespace", str)
    eval_id = _Raw("EvalID", str)
    name = _Raw("Name", str)
    node_name = _Raw("NodeName", str)
    task_group = _Raw("TaskGroup", str)
    client_description = _Raw("ClientDescription", str)
    followup_eval_id = _Raw("FollowupEvalID", str)
    create_time_ns = _Raw("CreateTime", int)
    modify_time_ns = _Raw("ModifyTime", int)

    @cached_property
    def desired_transition(self) -> DesiredTransition:
        return cast(
            DesiredTransition,
            _decode(self.raw.get("DesiredTransition"), DesiredTransition, "DesiredTransition"),
        )

    @cached_property
    def task_states(self) -> dict[str, TaskState]:
        states = _decode(self.raw.get("TaskStates"), dict[str, TaskState], "TaskStates")
        return cast(dict[str, TaskState], states)

    @cached_property
    def reschedule_tracker(self) -> RescheduleTracker | None:
        tracker = _decode(self.raw.get("RescheduleTracker"), RescheduleTracker | None, "RescheduleTracker")
        return cast(RescheduleTracker | None, tracker)

    @property
    def received(self) -> bool:
        """Its agent has reported the allocation: Nomad holds no task states for it until then
        (a list stub asked without them never says)."""
        return bool(self.raw.get("TaskStates"))

    @property
    def client_terminal(self) -> bool:
        """The tasks have ended: complete, failed or lost."""
        return self.client_status in ("complete", "failed", "lost")

    @property
    def server_terminal(self) -> bool:
        """The scheduler wants the allocation gone: DesiredStatus stop or evict."""
        return self.desired_status in ("stop", "evict")

    @property
    def ports(self) -> list[PortMapping]:
        if self.allocated_resources is None:
            return []
        return self.allocated_resources.shared.ports


@frozen(slots=False)
class Allocation(_AllocationFields):
    """``GET /v1/allocation/:id`` and Allocation event payloads (zero fields omitted by Nomad)."""

    previous_allocation = _Raw("PreviousAllocation", str)
    alloc_modify_index = _Raw("AllocModifyIndex", int)


@frozen(slots=False)
class AllocListStub(_AllocationFields):
    """An entry of ``GET /v1/allocations`` or ``/v1/job/:id/allocations``; no PreviousAllocation. A
    lean one (a relist's) keeps no ``raw`` object: its fields decoded on first read are zero."""

    job_type = _Raw("JobType", str)
    job_version = _Raw("JobVersion", int)


@frozen(slots=False)
class Task:
    """A task of a job's group: its driver, config, environment and meta."""

    name: str = ""
    driver: str = ""
    config: dict[str, Any] = field(factory=_empty_dict)
    env: dict[str, str] = field(factory=_empty_dict)
    meta: dict[str, str] = field(factory=_empty_dict)


@frozen(slots=False)
class TaskGroup:
    """A group of a job: its count, meta and tasks."""

    name: str = ""
    count: int = 0
    meta: dict[str, str] = field(factory=_empty_dict)
    tasks: list[Task] = field(factory=list)


@frozen(slots=False)
class Job:
    """``GET /v1/job/:id`` and Job event payloads; ``deleted`` is the event's ``Deleted:true`` (purge, GC)."""

    id: str = ""
    name: str = ""
    namespace: str = ""
    type: str = ""
    status: str = ""
    status_description: str = ""
    stop: bool = False
    version: int = 0
    priority: int = 0
    datacenters: list[str] = field(factory=list)
    meta: dict[str, str] = field(factory=_empty_dict)
    # The supervisor never reads a job's groups from Nomad: they stay raw JSON until first read.
    raw_task_groups: list[dict[str, Any]] = field(factory=list, metadata={"key": "TaskGroups"})
    create_index: int = 0
    modify_index: int = 0
    job_modify_index: int = 0
    submit_time_ns: int = 0

    @cached_property
    def task_groups(self) -> list[TaskGroup]:
        """The job's groups, decoded on first read."""
        return cast(list[TaskGroup], _decode(self.raw_task_groups, list[TaskGroup], "TaskGroups"))

    def group(self, name: str) -> TaskGroup | None:
        """The task group called ``name``, if the job has one."""
        return next((g for g in self.task_groups if g.name == name), None)


@frozen(slots=False)
class JobListStub:
    """An entry of ``GET /v1/jobs``; ``meta`` only with ``meta=true``."""

    id: str = ""
    parent_id: str = ""
    name: str = ""
    namespace: str = ""
    type: str = ""
    priority: int = 0
    stop: bool = False
    status: str = ""
    status_description: str = ""
    datacenters: list[str] = field(factory=list)
    meta: dict[str, str] = field(factory=_empty_dict)
    create_index: int = 0
    modify_index: int = 0
    job_modify_index: int = 0
    submit_time_ns: int = 0


@frozen(slots=False)
class DrainStrategy:
    """``deadline_ns`` > 0: timed drain, 0: no deadline, -1: force; ``force_deadline`` only when timed."""

    deadline_ns: int = 0
    ignore_system_jobs: bool = False
    force_deadline: datetime | None = None
    started_at: datetime | None = None


@frozen(slots=False)
class NodeEvent:
    """One of the last 10 events of a node ("Node registered", "Node re-registered", ...)."""

    message: str = ""
    subsystem: str = ""
    create_index: int = 0


@frozen(slots=False)
class _NodeFields:
    id: str = ""
    name: str = ""
    datacenter: str = ""
    node_pool: str = ""
    node_class: str = ""
    status: str = ""
    status_description: str = ""
    scheduling_eligibility: str = ""
    drain: bool = False
    create_index: int = 0
    modify_index: int = 0

    @property
    def eligible(self) -> bool:
        return self.scheduling_eligibility == "eligible"


@frozen(slots=False)
class Node(_NodeFields):
    """``GET /v1/node/:id`` and Node event payloads; ``drain`` is Nomad's ``DrainStrategy != nil``."""

    http_addr: str = ""
    tls_enabled: bool = False
    status_updated_at_s: int = 0
    drain_strategy: DrainStrategy | None = None
    attributes: dict[str, str] = field(factory=_empty_dict)
    meta: dict[str, str] = field(factory=_empty_dict)
    events: list[NodeEvent] = field(factory=list)


@frozen(slots=False)
class NodeListStub(_NodeFields):
    """An entry of ``GET /v1/nodes``."""

    address: str = ""
    version: str = ""


@frozen(slots=False)
class Evaluation:
    """``GET /v1/evaluation/:id`` and Evaluation event payloads (zero fields omitted by Nomad)."""

    id: str = ""
    namespace: str = ""
    priority: int = 0
    type: str = ""
    triggered_by: str = ""
    job_id: str = ""
    node_id: str = ""
    deployment_id: str = ""
    status: str = ""
    status_description: str = ""
    next_eval: str = ""
    previous_eval: str = ""
    blocked_eval: str = ""
    failed_tg_allocs: dict[str, Any] = field(factory=_empty_dict)
    create_index: int = 0
    modify_index: int = 0
    create_time_ns: int = 0
    modify_time_ns: int = 0


EventPayload: TypeAlias = Allocation | Job | Node | Evaluation | dict[str, Any]


@frozen(slots=False)
class Event:
    """One event; ``payload`` is typed for the Allocation, Job, Node and Evaluation topics, raw otherwise."""

    topic: str
    type: str
    key: str
    namespace: str
    filter_keys: list[str]
    index: int
    payload: EventPayload
    deleted: bool = False


@frozen(slots=False)
class EventBatch:
    """All events of one Raft index that passed the subscription's filter."""

    index: int
    events: list[Event]


@frozen(slots=False)
class JobRegisterResponse:
    """Nomad's answer to a job registration: the evaluation and the index of the write."""

    eval_id: str = ""
    eval_create_index: int = 0
    job_modify_index: int = 0
    warnings: str = ""
    index: int = 0


@frozen(slots=False)
class JobDeregisterResponse:
    """For an unknown job Nomad answers 200 with an empty ``eval_id`` and ``index`` 0."""

    eval_id: str = ""
    eval_create_index: int = 0
    job_modify_index: int = 0
    index: int = 0


@frozen(slots=False)
class NodeUpdateResponse:
    """The answer to a drain or eligibility change."""

    node_modify_index: int = 0
    eval_ids: list[str] = field(factory=list)
    eval_create_index: int = 0
    index: int = 0


@frozen(slots=False)
class AllocStopResponse:
    """Nomad's answer to an allocation stop: the evaluation and the index of the write."""

    eval_id: str = ""
    index: int = 0
