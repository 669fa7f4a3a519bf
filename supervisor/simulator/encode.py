"""The simulated cluster's records as Nomad's JSON (nomad-api.md §0): PascalCase keys, zero-valued
fields omitted on Allocation, Evaluation and ports (their ``_struct omitempty``), every field present on
Job, Node and the list stubs, times in Unix nanoseconds or RFC 3339, ``Drain`` computed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import orjson

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
    "rfc3339",
    "variable_full",
    "variable_metadata",
]

ZERO_TIME: Final = "0001-01-01T00:00:00Z"
_DESIRED_TRANSITION_KEYS: Final = (
    "ForceReschedule",
    "Migrate",
    "MigrateDisablePlacement",
    "NoShutdownDelay",
    "Reschedule",
)
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


def _build_allocated_resources(alloc: SimAlloc) -> dict[str, Any]:
    dynamic = [
        omit_zero({"HostNetwork": "default", "Label": p["Label"], "To": p.get("To", 0), "Value": p["Value"]})
        for p in alloc.ports
    ]
    networks = (
        [omit_zero({"DynamicPorts": dynamic, "IP": alloc.host_ip, "Mode": "host"})] if alloc.ports else []
    )
    return {
        "Shared": {
            "DiskMB": 300,
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
        "PreviousAllocation": alloc.previous_allocation,
        "TaskStates": _task_states(alloc),
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
        "Datacenters": spec.get("Datacenters") or ["dc1"],
        "ID": job.id,
        "JobModifyIndex": job.job_modify_index,
        "ModifyIndex": job.modify_index,
        "Multiregion": None,
        "Name": spec.get("Name") or job.id,
        "Namespace": job.namespace,
        "NodePool": spec.get("NodePool") or "default",
        "ParentID": spec.get("ParentID", ""),
        "Priority": spec.get("Priority") or 50,
        "Status": job.status,
        "StatusDescription": job.status_description,
        "Stop": job.stop,
        "SubmitTime": job.submit_time,
        "Type": job.type,
    }


def job_full(job: SimJob, region: str) -> dict[str, Any]:
    """The full Job: no omitempty, so every field is present."""
    spec = job.spec
    return {
        **_job_fields(job),
        "Affinities": spec.get("Affinities"),
        "AllAtOnce": bool(spec.get("AllAtOnce", False)),
        "Constraints": spec.get("Constraints"),
        "DispatchIdempotencyToken": "",
        "Dispatched": False,
        "Meta": spec.get("Meta"),
        "ParameterizedJob": None,
        "Payload": None,
        "Periodic": None,
        "Region": spec.get("Region") or region,
        "Spreads": spec.get("Spreads"),
        "Stable": False,
        "TaskGroups": spec.get("TaskGroups"),
        "Update": spec.get("Update"),
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


def _drivers() -> dict[str, Any]:
    return {
        "docker": {
            "Attributes": {"driver.docker": "true"},
            "Detected": True,
            "HealthDescription": "Healthy",
            "Healthy": True,
            "UpdateTime": ZERO_TIME,
        }
    }


def _node_fields(node: SimNode) -> dict[str, Any]:
    """What the full Node and its list stub both carry, with the same values."""
    return {
        "CreateIndex": node.create_index,
        "Datacenter": node.datacenter,
        "Drain": node.drain_strategy is not None,
        "Drivers": _drivers(),
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
    """The full Node, sanitized (no SecretID), with the computed ``Drain``."""
    return {
        **_node_fields(node),
        "Attributes": node.attributes,
        "DrainStrategy": node.drain_strategy,
        "Events": node.events,
        "HTTPAddr": node.http_addr,
        "Meta": {},
        "StatusUpdatedAt": node.status_updated_at,
    }


def node_stub(node: SimNode, version: str) -> dict[str, Any]:
    """A NodeListStub: every field present."""
    return {
        **_node_fields(node),
        "Address": node.address,
        "HostNetworks": None,
        "HostVolumes": None,
        "Version": version,
    }


def eval_full(evaluation: SimEval) -> dict[str, Any]:
    """A full Evaluation, zero fields omitted."""
    return omit_zero(
        {
            "BlockedEval": evaluation.blocked_eval,
            "CreateIndex": evaluation.create_index,
            "CreateTime": evaluation.create_time,
            "FailedTGAllocs": evaluation.failed_tg_allocs,
            "ID": evaluation.id,
            "JobID": evaluation.job_id,
            "JobModifyIndex": evaluation.job_modify_index,
            "ModifyIndex": evaluation.modify_index,
            "ModifyTime": evaluation.modify_time,
            "Namespace": evaluation.namespace,
            "NextEval": evaluation.next_eval,
            "NodeID": evaluation.node_id,
            "PreviousEval": evaluation.previous_eval,
            "Priority": evaluation.priority,
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
