"""The Go types Nomad 1.10.5's agent decodes request bodies into (``api`` and ``structs``), for
``gojson``: job registration (``api.JobRegisterRequest`` with its ``api.Job``), drain
(``api.NodeUpdateDrainRequest``), eligibility (``structs.NodeUpdateEligibilityRequest``) and
variables (``structs.VariableDecrypted``).

Field names and Go types are the source's. Blocks the simulator does not interpret (services,
templates, vault, volumes, scaling, identities, …) are ``Opaque``: kept as sent, only their JSON
kind checked.
"""

from __future__ import annotations

from typing import Any, Final

from .errors import NomadError
from .gojson import (
    ANY,
    BOOL,
    BYTES,
    DURATION,
    INT,
    INT8,
    INT64,
    STRING,
    UINT8,
    UINT64,
    Custom,
    GoJSONError,
    GoType,
    ListOf,
    MapOf,
    Opaque,
    Struct,
    decode_body,
    json_kind,
)
from .query import parse_go_duration_ns

__all__ = [
    "JOB_REGISTER_REQUEST",
    "NODE_UPDATE_DRAIN_REQUEST",
    "NODE_UPDATE_ELIGIBILITY_REQUEST",
    "VARIABLE_DECRYPTED",
    "decode_request",
]

_STRINGS: Final = ListOf(STRING, "[]string")
_STRING_MAP: Final = MapOf(STRING, "map[string]string")


def _api(name: str, **fields: GoType) -> Struct:
    return Struct(f"api.{name}", fields)


def _slice_of(struct: Struct, *, pointers: bool = True) -> ListOf:
    return ListOf(struct, f"[]{'*' if pointers else ''}{struct.name}")


def _opaque_list(name: str) -> ListOf:
    return ListOf(Opaque(f"api.{name}"), f"[]*api.{name}")


