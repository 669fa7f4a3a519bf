"""The runner job as Poseidon makes it: a template job with an environment applied to it.

The template is a job in Nomad's API JSON: by default Poseidon's own
``internal/environment/template-environment-job.hcl`` as Nomad's ``/v1/jobs/parse`` gives it
(``POSEIDON_TEMPLATE``), or the operator's ``[nomad] job_template``. ``checked_template`` makes sure
it can carry a runner, adding what Poseidon's ``FindAndValidateDefaultTaskGroup`` and
``FindAndValidateConfigTaskGroup`` add when it is missing; ``build_job`` applies an environment as
Poseidon's ``SetConfigFrom`` does: the image, CPU and memory of the task ``default-task``, its
network, and ``force_pull``. Everything else the template holds (datacenters, node pool,
constraints, affinities, docker options, disk and log sizes, meta) is kept as written.

A networked runner always gets the group network of ``[nomad.network]`` (its mode, DNS, and a
dynamic port for each exposed port) and docker's ``network_mode = ""``: the container joins the
allocation's network namespace, never Docker's default bridge. Nomad maps the ports into that
namespace itself, so the docker driver's own ``ports`` (Docker's port publishing, which a container
in another's namespace cannot use) is not written. An offline runner gets ``network_mode = "none"``
and no group network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import orjson
from attrs import field, frozen

from ..base.errors import ConfigError

__all__ = [
    "CLAIM_GROUP",
    "FORCE_PULL_META",
    "POSEIDON_TEMPLATE",
    "RUNNER_GROUP",
    "RUNNER_TASK",
    "JobShape",
    "build_job",
    "checked_template",
]

RUNNER_GROUP: Final = "default-group"
RUNNER_TASK: Final = "default-task"
# A runner job's group that runs nothing and holds its claim (Poseidon's "config").
CLAIM_GROUP: Final = "config"
# The runner job's meta key that says whether its image was pulled anew: a claim rewrites the job
# with the same ``force_pull``, or Nomad would replace its container (a daemon that adopts the job
# reads it here).
FORCE_PULL_META: Final = "forcePull"
# Memory Nomad reserves for a runner on its node (MemoryMB) unless the template says otherwise;
# memoryLimit is its ceiling (MemoryMaxMB), which Nomad wants no lower.
RESERVED_MEMORY_MB: Final = 50
_SECOND: Final = 10**9

# Poseidon's template-environment-job.hcl as Nomad's /v1/jobs/parse gives it (unset fields left out).
POSEIDON_TEMPLATE: Final[Mapping[str, Any]] = {
    "ID": "template-0",
    "Name": "template-0",
    "Type": "batch",
    "Datacenters": ["dc1"],
    "TaskGroups": [
        {
            "Name": RUNNER_GROUP,
            "Count": 1,
            "EphemeralDisk": {"Migrate": False, "SizeMB": 10, "Sticky": False},
            "Spreads": [{"Attribute": "${node.unique.name}", "Weight": 100}],
            "RestartPolicy": {
                "Attempts": 3,
                "Delay": 15 * _SECOND,
                "Interval": 3600 * _SECOND,
                "Mode": "fail",
            },
            "ReschedulePolicy": {
                "Attempts": 3,
                "Interval": 6 * 3600 * _SECOND,
                "Delay": 60 * _SECOND,
                "DelayFunction": "exponential",
                "MaxDelay": 240 * _SECOND,
                "Unlimited": False,
            },
            "Tasks": [
                {
                    "Name": RUNNER_TASK,
                    "Driver": "docker",
                    "KillTimeout": 0,
                    "KillSignal": "SIGKILL",
                    "Config": {
                        "image": "openhpi/docker_exec_phusion",
                        "command": "sleep",
                        "args": ["infinity"],
                        "network_mode": "none",
                    },
                    "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1},
                    "Resources": {"CPU": 40, "MemoryMB": RESERVED_MEMORY_MB},
                }
            ],
        },
        {
            "Name": CLAIM_GROUP,
            "Count": 0,
            "Tasks": [
                {
                    "Name": CLAIM_GROUP,
                    "Driver": "exec",
                    "Config": {"command": "true"},
                    "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1},
                    "Resources": {"CPU": 1, "MemoryMB": 10},
                }
            ],
            "Meta": {"used": "false", "prewarmingPoolSize": "0"},
        },
    ],
}


class Environment(Protocol):
    """What a runner job takes of an execution environment (``environments.ExecutionEnvironment``)."""

    @property
    def image(self) -> str: ...
    @property
    def cpu_limit(self) -> float: ...
    @property
    def memory_limit(self) -> int: ...
    @property
    def network_access(self) -> bool: ...
    @property
    def exposed_ports(self) -> tuple[int, ...]: ...
    @property
    def prewarming_pool_size(self) -> int: ...


def _named(items: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((item for item in items if item.get("Name") == name), None)


def _objects(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConfigError(f"{where} must be a list of objects")
    names = [item.get("Name") for item in value]
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: each one needs a Name")
        if names.count(name) > 1:
            raise ConfigError(f"{where}: two are named {name!r}")
    return value


def _task(group: dict[str, Any], name: str, driver: str, where: str) -> dict[str, Any]:
    """The group's task ``name``, added when missing (with ``driver``)."""
    tasks = group["Tasks"] = _objects(group.get("Tasks"), f"{where}: its tasks")
    task = _named(tasks, name)
    if task is None:
        task = {"Name": name, "Driver": driver}
        tasks.append(task)
    if not isinstance(task.get("Config") or {}, dict) or not isinstance(task.get("Resources") or {}, dict):
        raise ConfigError(f"{where}: task {name}: Config and Resources must be objects")
    task["Config"] = dict(task.get("Config") or {})
    task["Resources"] = dict(task.get("Resources") or {})
    return task


