"""The simulated cluster's records as Nomad's JSON (nomad-api.md §0): PascalCase keys, zero-valued
fields omitted on Allocation, Evaluation and ports (their ``_struct omitempty``), every field present on
Job, Node and the list stubs, times in Unix nanoseconds or RFC 3339, ``Drain`` computed. Fields that
Nomad 1.10.5 does not have are not written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import orjson

from .fingerprint import EMPTY_RESOURCES, RESERVED_RESOURCES, ZERO_RESOURCES, driver_info, node_resources
from .objects import SimAlloc, SimEval, SimJob, SimNode, SimVariable

__all__ = [
    "ZERO_TIME",
    "alloc_full",
    "alloc_stub",
    "eval_full",
    "go_duration",
    "job_full",
    "job_stub",
    "node_full",
    "node_stub",
    "omit_zero",
    "register_fingerprint",
    "rfc3339",
    "variable_full",
    "variable_metadata",
]

ZERO_TIME: Final = "0001-01-01T00:00:00Z"
# Nomad 1.10.5's DesiredTransition; MigrateDisablePlacement came in 1.11.
_DESIRED_TRANSITION_KEYS: Final = ("ForceReschedule", "Migrate", "NoShutdownDelay", "Reschedule")
_DEFAULT_PORT_RANGE: Final = (20000, 32000)
_SUMMARY_STATES: Final = ("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown")


def omit_zero(data: dict[str, Any]) -> dict[str, Any]:
    """Drop zero-valued keys, as go-msgpack's omitempty does: "", 0, false, null, empty maps and lists."""
    return {key: value for key, value in data.items() if value or value is True}


def rfc3339(ns: int) -> str:
    """Unix nanoseconds as RFC 3339 in UTC, as Nomad writes times."""
    if ns <= 0:
        return ZERO_TIME
    seconds, nanos = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f".{nanos:09d}".rstrip("0") if nanos else ""
    return f"{stamp}{fraction}Z"


def _desired_transition(alloc: SimAlloc) -> dict[str, Any]:
    return {key: (True if alloc.desired_transition.get(key) else None) for key in _DESIRED_TRANSITION_KEYS}


def _allocated_resources(alloc: SimAlloc) -> orjson.Fragment:
    """Fixed at placement, so encoded once per allocation."""
    if alloc.allocated_resources is None:
        alloc.allocated_resources = orjson.Fragment(orjson.dumps(_build_allocated_resources(alloc)))
    fragment: orjson.Fragment = alloc.allocated_resources
    return fragment


def _task_states(alloc: SimAlloc) -> orjson.Fragment | None:
    """Encoded once per change of the allocation: its event and its list stubs share the bytes."""
    if not alloc.task_states:
        return None
    cached = alloc.task_states_json
    if cached is None or cached[0] != alloc.modify_index:
        cached = alloc.task_states_json = (
            alloc.modify_index,
            orjson.Fragment(orjson.dumps(alloc.task_states)),
        )
    fragment: orjson.Fragment = cached[1]
    return fragment


def _networks(alloc: SimAlloc) -> list[dict[str, Any]]:
    """The group's network as placed (NetworkResource: omitempty)."""
    dynamic = [
        omit_zero({"HostNetwork": "default", "Label": p["Label"], "To": p.get("To", 0), "Value": p["Value"]})
        for p in alloc.ports
    ]
    return (
        [omit_zero({"DynamicPorts": dynamic, "IP": alloc.host_ip, "Mode": alloc.network_mode})]
        if alloc.ports
        else []
    )


def _legacy_resources(alloc: SimAlloc) -> dict[str, orjson.Fragment]:
    """The deprecated views Nomad still writes at placement, fixed then: ``TaskResources`` (each
    task's), ``SharedResources`` (the group's disk and network) and ``Resources`` (their sum)."""
    if alloc.legacy_resources is None:
        networks = _networks(alloc) or None
        task = {
            **EMPTY_RESOURCES,
            "CPU": alloc.cpu,
            "MemoryMB": alloc.memory_mb,
            "MemoryMaxMB": alloc.memory_max_mb,
        }
        shared = {**EMPTY_RESOURCES, "DiskMB": alloc.disk_mb, "Networks": networks}
        count = len(alloc.tasks)
        total = {
            **EMPTY_RESOURCES,
            "CPU": alloc.cpu * count,
            "DiskMB": alloc.disk_mb,
            "MemoryMB": alloc.memory_mb * count,
            "MemoryMaxMB": (alloc.memory_max_mb or alloc.memory_mb) * count,
            "Networks": networks,
        }
        alloc.legacy_resources = {
            "Resources": orjson.Fragment(orjson.dumps(total)),
            "SharedResources": orjson.Fragment(orjson.dumps(shared)),
            "TaskResources": orjson.Fragment(orjson.dumps(dict.fromkeys(alloc.tasks, task))),
        }
    legacy: dict[str, orjson.Fragment] = alloc.legacy_resources
    return legacy