_CONSTRAINT: Final = _api("Constraint", LTarget=STRING, RTarget=STRING, Operand=STRING)
_AFFINITY: Final = _api("Affinity", LTarget=STRING, RTarget=STRING, Operand=STRING, Weight=INT8)
_SPREAD: Final = _api(
    "Spread",
    Attribute=STRING,
    Weight=INT8,
    SpreadTarget=_slice_of(_api("SpreadTarget", Value=STRING, Percent=UINT8)),
)
_PORT: Final = _api("Port", Label=STRING, Value=INT, To=INT, HostNetwork=STRING, IgnoreCollision=BOOL)
_NETWORK: Final = _api(
    "NetworkResource",
    Mode=STRING,
    Device=STRING,
    CIDR=STRING,
    IP=STRING,
    DNS=_api("DNSConfig", Servers=_STRINGS, Searches=_STRINGS, Options=_STRINGS),
    ReservedPorts=_slice_of(_PORT, pointers=False),
    DynamicPorts=_slice_of(_PORT, pointers=False),
    Hostname=STRING,
    MBits=INT,
    CNI=_api("CNIConfig", Args=_STRING_MAP),
)
_NETWORKS: Final = _slice_of(_NETWORK)
_RESOURCES: Final = _api(
    "Resources",
    CPU=INT,
    Cores=INT,
    MemoryMB=INT,
    MemoryMaxMB=INT,
    DiskMB=INT,
    Networks=_NETWORKS,
    Devices=_opaque_list("RequestedDevice"),
    NUMA=Opaque("api.NUMAResource"),
    SecretsMB=INT,
    IOPS=INT,
)
_RESTART_POLICY: Final = _api(
    "RestartPolicy", Interval=DURATION, Attempts=INT, Delay=DURATION, Mode=STRING, RenderTemplates=BOOL
)
_RESCHEDULE_POLICY: Final = _api(
    "ReschedulePolicy",
    Attempts=INT,
    Interval=DURATION,
    Delay=DURATION,
    DelayFunction=STRING,
    MaxDelay=DURATION,
    Unlimited=BOOL,
)
_MIGRATE: Final = _api(
    "MigrateStrategy",
    MaxParallel=INT,
    HealthCheck=STRING,
    MinHealthyTime=DURATION,
    HealthyDeadline=DURATION,
)
_UPDATE: Final = _api(
    "UpdateStrategy",
    Stagger=DURATION,
    MaxParallel=INT,
    HealthCheck=STRING,
    MinHealthyTime=DURATION,
    HealthyDeadline=DURATION,
    ProgressDeadline=DURATION,
    Canary=INT,
    AutoRevert=BOOL,
    AutoPromote=BOOL,
)
_TASK: Final = _api(
    "Task",
    Name=STRING,
    Driver=STRING,
    User=STRING,
    Lifecycle=_api("TaskLifecycle", Hook=STRING, Sidecar=BOOL),
    Config=MapOf(ANY, "map[string]interface {}"),
    Constraints=_slice_of(_CONSTRAINT),
    Affinities=_slice_of(_AFFINITY),
    Env=_STRING_MAP,
    Services=_opaque_list("Service"),
    Resources=_RESOURCES,
    RestartPolicy=_RESTART_POLICY,
    Meta=_STRING_MAP,
    KillTimeout=DURATION,
    LogConfig=_api("LogConfig", MaxFiles=INT, MaxFileSizeMB=INT, Enabled=BOOL, Disabled=BOOL),
    Artifacts=_opaque_list("TaskArtifact"),
    Vault=Opaque("api.Vault"),
    Consul=Opaque("api.Consul"),
    Templates=_opaque_list("Template"),
    DispatchPayload=_api("DispatchPayloadConfig", File=STRING),
    VolumeMounts=_opaque_list("VolumeMount"),
    CSIPluginConfig=Opaque("api.TaskCSIPluginConfig"),
    Leader=BOOL,
    ShutdownDelay=DURATION,
    KillSignal=STRING,
    Kind=STRING,
    ScalingPolicies=_opaque_list("ScalingPolicy"),
    Identity=Opaque("api.WorkloadIdentity"),
    Identities=_opaque_list("WorkloadIdentity"),
    Actions=_opaque_list("Action"),
    Schedule=Opaque("api.TaskSchedule"),
)
_TASK_GROUP: Final = _api(
    "TaskGroup",
    Name=STRING,
    Count=INT,
    Constraints=_slice_of(_CONSTRAINT),
    Affinities=_slice_of(_AFFINITY),
    Tasks=_slice_of(_TASK),
    Spreads=_slice_of(_SPREAD),
    Volumes=MapOf(Opaque("api.VolumeRequest"), "map[string]*api.VolumeRequest"),
    RestartPolicy=_RESTART_POLICY,
    Disconnect=_api(
        "DisconnectStrategy",
        LostAfter=DURATION,
        StopOnClientAfter=DURATION,
        Replace=BOOL,
        Reconcile=STRING,
    ),
    ReschedulePolicy=_RESCHEDULE_POLICY,
    EphemeralDisk=_api("EphemeralDisk", Sticky=BOOL, Migrate=BOOL, SizeMB=INT),
    Update=_UPDATE,
    Migrate=_MIGRATE,
    Networks=_NETWORKS,
    Meta=_STRING_MAP,
    Services=_opaque_list("Service"),
    ShutdownDelay=DURATION,
    StopAfterClientDisconnect=DURATION,
    MaxClientDisconnect=DURATION,
    Scaling=Opaque("api.ScalingPolicy"),
    Consul=Opaque("api.Consul"),
    PreventRescheduleOnLost=BOOL,
)
_JOB: Final = _api(
    "Job",
    Region=STRING,
    Namespace=STRING,
    ID=STRING,
    Name=STRING,
    Type=STRING,
    Priority=INT,
    AllAtOnce=BOOL,
    Datacenters=_STRINGS,
    NodePool=STRING,
    Constraints=_slice_of(_CONSTRAINT),
    Affinities=_slice_of(_AFFINITY),
    TaskGroups=_slice_of(_TASK_GROUP),
    Update=_UPDATE,
    Multiregion=Opaque("api.Multiregion"),
    Spreads=_slice_of(_SPREAD),
    Periodic=_api(
        "PeriodicConfig",
        Enabled=BOOL,
        Spec=STRING,
        Specs=_STRINGS,
        SpecType=STRING,
        ProhibitOverlap=BOOL,
        TimeZone=STRING,
    ),
    ParameterizedJob=_api(
        "ParameterizedJobConfig", Payload=STRING, MetaRequired=_STRINGS, MetaOptional=_STRINGS
    ),
    Reschedule=_RESCHEDULE_POLICY,
    Migrate=_MIGRATE,
    Meta=_STRING_MAP,
    UI=Opaque("api.JobUIConfig"),
    Stop=BOOL,
    ParentID=STRING,
    Dispatched=BOOL,
    DispatchIdempotencyToken=STRING,
    Payload=BYTES,
    ConsulNamespace=STRING,
    VaultNamespace=STRING,
    NomadTokenID=STRING,
    Status=STRING,
    StatusDescription=STRING,
    Stable=BOOL,
    Version=UINT64,
    SubmitTime=INT64,
    CreateIndex=UINT64,
    ModifyIndex=UINT64,
    JobModifyIndex=UINT64,
    VersionTag=_api("JobVersionTag", Name=STRING, Description=STRING, TaggedTime=INT64),
)

