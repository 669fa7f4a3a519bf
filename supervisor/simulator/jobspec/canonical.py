"""``api.Job.Canonicalize`` of Nomad 1.10.5 (``api/jobs.go``, ``api/tasks.go``,
``api/resources.go``): what ``POST /v1/jobs/parse`` answers with ``Canonicalize: true``.

This is the client package's canonicalization, not the server's: an ``api.Job`` in, an ``api.Job``
out, with defaults where the jobspec left a pointer nil (the job's region "global", namespace
"default", type "service", priority 50; a group's count, restart, reschedule and migrate policies,
ephemeral disk; a task's resources, kill timeout and log config). Datacenters stay as written (the
server's canonicalization makes ``["*"]`` of none), and no identity is added.
"""

from __future__ import annotations

import copy
from typing import Any, Final

__all__ = ["canonical_api_job"]

_S: Final = 1_000_000_000
_M: Final = 60 * _S
_H: Final = 60 * _M

_UPDATE: Final = {
    "Stagger": 30 * _S,
    "MaxParallel": 1,
    "HealthCheck": "checks",
    "MinHealthyTime": 10 * _S,
    "HealthyDeadline": 5 * _M,
    "ProgressDeadline": 10 * _M,
    "Canary": 0,
    "AutoRevert": False,
    "AutoPromote": False,
}
_MIGRATE: Final = {
    "MaxParallel": 1,
    "HealthCheck": "checks",
    "MinHealthyTime": 10 * _S,
    "HealthyDeadline": 5 * _M,
}
_RESTART: Final = {
    "service": {
        "Interval": 30 * _M,
        "Attempts": 2,
        "Delay": 15 * _S,
        "Mode": "fail",
        "RenderTemplates": False,
    },
    "batch": {"Interval": 24 * _H, "Attempts": 3, "Delay": 15 * _S, "Mode": "fail", "RenderTemplates": False},
}
_NO_RESCHEDULE: Final = {
    "Attempts": 0,
    "Interval": 0,
    "Delay": 0,
    "DelayFunction": "",
    "MaxDelay": 0,
    "Unlimited": False,
}
_RESCHEDULE: Final = {
    "service": {
        "Attempts": 0,
        "Interval": 0,
        "Delay": 30 * _S,
        "DelayFunction": "exponential",
        "MaxDelay": _H,
        "Unlimited": True,
    },
    "batch": {
        "Attempts": 1,
        "Interval": 24 * _H,
        "Delay": 5 * _S,
        "DelayFunction": "constant",
        "MaxDelay": 0,
        "Unlimited": False,
    },
}
_JOB_DEFAULTS: Final = {
    "ParentID": "",
    "Namespace": "default",
    "Priority": 50,
    "Stop": False,
    "Region": "global",
    "NodePool": "",
    "Type": "service",
    "AllAtOnce": False,
    "ConsulNamespace": "",
    "VaultNamespace": "",
    "NomadTokenID": "",
    "Status": "",
    "StatusDescription": "",
    "Stable": False,
    "Version": 0,
    "CreateIndex": 0,
    "ModifyIndex": 0,
    "JobModifyIndex": 0,
}


