"""Execution environments and the Nomad jobs that carry them.

An environment is stored in Nomad as the template job ``template-<id>``, in a shape Poseidon's loader
reads too: the runner job's template with the environment applied (image, CPU, memory, network,
``prewarmingPoolSize`` in the meta of its group ``config``), its group ``default-group`` at count 1,
as Poseidon's template job is (Poseidon loads a template only while it runs), and our definition,
exact, in its meta. It is a service job, unlike Poseidon's batch one: a service job that is dead but
not stopped is never garbage-collected (Nomad's ``jobIsGCable``), and Nomad replaces its allocation
when that ends (its reschedule policy is unlimited), so the job keeps running. It so holds one
container per environment, as under Poseidon. Its runners are batch jobs ``<id>-<uuid>``, each
running ``sleep infinity`` in the environment's image. Both are built from the runner job's
template (``job_template.py``: Poseidon's, or the operator's ``[nomad] job_template``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson
from attrs import asdict, frozen

from ..base.errors import InvalidRequest
from .job_template import CLAIM_GROUP, FORCE_PULL_META, RUNNER_GROUP, RUNNER_TASK, JobShape, build_job

__all__ = [
    "CLAIM_GROUP",
    "DEFAULT_SHAPE",
    "RUNNER_GROUP",
    "TEMPLATE_PREFIX",
    "TEMPLATE_SHAPE",
    "TEMPLATE_SHAPE_META",
    "ExecutionEnvironment",
    "claim_meta",
    "environment_from_dict",
    "environment_from_template",
    "has_environment_meta",
    "is_current_template",
    "new_runner_id",
    "runner_environment_id",
    "runner_job",
    "runner_prefix",
    "template_job",
]

TEMPLATE_PREFIX: Final = "template-"
# The runner job of the daemon's default settings: Poseidon's template, networks in bridge mode.
DEFAULT_SHAPE: Final = JobShape()
_META_KEY: Final = "supervisor.environment"
# The template job's meta key naming its shape: "2" runs at count 1 (Poseidon's loader reads it);
# one without the key is of the first shape (count 0), which an adopting daemon registers anew.
TEMPLATE_SHAPE_META: Final = "supervisor.template"
TEMPLATE_SHAPE: Final = "2"
_SECOND: Final = 10**9
# The template's reschedule policy: its allocation is always replaced, however often it ended.
_RESCHEDULE_ALWAYS: Final = {
    "Attempts": 0,
    "Interval": 0,
    "Delay": 30 * _SECOND,
    "DelayFunction": "exponential",
    "MaxDelay": 3600 * _SECOND,
    "Unlimited": True,
}
# The largest environment ID: Go's int, as Poseidon's IDs are.
MAX_ID: Final = 2**63 - 1
# The largest CPU (MHz), memory (MB) or time (s) taken: within every integer field of Nomad's API.
MAX_AMOUNT: Final = 2**31 - 1
_API_FIELDS: Final = {
    "id": "id",
    "image": "image",
    "prewarmingPoolSize": "prewarming_pool_size",
    "cpuLimit": "cpu_limit",
    "memoryLimit": "memory_limit",
    "networkAccess": "network_access",
    "exposedPorts": "exposed_ports",
}
_REQUIRED: Final = ("image", "prewarmingPoolSize", "cpuLimit", "memoryLimit", "networkAccess", "exposedPorts")


@frozen
class ExecutionEnvironment:
    """A Poseidon execution environment: the runners' image, limits and prewarming pool size."""

    id: int
    image: str
    prewarming_pool_size: int
    cpu_limit: float
    memory_limit: int
    network_access: bool
    exposed_ports: tuple[int, ...] = ()

    def to_api(self) -> dict[str, Any]:
        """Poseidon's ExecutionEnvironment JSON."""
        values = asdict(self)
        data = {api: values[ours] for api, ours in _API_FIELDS.items()}
        data["exposedPorts"] = list(self.exposed_ports)
        cpu = self.cpu_limit
        data["cpuLimit"] = int(cpu) if float(cpu).is_integer() else cpu
        return data