def _build_allocated_resources(alloc: SimAlloc) -> dict[str, Any]:
    networks = _networks(alloc)
    return {
        "Shared": {
            "DiskMB": alloc.disk_mb,
            "Networks": networks or None,
            "Ports": [omit_zero({"HostIP": alloc.host_ip, **p}) for p in alloc.ports] or None,
        },
        "TaskLifecycles": {task: None for task in alloc.tasks},
        "Tasks": {
            task: {
                "Cpu": {"CpuShares": alloc.cpu, "ReservedCores": None},
                "Devices": None,
                "Memory": {"MemoryMB": alloc.memory_mb, "MemoryMaxMB": alloc.memory_max_mb},
                "Networks": None,
            }
            for task in alloc.tasks
        },
    }


def _alloc_fields(alloc: SimAlloc) -> dict[str, Any]:
    """What the full Allocation and its list stub both carry, with the same values."""
    return {
        "ClientDescription": alloc.client_description,
        "ClientStatus": alloc.client_status,
        "CreateIndex": alloc.create_index,
        "CreateTime": alloc.create_time,
        "DesiredDescription": alloc.desired_description,
        "DesiredStatus": alloc.desired_status,
        "EvalID": alloc.eval_id,
        "FollowupEvalID": alloc.followup_eval_id,
        "ID": alloc.id,
        "JobID": alloc.job_id,
        "ModifyIndex": alloc.modify_index,
        "ModifyTime": alloc.modify_time,
        "Name": alloc.name,
        "Namespace": alloc.namespace,
        "NextAllocation": alloc.next_allocation,
        "NodeID": alloc.node_id,
        "NodeName": alloc.node_name,
        "RescheduleTracker": alloc.reschedule_tracker,
        "TaskGroup": alloc.task_group,
    }


def alloc_full(alloc: SimAlloc, *, with_job: bool) -> dict[str, Any]:
    """``GET /v1/allocation/:id`` (with the Job) and the event payload (without it), zeros omitted."""
    desired_transition = _desired_transition(alloc) if any(alloc.desired_transition.values()) else None
    data = {
        **_alloc_fields(alloc),
        "AllocModifyIndex": alloc.alloc_modify_index,
        "AllocatedResources": _allocated_resources(alloc),
        "DesiredTransition": desired_transition,
        "Job": alloc.job if with_job else None,
        "Metrics": alloc.metrics,
        "PreviousAllocation": alloc.previous_allocation,
        "SigningKeyID": alloc.signing_key_id,
        "TaskStates": _task_states(alloc),
        **_legacy_resources(alloc),
    }
    return omit_zero(data)


def alloc_stub(alloc: SimAlloc, *, resources: bool, task_states: bool = True) -> dict[str, Any]:
    """An AllocListStub: every field present, but AllocatedResources (``omitempty``) only with
    ``resources``; TaskStates is null without ``task_states``."""
    stub = {
        **_alloc_fields(alloc),
        "DeploymentStatus": None,
        "DesiredTransition": _desired_transition(alloc),
        "JobType": alloc.job.get("Type", ""),
        "JobVersion": alloc.job_version,
        "PreemptedAllocations": None,
        "PreemptedByAllocation": "",
        "TaskStates": _task_states(alloc) if task_states else None,
    }
    if resources:
        stub["AllocatedResources"] = _allocated_resources(alloc)
    return stub


