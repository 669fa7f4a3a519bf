"""The simulated cluster's records: mutable, owned by ``ClusterState``, encoded by ``encode.py``.

Field names follow Nomad's structs; dicts hold the nested structures exactly as Nomad encodes them.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field, frozen

from .fingerprint import NODE_META, HostSize, computed_class, host_attributes, sized_attributes

__all__ = [
    "TASK_EVENT_LIMIT",
    "SimAlloc",
    "SimEval",
    "SimJob",
    "SimNode",
    "SimVariable",
    "SimVariableLock",
]

# Nomad keeps the last 10 task events and the last 10 node events.
TASK_EVENT_LIMIT = 10


@define(eq=False)
class SimNode:
    """A client node as Nomad's Node struct holds it, and its agent process."""

    id: str
    name: str
    datacenter: str
    address: str
    http_addr: str
    status: str = "initializing"
    status_description: str = ""
    status_updated_at: int = 0
    eligibility: str = "eligible"
    drain_strategy: dict[str, Any] | None = None
    last_drain: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(factory=list)
    attributes: dict[str, str] = field(factory=dict)
    meta: dict[str, str] = field(factory=lambda: dict(NODE_META))
    computed_class: str = ""
    create_index: int = 0
    modify_index: int = 0
    # Raised by a client's allocation updates, and by heartbeats missed (zero once ready again).
    last_alloc_update_index: int = 0
    last_missed_heartbeat_index: int = 0
    # The status at the node's last write, to tell a node that turned unresponsive.
    committed_status: str = ""
    # The client's max_allocs (0: no limit), and the encoded JSON (orjson.Fragment) of what it
    # registered: its resources and drivers.
    max_allocs: int = 0
    node_resources: Any = None
    drivers: Any = None
    # The agent process: down while it restarts or after it crashed.
    agent_up: bool = True
    agent_down_since: float = 0.0
    # When the agent last came back, and how often a flood of task starts crashed it since.
    back_since: float = -1e18
    flood_crashes: int = 0
    # The drain was started by the agent itself (drain_on_shutdown).
    self_drain: bool = False
    # What the host offers: CPU, memory, disk and CNI networks.
    size: HostSize = field(factory=HostSize)

    def __attrs_post_init__(self) -> None:
        # The fingerprint fills in what the registration left out.
        for key, value in host_attributes(self.name, self.address, self.http_addr, self.size).items():
            self.attributes.setdefault(key, value)
        self.computed_class = computed_class(self.datacenter, self.attributes, self.meta)

    def resize(self, size: HostSize) -> None:
        """The host is ``size``: its attributes and computed class follow (before it registers)."""
        self.size = size
        self.attributes.update(sized_attributes(size))
        self.computed_class = computed_class(self.datacenter, self.attributes, self.meta)

    def add_event(
        self, message: str, subsystem: str, timestamp: str, index: int, details: dict[str, str] | None = None
    ) -> None:
        """Append a node event, keeping the last 10 as Nomad does."""
        self.events.append(
            {
                "CreateIndex": index,
                "Details": details,
                "Message": message,
                "Subsystem": subsystem,
                "Timestamp": timestamp,
            }
        )
        del self.events[:-TASK_EVENT_LIMIT]


@define(eq=False)
class SimJob:
    """A job as Nomad's Job struct holds it."""

    namespace: str
    id: str
    spec: dict[str, Any]
    version: int = 0
    status: str = "pending"
    status_description: str = ""
    stop: bool = False
    submit_time: int = 0
    create_index: int = 0
    modify_index: int = 0
    job_modify_index: int = 0
    # Set once the job has had an evaluation: a job with evals is dead, not pending, when idle.
    has_evals: bool = False
    # The job as each tracked version last stood (Nomad keeps six), by version.
    versions: dict[int, dict[str, Any]] = field(factory=dict)
    # The job summary's Queued: what the last evaluation of each group left unplaced, and when.
    queued: dict[str, int] = field(factory=dict)
    queued_index: int = 0
    # The encoded list stub by meta flag, valid for (job modify index, newest allocation modify index).
    stub_cache: dict[bool, tuple[tuple[int, int], bytes]] = field(factory=dict)

    @property
    def type(self) -> str:
        """The job's type (``service`` when unset)."""
        return str(self.spec.get("Type") or "service")

    @property
    def task_groups(self) -> list[dict[str, Any]]:
        """The job's task groups."""
        return list(self.spec.get("TaskGroups") or [])

    def group(self, name: str) -> dict[str, Any] | None:
        """The task group called ``name``, if any."""
        return next((g for g in self.task_groups if g.get("Name") == name), None)


