"""The ``api`` package's structs a jobspec decodes into (Nomad 1.10.5, ``api/jobs.go``,
``api/tasks.go``, ``api/resources.go``, ``api/constraint.go``): every field in the order Go
declares it, its Go kind, and the HCL name its ``hcl`` tag gives it ("" for a field HCL does not
set, which the JSON still carries, as Go writes every field).

Kinds: ``string``, ``int``, ``uint8``, ``bool``, ``duration`` (Go values: "", 0, false when not
set); the same with ``*`` (pointers: null when not set); ``[]string``; ``map`` (``map[string]string``,
a block or an attribute); ``config`` (the driver's free ``map[string]interface{}``); ``block`` (one
nested struct) and ``blocks`` (a list of them); ``label`` and ``*label`` (the block's label);
``opaque`` (not read from HCL: null). ``UNREAD`` names, per struct, the blocks Nomad accepts there
that the simulated cluster does not read: a 400 that says so, never a silent drop.
"""

from __future__ import annotations

from typing import Any, Final, final

from attrs import frozen

__all__ = ["AFFINITY", "CONSTRAINT", "JOB", "TASK", "TASK_GROUP", "Field", "Struct", "zero"]


@final
@frozen
class Field:
    """One field of a struct: its JSON name, Go kind, HCL name and tag options."""

    json: str
    kind: str
    hcl: str = ""
    struct: Struct | None = None
    omitempty: bool = False
    required: bool = False


@final
@frozen
class Struct:
    """An ``api`` struct: its fields in Go's order, and the blocks it does not read."""

    name: str
    fields: tuple[Field, ...]
    unread: frozenset[str] = frozenset()

    def attribute(self, name: str) -> Field | None:
        """The field an attribute sets."""
        return next((f for f in self.fields if f.hcl == name and _is_attribute(f)), None)

    def block(self, name: str) -> Field | None:
        """The field a nested block sets."""
        return next((f for f in self.fields if f.hcl == name and not _is_attribute(f)), None)

    def attribute_names(self) -> list[str]:
        """The schema's attributes, sorted as gohcl's ``ImpliedBodySchema`` lists them."""
        return sorted(f.hcl for f in self.fields if f.hcl and _is_attribute(f))

    def block_names(self) -> list[str]:
        """The schema's block types (those not read too), sorted."""
        return sorted({f.hcl for f in self.fields if f.hcl and not _is_attribute(f)} | self.unread)

    def labels(self) -> list[Field]:
        """The fields a block's labels set, in order."""
        return [f for f in self.fields if f.kind in ("label", "*label")]


_BLOCK_KINDS: Final = frozenset({"block", "blocks", "map", "config", "label", "*label"})


def _is_attribute(f: Field) -> bool:
    return f.kind not in _BLOCK_KINDS


def zero(f: Field) -> Any:
    """The field's JSON when nothing set it."""
    if f.kind in ("string", "label"):
        return ""
    if f.kind in ("int", "uint8", "duration"):
        return 0
    if f.kind == "bool":
        return False
    return None


def _struct(name: str, *fields: tuple[Any, ...], unread: tuple[str, ...] = ()) -> Struct:
    return Struct(name, tuple(Field(*f) for f in fields), frozenset(unread))