def checked_template(document: Any, where: str = "the job template") -> dict[str, Any]:
    """A job (Nomad's API JSON, bare or as ``{"Job": ...}``) that can carry a runner, with what
    Poseidon adds when it is missing: the group ``default-group`` with the docker task
    ``default-task`` (``sleep infinity``), and the count-0 group ``config`` with its ``exec`` task.
    Raises ConfigError naming what makes it unfit."""
    job = document.get("Job", document) if isinstance(document, dict) and "Job" in document else document
    if not isinstance(job, dict):
        raise ConfigError(f"{where}: not a job (a JSON object of Nomad's API)")
    job = dict(orjson.loads(orjson.dumps(job)))
    if job.get("Type") not in (None, "batch"):
        raise ConfigError(f"{where}: type is {job['Type']!r}; a runner job is a batch job")
    for field_name in ("Periodic", "ParameterizedJob", "Multiregion"):
        if job.get(field_name):
            raise ConfigError(f"{where}: a runner job cannot be {field_name.lower()}")
    groups = job["TaskGroups"] = _objects(job.get("TaskGroups"), f"{where}: its groups")
    others = [g["Name"] for g in groups if g["Name"] not in (RUNNER_GROUP, CLAIM_GROUP)]
    if others:
        raise ConfigError(
            f"{where}: group {others[0]!r}: a runner job has only the groups {RUNNER_GROUP} and "
            f"{CLAIM_GROUP} (every other group would run beside each runner)"
        )
    runner = _named(groups, RUNNER_GROUP)
    if runner is None:
        runner = {"Name": RUNNER_GROUP, "Count": 1}
        groups.insert(0, runner)
    task = _task(runner, RUNNER_TASK, "docker", f"{where}: group {RUNNER_GROUP}")
    if task.get("Driver") != "docker":
        raise ConfigError(
            f"{where}: task {RUNNER_TASK} runs the driver {task.get('Driver')!r}; runners need docker"
        )
    task["Config"].update(command="sleep", args=["infinity"])
    claim = _named(groups, CLAIM_GROUP)
    if claim is None:
        claim = {"Name": CLAIM_GROUP, "Count": 0}
        groups.append(claim)
    claim_task = _task(claim, CLAIM_GROUP, "exec", f"{where}: group {CLAIM_GROUP}")
    extra = [t["Name"] for t in claim["Tasks"] if t is not claim_task]
    if extra:
        raise ConfigError(
            f"{where}: group {CLAIM_GROUP} holds a runner's claim and only its task "
            f"{CLAIM_GROUP}, not {extra[0]!r}"
        )
    claim_task["Config"]["command"] = "true"
    claim_task["Resources"] = {"CPU": 1, "MemoryMB": 10, **claim_task["Resources"]}
    return job