@define(eq=False)
class SimAlloc:
    """An allocation as Nomad's Allocation struct holds it."""

    id: str
    namespace: str
    eval_id: str
    name: str
    node_id: str
    node_name: str
    job_id: str
    job: dict[str, Any]
    job_version: int
    task_group: str
    tasks: list[str]
    host_ip: str
    ports: list[dict[str, Any]] = field(factory=list)
    cpu: int = 100
    memory_mb: int = 300
    memory_max_mb: int = 0
    # The group's ephemeral disk, and its network's mode.
    disk_mb: int = 300
    network_mode: str = "host"
    # The image each task runs, as name@digest (images.py), by task.
    images: dict[str, str] = field(factory=dict)
    desired_status: str = "run"
    desired_description: str = ""
    desired_transition: dict[str, bool] = field(factory=dict)
    client_status: str = "pending"
    client_description: str = ""
    previous_allocation: str = ""
    next_allocation: str = ""
    followup_eval_id: str = ""
    reschedule_tracker: dict[str, Any] | None = None
    task_states: dict[str, dict[str, Any]] = field(factory=dict)
    create_index: int = 0
    modify_index: int = 0
    alloc_modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0
    # Restarts within the restart policy's interval: (trio time of each restart).
    restart_times: list[float] = field(factory=list)
    # The client's own knowledge, never encoded: its agent came back to find the task's container
    # gone, and has not yet run it again.
    container_lost: bool = False
    terminal_since: float = 0.0
    # Encoded JSON (orjson.Fragment) of parts that many encodings share; Metrics, set at placement.
    allocated_resources: Any = None
    legacy_resources: Any = None
    metrics: Any = None
    # The keyring key that signed its workload identities.
    signing_key_id: str = ""
    task_states_json: tuple[int, Any] | None = None
    # Encoded list stubs by (resources, task_states), valid while modify_index is unchanged.
    stub_cache: dict[tuple[bool, bool], tuple[int, bytes]] = field(factory=dict)

    @property
    def client_terminal(self) -> bool:
        """Complete, failed or lost."""
        return self.client_status in ("complete", "failed", "lost")

    @property
    def server_terminal(self) -> bool:
        """Desired stop or evict."""
        return self.desired_status in ("stop", "evict")

    @property
    def terminal(self) -> bool:
        """Terminal on the client's or the server's side."""
        return self.client_terminal or self.server_terminal


@define(eq=False)
class SimEval:
    """An evaluation as Nomad's Evaluation struct holds it."""

    id: str
    namespace: str
    job_id: str
    type: str
    triggered_by: str
    priority: int = 50
    node_id: str = ""
    status: str = "pending"
    status_description: str = ""
    job_modify_index: int = 0
    previous_eval: str = ""
    next_eval: str = ""
    blocked_eval: str = ""
    wait_until: str = ""
    failed_tg_allocs: dict[str, Any] = field(factory=dict)
    queued_allocations: dict[str, int] = field(factory=dict)
    # A blocked evaluation's view of the node classes it was tried on, unless its constraints
    # name a node's unique values (escaped): those evaluations are retried on any capacity.
    class_eligibility: dict[str, bool] = field(factory=dict)
    escaped_computed_class: bool = False
    node_modify_index: int = 0
    snapshot_index: int = 0
    create_index: int = 0
    modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0

    @property
    def terminal(self) -> bool:
        """Complete, failed or canceled."""
        return self.status in ("complete", "failed", "canceled")


@frozen
class SimVariableLock:
    """A variable's lock as Nomad's VariableLock holds it; durations in nanoseconds, as Go's."""

    id: str
    ttl_ns: int
    lock_delay_ns: int


@define(eq=False)
class SimVariable:
    """A Nomad Variable (VariableDecrypted): its items in clear, and the lock it may hold."""

    namespace: str
    path: str
    items: dict[str, str] = field(factory=dict)
    lock: SimVariableLock | None = None
    create_index: int = 0
    modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0