CONSTRAINT: Final = _struct(
    "api.Constraint",
    ("LTarget", "string", "attribute"),
    ("RTarget", "string", "value"),
    ("Operand", "string", "operator"),
)
AFFINITY: Final = _struct(
    "api.Affinity",
    ("LTarget", "string", "attribute"),
    ("RTarget", "string", "value"),
    ("Operand", "string", "operator"),
    ("Weight", "*int8", "weight"),
)
_SPREAD: Final = _struct(
    "api.Spread",
    ("Attribute", "string", "attribute"),
    ("Weight", "*int8", "weight"),
    (
        "SpreadTarget",
        "blocks",
        "target",
        _struct("api.SpreadTarget", ("Value", "label", ""), ("Percent", "uint8", "percent")),
    ),
)
_RESTART: Final = _struct(
    "api.RestartPolicy",
    ("Interval", "*duration", "interval"),
    ("Attempts", "*int", "attempts"),
    ("Delay", "*duration", "delay"),
    ("Mode", "*string", "mode"),
    ("RenderTemplates", "*bool", "render_templates"),
)
_RESCHEDULE: Final = _struct(
    "api.ReschedulePolicy",
    ("Attempts", "*int", "attempts"),
    ("Interval", "*duration", "interval"),
    ("Delay", "*duration", "delay"),
    ("DelayFunction", "*string", "delay_function"),
    ("MaxDelay", "*duration", "max_delay"),
    ("Unlimited", "*bool", "unlimited"),
)
_MIGRATE: Final = _struct(
    "api.MigrateStrategy",
    ("MaxParallel", "*int", "max_parallel"),
    ("HealthCheck", "*string", "health_check"),
    ("MinHealthyTime", "*duration", "min_healthy_time"),
    ("HealthyDeadline", "*duration", "healthy_deadline"),
)
_UPDATE: Final = _struct(
    "api.UpdateStrategy",
    ("Stagger", "*duration", "stagger"),
    ("MaxParallel", "*int", "max_parallel"),
    ("HealthCheck", "*string", "health_check"),
    ("MinHealthyTime", "*duration", "min_healthy_time"),
    ("HealthyDeadline", "*duration", "healthy_deadline"),
    ("ProgressDeadline", "*duration", "progress_deadline"),
    ("Canary", "*int", "canary"),
    ("AutoRevert", "*bool", "auto_revert"),
    ("AutoPromote", "*bool", "auto_promote"),
)
_PORT: Final = _struct(
    "api.Port",
    ("Label", "label", ""),
    ("Value", "int", "static"),
    ("To", "int", "to"),
    ("HostNetwork", "string", "host_network"),
    ("IgnoreCollision", "bool", "ignore_collision"),
)
_NETWORK: Final = _struct(
    "api.NetworkResource",
    ("Mode", "string", "mode"),
    ("Device", "string", "device"),
    ("CIDR", "string", "cidr"),
    ("IP", "string", "ip"),
    (
        "DNS",
        "block",
        "dns",
        _struct(
            "api.DNSConfig",
            ("Servers", "[]string", "servers"),
            ("Searches", "[]string", "searches"),
            ("Options", "[]string", "options"),
        ),
    ),
    ("ReservedPorts", "blocks", "reserved_ports", _PORT),
    ("DynamicPorts", "blocks", "port", _PORT),
    ("Hostname", "string", "hostname"),
    ("MBits", "*int", "mbits"),
    ("CNI", "opaque"),
    unread=("cni",),
)
_RESOURCES: Final = _struct(
    "api.Resources",
    ("CPU", "*int", "cpu"),
    ("Cores", "*int", "cores"),
    ("MemoryMB", "*int", "memory"),
    ("MemoryMaxMB", "*int", "memory_max"),
    ("DiskMB", "*int", "disk"),
    ("Networks", "blocks", "network", _NETWORK),
    ("Devices", "opaque"),
    ("NUMA", "opaque"),
    ("SecretsMB", "*int", "secrets"),
    ("IOPS", "*int", "iops"),
    unread=("device", "numa"),
)
_LOG_CONFIG: Final = _struct(
    "api.LogConfig",
    ("MaxFiles", "*int", "max_files"),
    ("MaxFileSizeMB", "*int", "max_file_size"),
    ("Enabled", "*bool", "enabled"),
    ("Disabled", "*bool", "disabled"),
)
TASK: Final = _struct(
    "api.Task",
    ("Name", "label", "name"),
    ("Driver", "string", "driver"),
    ("User", "string", "user"),
    (
        "Lifecycle",
        "block",
        "lifecycle",
        _struct(
            "api.TaskLifecycle", ("Hook", "string", "hook", None, False, True), ("Sidecar", "bool", "sidecar")
        ),
    ),
    ("Config", "config", "config"),
    ("Constraints", "blocks", "constraint", CONSTRAINT),
    ("Affinities", "blocks", "affinity", AFFINITY),
    ("Env", "map", "env"),
    ("Services", "opaque"),
    ("Resources", "block", "resources", _RESOURCES),
    ("RestartPolicy", "block", "restart", _RESTART),
    ("Meta", "map", "meta"),
    ("KillTimeout", "*duration", "kill_timeout"),
    ("LogConfig", "block", "logs", _LOG_CONFIG),
    ("Artifacts", "opaque"),
    ("Vault", "opaque"),
    ("Consul", "opaque"),
    ("Templates", "opaque"),
    (
        "DispatchPayload",
        "block",
        "dispatch_payload",
        _struct("api.DispatchPayloadConfig", ("File", "string", "file")),
    ),
    ("VolumeMounts", "opaque"),
    ("CSIPluginConfig", "opaque", "", None, True),
    ("Leader", "bool", "leader"),
    ("ShutdownDelay", "duration", "shutdown_delay"),
    ("KillSignal", "string", "kill_signal"),
    ("Kind", "string", "kind"),
    ("ScalingPolicies", "opaque"),
    ("Identity", "opaque"),
    ("Identities", "opaque"),
    ("Actions", "opaque"),
    ("Schedule", "opaque"),
    unread=(
        "service",
        "artifact",
        "vault",
        "consul",
        "template",
        "volume_mount",
        "csi_plugin",
        "scaling",
        "identity",
        "action",
        "schedule",
    ),
)
TASK_GROUP: Final = _struct(
    "api.TaskGroup",
    ("Name", "*label", "name"),
    ("Count", "*int", "count"),
    ("Constraints", "blocks", "constraint", CONSTRAINT),
    ("Affinities", "blocks", "affinity", AFFINITY),
    ("Tasks", "blocks", "task", TASK),
    ("Spreads", "blocks", "spread", _SPREAD),
    ("Volumes", "opaque"),
    ("RestartPolicy", "block", "restart", _RESTART),
    (
        "Disconnect",
        "block",
        "disconnect",
        _struct(
            "api.DisconnectStrategy",
            ("LostAfter", "*duration", "lost_after"),
            ("StopOnClientAfter", "*duration", "stop_on_client_after"),
            ("Replace", "*bool", "replace"),
            ("Reconcile", "*string", "reconcile"),
        ),
    ),
    ("ReschedulePolicy", "block", "reschedule", _RESCHEDULE),
    (
        "EphemeralDisk",
        "block",
        "ephemeral_disk",
        _struct(
            "api.EphemeralDisk",
            ("Sticky", "*bool", "sticky"),
            ("Migrate", "*bool", "migrate"),
            ("SizeMB", "*int", "size"),
        ),
    ),
    ("Update", "block", "update", _UPDATE),
    ("Migrate", "block", "migrate", _MIGRATE),
    ("Networks", "blocks", "network", _NETWORK),
    ("Meta", "map", "meta"),
    ("Services", "opaque"),
    ("ShutdownDelay", "*duration", "shutdown_delay"),
    ("StopAfterClientDisconnect", "*duration", "stop_after_client_disconnect"),
    ("MaxClientDisconnect", "*duration", "max_client_disconnect"),
    ("Scaling", "opaque"),
    ("Consul", "opaque"),
    ("PreventRescheduleOnLost", "*bool", "prevent_reschedule_on_lost"),
    unread=("volume", "service", "scaling", "consul", "vault"),
)
JOB: Final = _struct(
    "api.Job",
    ("Region", "*string", "region"),
    ("Namespace", "*string", "namespace"),
    ("ID", "*string", "id"),
    ("Name", "*string", "name"),
    ("Type", "*string", "type"),
    ("Priority", "*int", "priority"),
    ("AllAtOnce", "*bool", "all_at_once"),
    ("Datacenters", "[]string", "datacenters"),
    ("NodePool", "*string", "node_pool"),
    ("Constraints", "blocks", "constraint", CONSTRAINT),
    ("Affinities", "blocks", "affinity", AFFINITY),
    ("TaskGroups", "blocks", "group", TASK_GROUP),
    ("Update", "block", "update", _UPDATE),
    ("Multiregion", "opaque"),
    ("Spreads", "blocks", "spread", _SPREAD),
    (
        "Periodic",
        "block",
        "periodic",
        _struct(
            "api.PeriodicConfig",
            ("Enabled", "*bool", "enabled"),
            ("Spec", "*string", "cron"),
            ("Specs", "[]string", "crons"),
            ("SpecType", "opaque"),
            ("ProhibitOverlap", "*bool", "prohibit_overlap"),
            ("TimeZone", "*string", "time_zone"),
        ),
    ),
    (
        "ParameterizedJob",
        "block",
        "parameterized",
        _struct(
            "api.ParameterizedJobConfig",
            ("Payload", "string", "payload"),
            ("MetaRequired", "[]string", "meta_required"),
            ("MetaOptional", "[]string", "meta_optional"),
        ),
    ),
    ("Reschedule", "block", "reschedule", _RESCHEDULE),
    ("Migrate", "block", "migrate", _MIGRATE),
    ("Meta", "map", "meta"),
    ("UI", "opaque"),
    ("Stop", "opaque"),
    ("ParentID", "opaque"),
    ("Dispatched", "bool"),
    ("DispatchIdempotencyToken", "opaque"),
    ("Payload", "opaque"),
    ("ConsulNamespace", "opaque"),
    ("VaultNamespace", "opaque"),
    ("NomadTokenID", "opaque"),
    ("Status", "opaque"),
    ("StatusDescription", "opaque"),
    ("Stable", "opaque"),
    ("Version", "opaque"),
    ("SubmitTime", "opaque"),
    ("CreateIndex", "opaque"),
    ("ModifyIndex", "opaque"),
    ("JobModifyIndex", "opaque"),
    ("VersionTag", "opaque"),
    unread=("multiregion", "ui", "vault"),
)
