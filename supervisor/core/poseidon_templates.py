"""Poseidon's template jobs read as environments, by Poseidon's own rules.

Poseidon stores an environment as the job ``template-<id>`` shaped like one of its runners: the
definition is in the job's own fields, not in a meta key (``internal/environment/
nomad_environment.go``, the getters of ``NomadEnvironment``). A daemon that takes over from
Poseidon reads them as Poseidon's loader does, so that no environment answers 404 until the client
sends it again:

- the ID from ``template-<n>``: exactly two dash-separated parts (``IsEnvironmentTemplateID``),
  ``n`` in decimal;
- the image from the task ``default-task`` of the group ``default-group`` (``Config.image``);
- ``cpuLimit`` its ``Resources.CPU`` (MHz), ``memoryLimit`` its ``Resources.MemoryMaxMB`` (0 when
  unset, which no environment may have);
- ``prewarmingPoolSize`` the meta of the group ``config``: 0 when it does not parse, or is negative,
  as Poseidon logs and takes it;
- ``networkAccess`` unless docker's ``network_mode`` is ``"none"``, and ``exposedPorts`` the ``To``
  of the dynamic ports of the runner group's first network (one beyond a port's range is left out,
  as Poseidon leaves it out).

What decodes is then checked as any environment a client sends (``environment_from_dict``): a
template with no image or no memory limit is no environment, and the reason says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..base.errors import InvalidRequest
from .environments import MAX_ID, ExecutionEnvironment, decimal, environment_from_dict
from .job_template import CLAIM_GROUP, RUNNER_GROUP, RUNNER_TASK

__all__ = ["PoseidonTemplateError", "environment_from_poseidon_job", "go_atoi", "template_environment_id"]

_TEMPLATE_WORD: Final = "template"
_POOL_SIZE_KEY: Final = "prewarmingPoolSize"
_MAX_PORT: Final = 65535


class PoseidonTemplateError(ValueError):
    """A template job that holds no valid environment; its text says why."""


def template_environment_id(job_id: str) -> int | None:
    """The environment of a template job ID ``template-<n>``, or None for any other ID."""
    parts = job_id.split("-")
    if len(parts) != 2 or parts[0] != _TEMPLATE_WORD:
        return None
    environment_id = decimal(parts[1])
    return environment_id if environment_id is not None and environment_id <= MAX_ID else None


def go_atoi(text: str) -> int | None:
    """``text`` as Go's ``strconv.Atoi`` reads it on 64 bits: an optional sign, then decimal ASCII
    digits, within an int64; None where it errs."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    value = decimal(digits)
    if value is None:
        return None
    value = -value if text.startswith("-") else value
    return value if -(2**63) <= value < 2**63 else None


def _named(items: Any, name: str) -> Mapping[str, Any] | None:
    if not isinstance(items, list):
        return None
    return next((i for i in items if isinstance(i, Mapping) and i.get("Name") == name), None)


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _integer(value: Any) -> int:
    """A number of Nomad's JSON as Go would hold it in an int (0 when absent)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pool_size(groups: Sequence[Any]) -> int:
    config = _named(groups, CLAIM_GROUP) or {}
    meta = config.get("Meta")
    raw = meta.get(_POOL_SIZE_KEY) if isinstance(meta, Mapping) else None
    size = go_atoi(raw) if isinstance(raw, str) else None
    return size if size is not None and size > 0 else 0


def _ports(group: Mapping[str, Any]) -> list[int]:
    networks = group.get("Networks")
    if not isinstance(networks, list) or not networks or not isinstance(networks[0], Mapping):
        return []
    dynamic = networks[0].get("DynamicPorts")
    if not isinstance(dynamic, list):
        return []
    targets = (_integer(p.get("To")) for p in dynamic if isinstance(p, Mapping))
    return [port for port in targets if 0 < port <= _MAX_PORT]


def environment_from_poseidon_job(job: Mapping[str, Any]) -> ExecutionEnvironment:
    """The environment a template job of Poseidon holds (the job as ``GET /v1/job/:id`` answers
    it). Raises PoseidonTemplateError naming what makes it no valid environment."""
    job_id = job.get("ID")
    environment_id = template_environment_id(job_id) if isinstance(job_id, str) else None
    if environment_id is None:
        raise PoseidonTemplateError(f"{job_id!r} is not a template job ID (template-<number>)")
    groups = job.get("TaskGroups")
    group = _named(groups, RUNNER_GROUP)
    if group is None:
        raise PoseidonTemplateError(f"no group {RUNNER_GROUP}")
    task = _named(group.get("Tasks"), RUNNER_TASK)
    if task is None:
        raise PoseidonTemplateError(f"no task {RUNNER_TASK} in group {RUNNER_GROUP}")
    config = _object(task.get("Config"))
    resources = _object(task.get("Resources"))
    image = config.get("image")
    memory = _integer(resources.get("MemoryMaxMB"))
    if memory <= 0:
        raise PoseidonTemplateError(f"task {RUNNER_TASK} has no memory limit (MemoryMaxMB)")
    cpu = _integer(resources.get("CPU"))
    if cpu <= 0:
        raise PoseidonTemplateError(f"task {RUNNER_TASK} has no CPU limit (Resources.CPU)")
    definition = {
        "id": environment_id,
        "image": image if isinstance(image, str) else "",
        "prewarmingPoolSize": _pool_size(groups if isinstance(groups, list) else []),
        "cpuLimit": cpu,
        "memoryLimit": memory,
        "networkAccess": config.get("network_mode") != "none",
        "exposedPorts": _ports(group),
    }
    try:
        return environment_from_dict(definition, where=f"template-{environment_id}")
    except InvalidRequest as exc:
        raise PoseidonTemplateError(str(exc)) from exc