def _job_fields(job: SimJob) -> dict[str, Any]:
    """What the full Job and its list stub both carry, with the same values."""
    spec = job.spec
    return {
        "CreateIndex": job.create_index,
        "Datacenters": spec.get("Datacenters") or ["*"],
        "ID": job.id,
        "JobModifyIndex": job.job_modify_index,
        "ModifyIndex": job.modify_index,
        "Multiregion": spec.get("Multiregion"),
        "Name": spec.get("Name", job.id),
        "Namespace": job.namespace,
        "NodePool": spec.get("NodePool") or "default",
        "ParentID": spec.get("ParentID", ""),
        "Priority": spec.get("Priority", 50),
        "Status": job.status,
        "StatusDescription": job.status_description,
        "Stop": job.stop,
        "SubmitTime": job.submit_time,
        "Type": job.type,
    }


def job_full(job: SimJob, region: str) -> dict[str, Any]:
    """The full Job: the canonical job as stored (``canonical.py``: every field, no omitempty)
    with the fields the server sets."""
    spec = job.spec
    return {
        **spec,
        **_job_fields(job),
        "Region": spec.get("Region") or region,
        "Stable": False,
        "Version": job.version,
    }


def job_stub(job: SimJob, summary: dict[str, dict[str, int]], *, meta: bool) -> dict[str, Any]:
    """A JobListStub; ``Meta`` only when asked for (``meta=true``) and not empty."""
    stub = {
        **_job_fields(job),
        "JobSummary": {
            "Children": {"Dead": 0, "Pending": 0, "Running": 0},
            "CreateIndex": job.create_index,
            "JobID": job.id,
            "ModifyIndex": job.modify_index,
            "Namespace": job.namespace,
            "Summary": summary,
        },
        "ParameterizedJob": False,
        "Periodic": False,
    }
    if meta and job.spec.get("Meta"):
        stub["Meta"] = job.spec["Meta"]
    return stub


def empty_summary(groups: list[str]) -> dict[str, dict[str, int]]:
    return {group: dict.fromkeys(_SUMMARY_STATES, 0) for group in groups}


def summary_state(alloc: SimAlloc) -> str:
    return {
        "pending": "Starting",
        "running": "Running",
        "complete": "Complete",
        "failed": "Failed",
        "lost": "Lost",
        "unknown": "Unknown",
    }[alloc.client_status]


def register_fingerprint(node: SimNode, port_range: tuple[int, int], update_time: str) -> None:
    """Fix what the node's client registered (its resources and drivers), encoded once."""
    node.node_resources = orjson.Fragment(orjson.dumps(node_resources(node.address, port_range, node.size)))
    node.drivers = orjson.Fragment(orjson.dumps(driver_info(update_time)))


def _registered(node: SimNode) -> tuple[orjson.Fragment, orjson.Fragment]:
    if node.node_resources is None:
        register_fingerprint(node, _DEFAULT_PORT_RANGE, ZERO_TIME)
    return node.node_resources, node.drivers


def _node_fields(node: SimNode) -> dict[str, Any]:
    """What the full Node and its list stub both carry, with the same values."""
    return {
        "CreateIndex": node.create_index,
        "Datacenter": node.datacenter,
        "Drain": node.drain_strategy is not None,
        "Drivers": _registered(node)[1],
        "HostVolumes": {},
        "ID": node.id,
        "LastDrain": node.last_drain,
        "ModifyIndex": node.modify_index,
        "Name": node.name,
        "NodeClass": "",
        "NodePool": "default",
        "SchedulingEligibility": node.eligibility,
        "Status": node.status,
        "StatusDescription": node.status_description,
    }


def node_full(node: SimNode) -> dict[str, Any]:
    """The full Node, every field (no omitempty), sanitized (SecretID empty), with the computed
    ``Drain``."""
    return {
        **_node_fields(node),
        "Attributes": node.attributes,
        "CSIControllerPlugins": {},
        "CSINodePlugins": {},
        "CgroupParent": "nomad.slice",
        "ComputedClass": node.computed_class,
        "DrainStrategy": node.drain_strategy,
        "Events": node.events,
        "GCVolumesOnNodeGC": False,
        "HTTPAddr": node.http_addr,
        "HostNetworks": None,
        "LastAllocUpdateIndex": node.last_alloc_update_index,
        "LastMissedHeartbeatIndex": node.last_missed_heartbeat_index,
        "Links": {},
        "Meta": node.meta,
        "NodeMaxAllocs": node.max_allocs,
        "NodeResources": _registered(node)[0],
        "Reserved": ZERO_RESOURCES,
        "ReservedResources": RESERVED_RESOURCES,
        "Resources": ZERO_RESOURCES,
        "SecretID": "",
        "StatusUpdatedAt": node.status_updated_at,
        "TLSEnabled": False,
    }