# The promoted fields of an embedded WriteRequest.
_API_WRITE_REQUEST: Final = {"Region": STRING, "Namespace": STRING, "SecretID": STRING}
_STRUCTS_WRITE_REQUEST: Final = {
    "Region": STRING,
    "Namespace": STRING,
    "AuthToken": STRING,
    "IdempotencyToken": STRING,
    "Forwarded": BOOL,
}

JOB_REGISTER_REQUEST: Final = _api(
    "JobRegisterRequest",
    Submission=Opaque("api.JobSubmission"),
    Job=_JOB,
    EnforceIndex=BOOL,
    JobModifyIndex=UINT64,
    PolicyOverride=BOOL,
    PreserveCounts=BOOL,
    EvalPriority=INT,
    **_API_WRITE_REQUEST,
)
NODE_UPDATE_DRAIN_REQUEST: Final = _api(
    "NodeUpdateDrainRequest",
    NodeID=STRING,
    DrainSpec=_api("DrainSpec", Deadline=DURATION, IgnoreSystemJobs=BOOL),
    MarkEligible=BOOL,
    Meta=_STRING_MAP,
)
NODE_UPDATE_ELIGIBILITY_REQUEST: Final = Struct(
    "structs.NodeUpdateEligibilityRequest",
    {
        "NodeID": STRING,
        "Eligibility": STRING,
        "NodeEvent": Opaque("structs.NodeEvent"),
        "UpdatedAt": INT64,
        **_STRUCTS_WRITE_REQUEST,
    },
)


def _variable_lock(value: Any, name: str) -> dict[str, Any]:
    """``VariableLock.UnmarshalJSON``: TTL and LockDelay as Go duration strings or integer
    nanoseconds (any other JSON value leaves them unset), the ID a string."""
    if not isinstance(value, dict):
        aux = "struct { TTL interface {}; LockDelay interface {}; *structs.Alias }"
        raise GoJSONError(f"json: cannot unmarshal {json_kind(value)} into Go value of type {aux}")
    lock: dict[str, Any] = {"ID": "", "TTL": 0, "LockDelay": 0}
    for key, item in value.items():
        field = next((f for f in lock if f.lower() == key.lower()), None)
        if field == "ID" and item is not None:
            if not isinstance(item, str):
                raise GoJSONError(
                    f"json: cannot unmarshal {json_kind(item)} into Go struct field .ID of type string"
                )
            lock["ID"] = item
        elif field in ("TTL", "LockDelay"):
            if isinstance(item, str) and item:
                try:
                    lock[field] = parse_go_duration_ns(item)
                except ValueError as error:
                    raise GoJSONError(str(error)) from None
            elif isinstance(item, int | float) and not isinstance(item, bool):
                lock[field] = int(item)
    return lock


VARIABLE_DECRYPTED: Final = Struct(
    "structs.VariableDecrypted",
    {
        "Namespace": STRING,
        "Path": STRING,
        "Lock": Custom("structs.VariableLock", _variable_lock),
        "CreateIndex": UINT64,
        "CreateTime": INT64,
        "ModifyIndex": UINT64,
        "ModifyTime": INT64,
        "Items": MapOf(STRING, "structs.VariableItems"),
    },
)


def decode_request(body: bytes, into: Struct) -> dict[str, Any]:
    """The body decoded into the request's Go type, or Nomad's 400 with Go's text."""
    try:
        return decode_body(body, into)
    except GoJSONError as error:
        raise NomadError(400, error.text) from None