@frozen
class JobShape:
    """What every runner job of this daemon is built from: the template job (checked, as JSON), the
    group network of networked runners, and whether ``force_pull`` is ever written true."""

    template: bytes = field(factory=lambda: orjson.dumps(checked_template(POSEIDON_TEMPLATE)))
    network_mode: str = "bridge"
    dns_servers: tuple[str, ...] = ()
    dns_searches: tuple[str, ...] = ()
    dns_options: tuple[str, ...] = ()
    disable_force_pull: bool = False

    @classmethod
    def of(cls, template: Mapping[str, Any], **settings: Any) -> JobShape:
        """A shape from a template job (which ``checked_template`` checks) and the other fields."""
        return cls(orjson.dumps(checked_template(template)), **settings)

    def network(self, ports: Sequence[int]) -> dict[str, Any]:
        """The group network of a networked runner exposing ``ports``."""
        network: dict[str, Any] = {"Mode": self.network_mode}
        if self.dns_servers or self.dns_searches or self.dns_options:
            network["DNS"] = {
                "Servers": list(self.dns_servers),
                "Searches": list(self.dns_searches),
                "Options": list(self.dns_options),
            }
        network["DynamicPorts"] = [{"Label": str(p), "To": p} for p in ports]
        return network


def build_job(
    shape: JobShape,
    environment: Environment,
    job_id: str,
    *,
    count: int,
    force_pull: bool,
    claim: Mapping[str, str],
) -> dict[str, Any]:
    """The template with the environment applied (Poseidon's ``SetConfigFrom``), named ``job_id``,
    its runner group at ``count``, ``force_pull`` as asked (never with ``disable_force_pull``), and
    ``claim`` in the meta of its claim group."""
    job: dict[str, Any] = orjson.loads(shape.template)
    job["ID"] = job["Name"] = job_id
    groups: list[dict[str, Any]] = job["TaskGroups"]
    runner = _named(groups, RUNNER_GROUP)
    claim_group = _named(groups, CLAIM_GROUP)
    assert runner is not None, "a checked template has it"
    assert claim_group is not None, "a checked template has it"
    runner["Count"] = count
    task = _named(runner["Tasks"], RUNNER_TASK)
    assert task is not None, "a checked template has it"
    config = task["Config"]
    config["image"] = environment.image
    config["force_pull"] = force_pull and not shape.disable_force_pull
    resources = task["Resources"]
    reserved = resources.get("MemoryMB") or RESERVED_MEMORY_MB
    resources.update(
        CPU=max(1, round(environment.cpu_limit)),
        MemoryMB=min(reserved, environment.memory_limit),
        MemoryMaxMB=environment.memory_limit,
    )
    if environment.network_access:
        runner["Networks"] = [shape.network(environment.exposed_ports)]
        config["network_mode"] = ""
    else:
        runner["Networks"] = []
        config["network_mode"] = "none"
    claim_group["Count"] = 0
    claim_group["Meta"] = {
        **(claim_group.get("Meta") or {}),
        "prewarmingPoolSize": str(environment.prewarming_pool_size),
        **claim,
    }
    return job