def node_stub(node: SimNode, version: str, *, resources: bool = False, os: bool = False) -> dict[str, Any]:
    """A NodeListStub: every field present but ``NodeResources`` and ``ReservedResources`` (only
    with ``resources``) and ``Attributes`` (only with ``os``, and then only ``os.name``)."""
    stub = {**_node_fields(node), "Address": node.address, "Version": version}
    if resources:
        stub["NodeResources"] = _registered(node)[0]
        stub["ReservedResources"] = RESERVED_RESOURCES
    if os:
        stub["Attributes"] = {"os.name": node.attributes.get("os.name", "")}
    return stub


def eval_full(evaluation: SimEval) -> dict[str, Any]:
    """A full Evaluation, zero fields omitted (its ``_struct omitempty``)."""
    return omit_zero(
        {
            "BlockedEval": evaluation.blocked_eval,
            "ClassEligibility": evaluation.class_eligibility,
            "CreateIndex": evaluation.create_index,
            "CreateTime": evaluation.create_time,
            "EscapedComputedClass": evaluation.escaped_computed_class,
            "FailedTGAllocs": evaluation.failed_tg_allocs,
            "ID": evaluation.id,
            "JobID": evaluation.job_id,
            "JobModifyIndex": evaluation.job_modify_index,
            "ModifyIndex": evaluation.modify_index,
            "ModifyTime": evaluation.modify_time,
            "Namespace": evaluation.namespace,
            "NextEval": evaluation.next_eval,
            "NodeID": evaluation.node_id,
            "NodeModifyIndex": evaluation.node_modify_index,
            "PreviousEval": evaluation.previous_eval,
            "Priority": evaluation.priority,
            "QueuedAllocations": evaluation.queued_allocations,
            "SnapshotIndex": evaluation.snapshot_index,
            "Status": evaluation.status,
            "StatusDescription": evaluation.status_description,
            "TriggeredBy": evaluation.triggered_by,
            "Type": evaluation.type,
            "WaitUntil": evaluation.wait_until,
        }
    )


def _decimal(value_ns: int, unit_ns: int) -> str:
    whole, rest = divmod(value_ns, unit_ns)
    if not rest:
        return str(whole)
    digits = len(str(unit_ns)) - 1
    return f"{whole}.{rest:0{digits}d}".rstrip("0")


def go_duration(ns: int) -> str:
    """Nanoseconds as Go's ``Duration.String`` writes them: "15s", "1m30s", "1h0m0s", "500ms"."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_decimal(ns, 1_000)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{_decimal(ns, 1_000_000)}ms"
    hours, ns = divmod(ns, 3_600_000_000_000)
    minutes, ns = divmod(ns, 60_000_000_000)
    seconds = f"{_decimal(ns, 1_000_000_000)}s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    return f"{sign}{minutes}m{seconds}" if minutes else f"{sign}{seconds}"


def variable_metadata(variable: SimVariable) -> dict[str, Any]:
    """VariableMetadata: what ``GET /v1/vars`` lists; ``Lock`` only while one is held (omitempty),
    its durations as Go duration strings (VariableLock's MarshalJSON)."""
    data: dict[str, Any] = {
        "Namespace": variable.namespace,
        "Path": variable.path,
        "CreateIndex": variable.create_index,
        "CreateTime": variable.create_time,
        "ModifyIndex": variable.modify_index,
        "ModifyTime": variable.modify_time,
    }
    if variable.lock is not None:
        data["Lock"] = {
            "ID": variable.lock.id,
            "TTL": go_duration(variable.lock.ttl_ns),
            "LockDelay": go_duration(variable.lock.lock_delay_ns),
        }
    return data


def variable_full(variable: SimVariable, items: dict[str, str] | None = None) -> dict[str, Any]:
    """VariableDecrypted: the metadata and ``Items`` (omitted when empty). A write answers with the
    items its request carried, so ``items`` replaces the stored ones when given."""
    data = variable_metadata(variable)
    shown = variable.items if items is None else items
    if shown:
        data["Items"] = dict(shown)
    return data