def decimal(text: str) -> int | None:
    """``text`` as a non-negative integer when it is ASCII digits only ("²" is a digit to Python,
    but no number), else None."""
    return int(text) if text.isascii() and text.isdigit() else None


def _int(where: str, value: Any, *, minimum: int = 0, maximum: int = MAX_AMOUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequest(f"{where} must be an integer of at least {minimum}, got {value!r}")
    if value > maximum:
        raise InvalidRequest(f"{where} must be at most {maximum}, got {value!r}")
    return value


def _is_text(text: str) -> bool:
    """Whether ``text`` is Unicode text: no lone surrogate (JSON's ``"\\ud800"``)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def environment_from_dict(
    data: Any, *, where: str = "body", environment_id: int | None = None, snake_case: bool = False
) -> ExecutionEnvironment:
    """Validate Poseidon's ExecutionEnvironment JSON (or its snake_case form from the config file)."""
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{where} must be a JSON object")
    names = {ours: ours for ours in _API_FIELDS.values()} if snake_case else _API_FIELDS
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise InvalidRequest(f"{where}: unknown field {unknown[0]!r}")
    values = {names[key]: value for key, value in data.items()}
    if environment_id is not None:
        if "id" in values and _int(f"{where}: id", values["id"], maximum=MAX_ID) != environment_id:
            raise InvalidRequest(f"{where}.id {values['id']!r} does not match the path's {environment_id}")
        values["id"] = environment_id
    required = [_API_FIELDS[r] for r in _REQUIRED] + ([] if environment_id is not None else ["id"])
    missing = [name for name in required if name not in values]
    if missing:
        label = missing[0] if snake_case else next(k for k, v in _API_FIELDS.items() if v == missing[0])
        raise InvalidRequest(f"{where}: {label} is required")
    image = values["image"]
    if not isinstance(image, str) or not image.strip():
        raise InvalidRequest(f"{where}: image must be a non-empty string")
    if "\0" in image or not _is_text(image):
        raise InvalidRequest(f"{where}: image must be Unicode text without NUL bytes")
    cpu = values["cpu_limit"]
    if isinstance(cpu, bool) or not isinstance(cpu, int | float) or not 0 < cpu <= MAX_AMOUNT:
        raise InvalidRequest(f"{where}: cpuLimit must be a positive number up to {MAX_AMOUNT}, got {cpu!r}")
    if not isinstance(values["network_access"], bool):
        raise InvalidRequest(f"{where}: networkAccess must be true or false")
    ports = values["exposed_ports"]
    if not isinstance(ports, list | tuple):
        raise InvalidRequest(f"{where}: exposedPorts must be an array")
    return ExecutionEnvironment(
        id=_int(f"{where}: id", values["id"], maximum=MAX_ID),
        image=image.strip(),
        prewarming_pool_size=_int(
            f"{where}: prewarmingPoolSize", values["prewarming_pool_size"], maximum=10_000
        ),
        cpu_limit=float(cpu),
        memory_limit=_int(f"{where}: memoryLimit", values["memory_limit"], minimum=1),
        network_access=values["network_access"],
        exposed_ports=tuple(_int(f"{where}: exposedPorts[]", p, minimum=1, maximum=65535) for p in ports),
    )


def template_job(environment: ExecutionEnvironment, shape: JobShape = DEFAULT_SHAPE) -> dict[str, Any]:
    """The environment's template job: a service job running one runner-like container, built from
    the runner job's template (so that Nomad checks it) with ``force_pull``, as Poseidon registers
    an environment, and its definition in its meta. Poseidon's getters read it as the same
    environment, but for a CPU limit that is no integer, which its ``Resources.CPU`` holds rounded
    (Nomad takes whole MHz)."""
    job = build_job(
        shape, environment, f"{TEMPLATE_PREFIX}{environment.id}", count=1, force_pull=True, claim={}
    )
    job["Type"] = "service"
    runner = next(g for g in job["TaskGroups"] if g["Name"] == RUNNER_GROUP)
    runner["ReschedulePolicy"] = dict(_RESCHEDULE_ALWAYS)
    job["Meta"] = {
        **(job.get("Meta") or {}),
        _META_KEY: orjson.dumps(environment.to_api()).decode(),
        TEMPLATE_SHAPE_META: TEMPLATE_SHAPE,
    }
    return job


def is_current_template(meta: Mapping[str, str]) -> bool:
    """Whether a template job of ours (its meta) is of the current shape."""
    return meta.get(TEMPLATE_SHAPE_META) == TEMPLATE_SHAPE


def has_environment_meta(meta: Mapping[str, str]) -> bool:
    """Whether a template job's meta holds an environment of ours (Poseidon's holds none)."""
    return _META_KEY in meta


def environment_from_template(meta: Mapping[str, str]) -> ExecutionEnvironment | None:
    """The environment a template job's meta holds, or None when it holds none (not ours)."""
    raw = meta.get(_META_KEY)
    if not raw:
        return None
    try:
        return environment_from_dict(orjson.loads(raw), where="template meta")
    except (orjson.JSONDecodeError, InvalidRequest):
        return None


def runner_prefix(environment_id: int) -> str:
    """What every runner job ID of the environment starts with, and no other's does."""
    return f"{environment_id}-"


def new_runner_id(environment_id: int, unique: str) -> str:
    """A runner ID of the environment, which is its job's ID too, made unique by ``unique`` (a
    fresh UUID's text, from the daemon's ``Entropy``)."""
    return f"{runner_prefix(environment_id)}{unique}"


def runner_environment_id(job_id: str) -> int | None:
    """The environment of a runner job ID ``<id>-<uuid>``, or None for other jobs."""
    head, sep, tail = job_id.partition("-")
    if not sep or len(tail) != 36:
        return None
    return decimal(head)


def claim_meta(job: Mapping[str, Any]) -> dict[str, str]:
    """The claim a runner job (as ``runner_job`` writes it) holds: ``used`` and ``timeout``."""
    groups: list[dict[str, Any]] = job.get("TaskGroups") or []
    group = next((g for g in groups if g.get("Name") == CLAIM_GROUP), {})
    return dict(group.get("Meta") or {})


def runner_job(
    environment: ExecutionEnvironment,
    runner_id: str,
    *,
    used: bool = False,
    timeout: int = 0,
    avoid: Sequence[str] = (),
    force_pull: bool = False,
    shape: JobShape = DEFAULT_SHAPE,
) -> dict[str, Any]:
    """A runner job, built from ``shape``'s template; ``used`` and ``timeout`` in its claim group's
    meta let a restarted daemon know its claims (the job's own meta names its environment and
    whether its image was pulled anew, and never changes). A group of its own holds the claim:
    Nomad replaces an allocation whose task's meta changes (its own, its group's or its job's:
    ``tasksUpdated``), so a claim written to the job's meta would restart the runner's container.
    Nomad places it on none of the nodes in ``avoid`` (by node ID). A claim's update leaves them out
    and stays in place: Nomad checks the updated job's constraints against the allocation's own node
    only, and with none that node passes."""
    claim = {"used": "true" if used else "false", "timeout": str(timeout)}
    job = build_job(shape, environment, runner_id, count=1, force_pull=force_pull, claim=claim)
    job["Type"] = "batch"
    job["Meta"] = {
        **(job.get("Meta") or {}),
        "environment": str(environment.id),
        FORCE_PULL_META: "true" if _pulls(job) else "false",
    }
    if avoid:
        job["Constraints"] = [
            *(job.get("Constraints") or []),
            *({"LTarget": "${node.unique.id}", "RTarget": node_id, "Operand": "!="} for node_id in avoid),
        ]
    return job


def _pulls(job: Mapping[str, Any]) -> bool:
    """Whether the runner job's task pulls its image anew."""
    group = next(g for g in job["TaskGroups"] if g["Name"] == RUNNER_GROUP)
    task = next(t for t in group["Tasks"] if t["Name"] == RUNNER_TASK)
    return bool(task["Config"].get("force_pull"))