def _fill(target: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Every field still nil takes its default (the ``Canonicalize`` methods' ``if x == nil``)."""
    for key, value in defaults.items():
        if target.get(key) is None:
            target[key] = copy.deepcopy(value)
    return target


def _merged(base: dict[str, Any], override: dict[str, Any] | None) -> dict[str, Any]:
    """``Merge``: the override's non-nil fields win."""
    merged = dict(base)
    merged.update({k: v for k, v in (override or {}).items() if v is not None})
    return merged


def _update_empty(update: dict[str, Any] | None) -> bool:
    """``UpdateStrategy.Empty``."""
    return update is None or not any(update.get(key) for key in _UPDATE)


def _resources(resources: dict[str, Any]) -> None:
    if resources.get("Cores") is None:
        resources["Cores"] = 0
        if resources.get("CPU") is None:
            resources["CPU"] = 100
    if resources.get("CPU") is None:
        resources["CPU"] = 0
    if resources.get("MemoryMB") is None:
        resources["MemoryMB"] = 300


def _task(task: dict[str, Any], group: dict[str, Any]) -> None:
    if task.get("Resources") is None:
        task["Resources"] = {
            "CPU": None, "Cores": None, "MemoryMB": None, "MemoryMaxMB": None, "DiskMB": None,
            "Networks": None, "Devices": None, "NUMA": None, "SecretsMB": None, "IOPS": None,
        }  # fmt: skip
    _resources(task["Resources"])
    if task.get("KillTimeout") is None:
        task["KillTimeout"] = 5 * _S
    if task.get("LogConfig") is None:
        task["LogConfig"] = {"MaxFiles": 10, "MaxFileSizeMB": 10, "Enabled": None, "Disabled": False}
    else:
        _fill(task["LogConfig"], {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": False})
    for affinity in task.get("Affinities") or []:
        _fill(affinity, {"Weight": 50})
    task["RestartPolicy"] = _merged(group["RestartPolicy"], task.get("RestartPolicy"))


def _reschedule(group: dict[str, Any], job: dict[str, Any]) -> dict[str, Any] | None:
    """The group's reschedule policy under the job's, with the job type's defaults (none for a
    system job that sets none)."""
    job_type = job["Type"]
    reschedule = group.get("ReschedulePolicy")
    if job.get("Reschedule") is not None:
        reschedule = _merged(job["Reschedule"], reschedule)
    if reschedule is None and job_type == "system":
        return None
    return _fill(reschedule if reschedule is not None else {}, _RESCHEDULE.get(job_type, _NO_RESCHEDULE))


def _group(group: dict[str, Any], job: dict[str, Any]) -> None:
    job_type = job["Type"]
    if group.get("Name") is None:
        group["Name"] = ""
    if group.get("Count") is None:
        group["Count"] = 1
    disk = group.get("EphemeralDisk")
    group["EphemeralDisk"] = _fill(
        disk if disk is not None else {}, {"Sticky": False, "Migrate": False, "SizeMB": 300}
    )
    job_update, group_update = job.get("Update"), group.get("Update")
    if job_update is not None and group_update is not None:
        group["Update"] = _merged(job_update, group_update)
    elif job_update is not None and not _update_empty(job_update):
        group["Update"] = dict(job_update)
    if group.get("Update") is not None:
        _fill(group["Update"], _UPDATE)
    group["ReschedulePolicy"] = _reschedule(group, job)
    migrate = group.get("Migrate")
    if job.get("Migrate") is not None:
        migrate = _merged(job["Migrate"], migrate)
    if migrate is None and job_type == "service":
        migrate = {}
    group["Migrate"] = None if migrate is None else _fill(migrate, _MIGRATE)
    restart = _RESTART["service" if job_type in ("service", "system") else "batch"]
    group["RestartPolicy"] = _merged(restart, group.get("RestartPolicy"))
    for task in group.get("Tasks") or []:
        _task(task, group)
    for item in (group.get("Spreads") or []) + (group.get("Affinities") or []):
        _fill(item, {"Weight": 50})
    if group.get("Disconnect") is not None:
        _fill(group["Disconnect"], {"Replace": True, "Reconcile": "best_score"})


def canonical_api_job(job: dict[str, Any]) -> dict[str, Any]:
    """A copy of the ``api.Job`` with the ``api`` package's defaults."""
    job = copy.deepcopy(job)
    if job.get("ID") is None:
        job["ID"] = ""
    if job.get("Name") is None:
        job["Name"] = job["ID"]
    _fill(job, _JOB_DEFAULTS)
    if job.get("Periodic") is not None:
        periodic = job["Periodic"]
        _fill(
            periodic, {"Enabled": True, "Spec": "", "Specs": [], "SpecType": "cron", "ProhibitOverlap": False}
        )
        if not periodic.get("TimeZone"):
            periodic["TimeZone"] = "UTC"
    if job.get("Update") is not None:
        _fill(job["Update"], _UPDATE)
    elif job["Type"] == "service":
        job["Update"] = dict(_UPDATE)
    for group in job.get("TaskGroups") or []:
        _group(group, job)
    for item in (job.get("Spreads") or []) + (job.get("Affinities") or []):
        _fill(item, {"Weight": 50})
    return job
