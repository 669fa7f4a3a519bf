"""A submitted job as Nomad 1.10.5 stores it: ``api.Job.Canonicalize`` (defaults for every group and
task), the agent's ``ApiJobToStructJob`` (the fields it copies, and the ones it drops), then the
server's ``structs.Job.Canonicalize`` and node pool hook.

The input is an ``api.Job`` as ``gojson`` decodes it (a field sent as null or not sent is None); the
output a ``structs.Job`` as Nomad writes it, every field present. Defaults, from ``api/jobs.go`` and
``api/tasks.go``:

- job: Priority 50, Type ``service``, Datacenters ``["*"]``, NodePool ``default``, Name = ID; a
  service job's Update ``{Stagger 30s, MaxParallel 1}`` (the rest of the strategy goes to groups);
- group: Count 1; RestartPolicy by type (service and system: 2 in 30m, else 3 in 24h; delay 15s,
  mode fail), merged field by field with the group's; ReschedulePolicy by type, merged with the
  job's ``Reschedule`` and the group's (none for system jobs); Migrate for service jobs
  (1, checks, 10s, 5m); Update from the job's; EphemeralDisk 300 MB;
- task: Resources CPU 100 (0 with Cores) and MemoryMB 300; KillTimeout 5s; LogConfig 10 files of
  10 MB; the group's RestartPolicy under the task's own; the default workload identity.

Empty maps and lists become null, as the server's Canonicalize makes them. Blocks the simulator
does not interpret (services, templates, volumes, …) are kept as sent.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["canonical_job"]

_SECOND: Final = 1_000_000_000
_MINUTE: Final = 60 * _SECOND
_HOUR: Final = 60 * _MINUTE

_SERVICE_RESTART: Final = {
    "Attempts": 2,
    "Delay": 15 * _SECOND,
    "Interval": 30 * _MINUTE,
    "Mode": "fail",
    "RenderTemplates": False,
}
_BATCH_RESTART: Final = {**_SERVICE_RESTART, "Attempts": 3, "Interval": 24 * _HOUR}
_NO_RESCHEDULE: Final = {
    "Attempts": 0,
    "Delay": 0,
    "DelayFunction": "",
    "Interval": 0,
    "MaxDelay": 0,
    "Unlimited": False,
}
_RESCHEDULE: Final = {
    "service": {
        "Attempts": 0,
        "Delay": 30 * _SECOND,
        "DelayFunction": "exponential",
        "Interval": 0,
        "MaxDelay": _HOUR,
        "Unlimited": True,
    },
    "batch": {
        "Attempts": 1,
        "Delay": 5 * _SECOND,
        "DelayFunction": "constant",
        "Interval": 24 * _HOUR,
        "MaxDelay": 0,
        "Unlimited": False,
    },
}
_UPDATE: Final = {
    "AutoPromote": False,
    "AutoRevert": False,
    "Canary": 0,
    "HealthCheck": "checks",
    "HealthyDeadline": 5 * _MINUTE,
    "MaxParallel": 1,
    "MinHealthyTime": 10 * _SECOND,
    "ProgressDeadline": 10 * _MINUTE,
    "Stagger": 30 * _SECOND,
}
_ZERO_UPDATE: Final = {
    "AutoPromote": False,
    "AutoRevert": False,
    "Canary": 0,
    "HealthCheck": "",
    "HealthyDeadline": 0,
    "MaxParallel": 0,
    "MinHealthyTime": 0,
    "ProgressDeadline": 0,
    "Stagger": 0,
}
_MIGRATE: Final = {
    "HealthCheck": "checks",
    "HealthyDeadline": 5 * _MINUTE,
    "MaxParallel": 1,
    "MinHealthyTime": 10 * _SECOND,
}
_EPHEMERAL_DISK: Final = {"Migrate": False, "SizeMB": 300, "Sticky": False}
_LOG_CONFIG: Final = {"Disabled": False, "MaxFileSizeMB": 10, "MaxFiles": 10}
_KILL_TIMEOUT: Final = 5 * _SECOND
_IDENTITY: Final = {
    "Audience": ["nomad.io"],
    "ChangeMode": "",
    "ChangeSignal": "",
    "Env": False,
    "File": False,
    "Filepath": "",
    "Name": "default",
    "ServiceName": "",
    "TTL": 0,
}


def _given(data: dict[str, Any] | None, key: str, default: Any) -> Any:
    """A pointer field: its value, or ``default`` when it was null or not sent."""
    value = (data or {}).get(key)
    return default if value is None else value


def _merged(defaults: dict[str, Any], *overrides: dict[str, Any] | None) -> dict[str, Any]:
    """``defaults`` with every field the overrides set (api's ``Merge``: non-nil fields win)."""
    merged = dict(defaults)
    for override in overrides:
        merged.update({k: v for k, v in (override or {}).items() if k in defaults and v is not None})
    return merged


def _or_none(value: Any) -> Any:
    """Empty maps and lists as null, as the server's Canonicalize makes them."""
    return value or None


def _constraints(items: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    return [
        {key: _given(c, key, "") for key in ("LTarget", "Operand", "RTarget")} for c in items or []
    ] or None


def _port(port: dict[str, Any]) -> dict[str, Any]:
    return {
        "HostNetwork": _given(port, "HostNetwork", "") or "default",
        "IgnoreCollision": _given(port, "IgnoreCollision", False),
        "Label": _given(port, "Label", ""),
        "To": _given(port, "To", 0),
        "Value": _given(port, "Value", 0),
    }


def _networks(networks: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``ApiNetworkResourceToStructs``: Device is not copied; ports get host network "default"."""
    return [
        {
            "CIDR": _given(n, "CIDR", ""),
            "CNI": n.get("CNI"),
            "DNS": n.get("DNS"),
            "Device": "",
            "DynamicPorts": [_port(p) for p in n.get("DynamicPorts") or []] or None,
            "Hostname": _given(n, "Hostname", ""),
            "IP": _given(n, "IP", ""),
            "MBits": _given(n, "MBits", 0),
            "Mode": _given(n, "Mode", ""),
            "ReservedPorts": [_port(p) for p in n.get("ReservedPorts") or []] or None,
        }
        for n in networks or []
    ] or None


def _resources(resources: dict[str, Any] | None) -> dict[str, Any]:
    """``Resources.Canonicalize`` then ``ApiResourcesToStructs`` (DiskMB is not copied)."""
    given = resources or {}
    cores = given.get("Cores")
    cpu = given.get("CPU")
    if cpu is None:
        cpu = 100 if cores is None else 0
    return {
        "CPU": cpu,
        "Cores": cores or 0,
        "Devices": given.get("Devices") or None,
        "DiskMB": 0,
        "IOPS": _given(given, "IOPS", 0),
        "MemoryMB": _given(given, "MemoryMB", 300),
        "MemoryMaxMB": _given(given, "MemoryMaxMB", 0),
        "NUMA": given.get("NUMA"),
        "Networks": _networks(given.get("Networks")),
        "SecretsMB": _given(given, "SecretsMB", 0),
    }


def _identity(identity: dict[str, Any] | None) -> dict[str, Any]:
    if identity is None:
        return dict(_IDENTITY)
    merged = _merged({**_IDENTITY, "Audience": None}, identity)
    if not merged["Name"] or merged["Name"] == "default":
        merged["Name"], merged["Audience"] = "default", ["nomad.io"]
    return merged


def _task(task: dict[str, Any], group_restart: dict[str, Any]) -> dict[str, Any]:
    lifecycle = task.get("Lifecycle")
    return {
        "Actions": task.get("Actions"),
        "Affinities": _or_none(task.get("Affinities")),
        "Artifacts": _or_none(task.get("Artifacts")),
        "CSIPluginConfig": task.get("CSIPluginConfig"),
        "Config": _or_none(task.get("Config")),
        "Constraints": _constraints(task.get("Constraints")),
        "Consul": task.get("Consul"),
        "DispatchPayload": task.get("DispatchPayload"),
        "Driver": _given(task, "Driver", ""),
        "Env": _or_none(task.get("Env")),
        "Identities": _or_none(task.get("Identities")),
        "Identity": _identity(task.get("Identity")),
        "KillSignal": _given(task, "KillSignal", ""),
        "KillTimeout": _given(task, "KillTimeout", 0) or _KILL_TIMEOUT,
        "Kind": _given(task, "Kind", ""),
        "Leader": _given(task, "Leader", False),
        "Lifecycle": None if lifecycle is None else _merged({"Hook": "", "Sidecar": False}, lifecycle),
        "LogConfig": _merged(_LOG_CONFIG, task.get("LogConfig")),
        "Meta": _or_none(task.get("Meta")),
        "Name": _given(task, "Name", ""),
        "Resources": _resources(task.get("Resources")),
        "RestartPolicy": _merged(group_restart, task.get("RestartPolicy")),
        "ScalingPolicies": _or_none(task.get("ScalingPolicies")),
        "Schedule": task.get("Schedule"),
        "Services": _or_none(task.get("Services")),
        "ShutdownDelay": _given(task, "ShutdownDelay", 0),
        "Templates": _or_none(task.get("Templates")),
        "User": _given(task, "User", ""),
        "Vault": task.get("Vault"),
        "VolumeMounts": _or_none(task.get("VolumeMounts")),
    }


def _update(job: dict[str, Any], group: dict[str, Any]) -> dict[str, Any] | None:
    """The group's update strategy: the job's (once canonicalized) under the group's own."""
    job_update = job.get("Update")
    if job_update is None and _job_type(job) == "service":
        job_update = _UPDATE
    if job_update is not None:
        job_update = _merged(_UPDATE, job_update)
    group_update = group.get("Update")
    if job_update is not None and group_update is not None:
        return _merged(job_update, group_update)
    if group_update is not None:
        return _merged(_UPDATE, group_update)
    if job_update is not None and any(v != _ZERO_UPDATE[k] for k, v in job_update.items()):
        return job_update
    return None


def _reschedule(job: dict[str, Any], group: dict[str, Any]) -> dict[str, Any] | None:
    job_type = _job_type(job)
    given = [p for p in (job.get("Reschedule"), group.get("ReschedulePolicy")) if p is not None]
    if not given and job_type == "system":
        return None
    return _merged(_RESCHEDULE.get(job_type, _NO_RESCHEDULE), *given)


def _migrate(job: dict[str, Any], group: dict[str, Any]) -> dict[str, Any] | None:
    given = [m for m in (job.get("Migrate"), group.get("Migrate")) if m is not None]
    if not given and _job_type(job) != "service":
        return None
    return _merged(_MIGRATE, *given)


def _disconnect(disconnect: dict[str, Any] | None) -> dict[str, Any] | None:
    if disconnect is None:
        return None
    return {
        "LostAfter": _given(disconnect, "LostAfter", 0),
        "Reconcile": _given(disconnect, "Reconcile", "best_score"),
        "Replace": _given(disconnect, "Replace", True),
        "StopOnClientAfter": disconnect.get("StopOnClientAfter"),
    }


def _job_type(job: dict[str, Any]) -> str:
    return str(_given(job, "Type", "service"))


def _group(job: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    batch_like = _job_type(job) not in ("service", "system")
    restart = _merged(_BATCH_RESTART if batch_like else _SERVICE_RESTART, group.get("RestartPolicy"))
    scaling = group.get("Scaling") or {}
    count = group.get("Count")
    if count is None:
        count = scaling.get("Min") if scaling.get("Min") is not None else 1
    return {
        "Affinities": _or_none(group.get("Affinities")),
        "Constraints": _constraints(group.get("Constraints")),
        "Consul": group.get("Consul"),
        "Count": count,
        "Disconnect": _disconnect(group.get("Disconnect")),
        "EphemeralDisk": _merged(_EPHEMERAL_DISK, group.get("EphemeralDisk")),
        "MaxClientDisconnect": None,
        "Meta": _or_none(group.get("Meta")),
        "Migrate": _migrate(job, group),
        "Name": _given(group, "Name", ""),
        "Networks": _networks(group.get("Networks")),
        "PreventRescheduleOnLost": False,
        "ReschedulePolicy": _reschedule(job, group),
        "RestartPolicy": restart,
        "Scaling": group.get("Scaling"),
        "Services": _or_none(group.get("Services")),
        "ShutdownDelay": group.get("ShutdownDelay"),
        "Spreads": _or_none(group.get("Spreads")),
        "StopAfterClientDisconnect": None,
        "Tasks": [_task(t, restart) for t in group.get("Tasks") or []] or None,
        "Update": _update(job, group),
        "Volumes": _or_none(group.get("Volumes")),
    }


def _job_update(job: dict[str, Any]) -> dict[str, Any]:
    """What stays of the job's update strategy at the job level: Stagger and MaxParallel."""
    update = job.get("Update")
    if update is None and _job_type(job) == "service":
        update = _UPDATE
    if update is None:
        return dict(_ZERO_UPDATE)
    canonical = _merged(_UPDATE, update)
    if canonical["MaxParallel"] <= 0:
        return dict(_ZERO_UPDATE)
    return {**_ZERO_UPDATE, "MaxParallel": canonical["MaxParallel"], "Stagger": canonical["Stagger"]}


def canonical_job(job: dict[str, Any], *, namespace: str, region: str) -> dict[str, Any]:
    """The ``structs.Job`` Nomad stores for the submitted ``api.Job``, in ``namespace`` and
    ``region`` (the agent chooses both), without the fields the server sets on a write."""
    job_id = _given(job, "ID", "")
    return {
        "Affinities": _or_none(job.get("Affinities")),
        "AllAtOnce": _given(job, "AllAtOnce", False),
        "Constraints": _constraints(job.get("Constraints")),
        "ConsulNamespace": "",
        "Datacenters": job.get("Datacenters") or ["*"],
        "DispatchIdempotencyToken": "",
        "Dispatched": False,
        "ID": job_id,
        "Meta": _or_none(job.get("Meta")),
        "Multiregion": job.get("Multiregion"),
        "Name": _given(job, "Name", job_id),
        "Namespace": namespace,
        "NodePool": _given(job, "NodePool", "") or "default",
        "NomadTokenID": "",
        "ParameterizedJob": job.get("ParameterizedJob"),
        "ParentID": _given(job, "ParentID", ""),
        "Payload": job.get("Payload") or None,
        "Periodic": job.get("Periodic"),
        "Priority": _given(job, "Priority", 50),
        "Region": region,
        "Spreads": _or_none(job.get("Spreads")),
        "TaskGroups": [_group(job, g) for g in job.get("TaskGroups") or []] or None,
        "Type": _job_type(job),
        "UI": job.get("UI"),
        "Update": _job_update(job),
        "VaultNamespace": _given(job, "VaultNamespace", ""),
        "VersionTag": job.get("VersionTag"),
    }
