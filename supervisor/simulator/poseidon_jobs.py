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

__all__ = [
    "POSEIDON_NETWORK",
    "claimed_by_poseidon",
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
