"""The jobs Poseidon writes to a cluster, built as its code builds them: a cluster left as Poseidon
leaves it, for the switch-over scenario and the tests of adopting its environments and runners.

Poseidon parses its template (``internal/environment/template-environment-job.hcl``, here
``POSEIDON_TEMPLATE``) for every job it writes and applies an environment to it
(``NomadEnvironment.SetConfigFrom``): the environment's ID in the job's ID, ``prewarmingPoolSize``
in the meta of the group ``config``, the CPU of the task ``default-task`` (MHz) and its
``MemoryMaxMB``, the image, and the network (``SetNetworkAccess``: the configured group network
with a dynamic port per exposed port and docker's ``network_mode = ""``, or ``network_mode =
"none"`` and no group network).

- An environment is the batch job ``template-<id>`` whose group ``default-group`` keeps the
  template's count of 1 (so the job runs, and Poseidon's loader takes only running template jobs),
  registered with ``force_pull`` (``NomadEnvironment.Register``).
- Poseidon's loader (``NomadEnvironmentManager.load``) takes a template job only while its status is
  ``running``, and reads the environment back with the getters of ``NomadEnvironment``
  (``poseidon_loads``): what a switch back to Poseidon finds of the templates a daemon wrote.
- A runner is the batch job ``<id>-<uuid>``, ``force_pull`` as asked (true when a PUT fills the
  pool, false when a claim replaces a runner), the meta of its group ``config`` replaced by
  ``{"used": "false"}`` (``APIClient.RegisterRunnerJob``). A claim reads the job back from Nomad
  and registers it again with ``used`` and ``timeout`` set (``APIClient.SetRunnerMetaUsed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from ..core.job_template import CLAIM_GROUP, POSEIDON_TEMPLATE, RUNNER_GROUP, RUNNER_TASK
from ..core.poseidon_templates import go_atoi

__all__ = [
    "POSEIDON_NETWORK",
    "claimed_by_poseidon",
    "poseidon_loads",
    "poseidon_runner_job",
    "poseidon_template_job",
]

# Poseidon's default ``nomad.network``: a nomadApi.NetworkResource in bridge mode, no DNS.
POSEIDON_NETWORK: Final[Mapping[str, Any]] = {"Mode": "bridge"}


def _named(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(item for item in items if item.get("Name") == name)


def _job(environment: Mapping[str, Any], job_id: str, network: Mapping[str, Any]) -> dict[str, Any]:
    """The template parsed anew with the environment (Poseidon's API JSON) applied."""
    job: dict[str, Any] = orjson.loads(orjson.dumps(POSEIDON_TEMPLATE))
    job["ID"] = job["Name"] = job_id
    runner = _named(job["TaskGroups"], RUNNER_GROUP)
    task = _named(runner["Tasks"], RUNNER_TASK)
    config_group = _named(job["TaskGroups"], CLAIM_GROUP)
    pool_size = str(environment["prewarmingPoolSize"])
    config_group["Meta"] = {**config_group["Meta"], "prewarmingPoolSize": pool_size}
    task["Resources"]["CPU"] = int(environment["cpuLimit"])
    task["Resources"]["MemoryMaxMB"] = int(environment["memoryLimit"])
    task["Config"]["image"] = environment["image"]
    if environment["networkAccess"]:
        ports: Sequence[int] = environment.get("exposedPorts") or ()
        runner["Networks"] = [
            {
                **network,
                "DynamicPorts": [{"Label": str(p), "Value": 0, "To": p, "HostNetwork": ""} for p in ports],
            }
        ]
        task["Config"]["network_mode"] = ""
    else:
        task["Config"]["network_mode"] = "none"
        runner["Networks"] = []
    return job


def _set_force_pull(job: dict[str, Any], value: bool) -> None:
    task = _named(_named(job["TaskGroups"], RUNNER_GROUP)["Tasks"], RUNNER_TASK)
    task["Config"]["force_pull"] = value


def poseidon_template_job(
    environment: Mapping[str, Any], *, network: Mapping[str, Any] = POSEIDON_NETWORK
) -> dict[str, Any]:
    """The template job Poseidon registers for ``environment`` (its ExecutionEnvironment JSON)."""
    job = _job(environment, f"template-{environment['id']}", network)
    _set_force_pull(job, True)
    return job


def poseidon_runner_job(
    environment: Mapping[str, Any],
    unique: str,
    *,
    force_pull: bool = True,
    network: Mapping[str, Any] = POSEIDON_NETWORK,
) -> dict[str, Any]:
    """The runner job ``<id>-<unique>`` Poseidon registers for ``environment``."""
    job = _job(environment, f"{environment['id']}-{unique}", network)
    _set_force_pull(job, force_pull)
    _named(job["TaskGroups"], CLAIM_GROUP)["Meta"] = {"used": "false"}
    return job


def claimed_by_poseidon(job: Mapping[str, Any], timeout: int) -> dict[str, Any]:
    """A runner job as Nomad answers it (``GET /v1/job/:id``), marked used as Poseidon marks a
    claim: ``used`` and ``timeout`` (seconds) in the meta of its group ``config``."""
    marked: dict[str, Any] = orjson.loads(orjson.dumps(job))
    group = _named(marked["TaskGroups"], CLAIM_GROUP)
    group["Meta"] = {**(group.get("Meta") or {}), "used": "true", "timeout": str(timeout)}
    return marked


# nomadApi.DefaultResources(): what FindAndValidateDefaultTask gives a task without resources.
_DEFAULT_CPU: Final = 100
_MAX_PORT: Final = 65535


def _find(items: Any, name: str) -> dict[str, Any]:
    """The item named ``name``, or an empty one: Poseidon's FindAndValidate* add what is missing."""
    found = next((i for i in items or [] if isinstance(i, dict) and i.get("Name") == name), None)
    return found if found is not None else {"Name": name}


def poseidon_loads(job: Mapping[str, Any], status: str) -> dict[str, Any] | None:
    """The environment Poseidon's loader recovers from a template job as ``GET /v1/job/:id``
    answers it, while the job's status is ``status``: None when it skips the job (not
    ``running``), else the environment's JSON as Poseidon answers it (``MarshalJSON`` of its
    getters). Poseidon skips a job without the group ``config`` too, but its own
    ``FindAndValidateConfigTaskGroup`` adds that group first, so no job is skipped for it: the
    pool size of such a job reads 0. Every getter's fallback is Poseidon's: an ID that does not
    parse is 0, a pool size that does not parse (or is negative) 0, no ``MemoryMaxMB`` 0, a task
    without resources has Nomad's default 100 MHz, a port beyond 65535 is left out."""
    if status != "running":
        return None
    parts = str(job.get("ID", "")).split("-")
    environment_id = go_atoi(parts[1]) if len(parts) > 1 else None
    group = _find(job.get("TaskGroups"), RUNNER_GROUP)
    task = _find(group.get("Tasks"), RUNNER_TASK)
    config = task.get("Config") or {}
    resources = task.get("Resources")
    cpu = resources.get("CPU") if resources else _DEFAULT_CPU
    memory = (resources or {}).get("MemoryMaxMB")
    meta = _find(job.get("TaskGroups"), CLAIM_GROUP).get("Meta") or {}
    raw_size = meta.get("prewarmingPoolSize")
    pool_size = go_atoi(raw_size) if isinstance(raw_size, str) else None
    networks = group.get("Networks") or []
    ports = [p.get("To", 0) for p in (networks[0].get("DynamicPorts") or [])] if networks else []
    return {
        "prewarmingPoolSize": max(pool_size or 0, 0),
        "cpuLimit": max(cpu or 0, 0),
        "memoryLimit": max(memory or 0, 0),
        "image": config.get("image") if isinstance(config.get("image"), str) else "",
        "networkAccess": config.get("network_mode") != "none",
        "exposedPorts": [p for p in ports if p <= _MAX_PORT] or None,
        "id": environment_id or 0,
    }
