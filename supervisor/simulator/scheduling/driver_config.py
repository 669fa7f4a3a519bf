"""A docker task's ``config`` checked against the docker driver's HCL spec (``drivers/docker/config.go``
``taskConfigSpec``), and its ``ports`` against the group network's port labels.

Nomad decodes a task's config on the client when the task starts (``hclutils.ParseHclInterface``,
then the driver's ``Port %q not found, check network block``), and a config it cannot decode fails
the task. The simulator refuses such a job at registration instead (a 500 in the texts HCL's
decoder writes), so that a job it takes is one every docker client decodes. Values convert as
``cty`` converts them (a number or a bool where a string is wanted; ``"true"``/``"false"`` where a
bool is; a numeric string where a number is); a block is an object or a list of objects with its
own attributes. Other drivers' configs are not checked.
"""

from __future__ import annotations

from typing import Any, Final

from .validation import multierror_text

__all__ = ["driver_config_problems"]

_STRING: Final = "string"
_BOOL: Final = "bool"
_NUMBER: Final = "number"
_STRINGS: Final = "list(string)"
_STRING_MAPS: Final = "list(map(string))"
_NUMBER_MAPS: Final = "list(map(number))"
_MOUNT: Final = {
    "type": _STRING,
    "target": _STRING,
    "source": _STRING,
    "readonly": _BOOL,
    "bind_options": {"propagation": _STRING},
    "tmpfs_options": {"size": _NUMBER, "mode": _NUMBER},
    "volume_options": {
        "no_copy": _BOOL,
        "labels": _STRING_MAPS,
        "driver_config": {"name": _STRING, "options": _STRING_MAPS},
    },
}
# The attributes and blocks (dicts) of the docker driver's task config, by name.
DOCKER_TASK_CONFIG: Final[dict[str, Any]] = {
    "image": _STRING,
    "advertise_ipv6_address": _BOOL,
    "args": _STRINGS,
    "auth": {"username": _STRING, "password": _STRING, "email": _STRING, "server_address": _STRING},
    "auth_soft_fail": _BOOL,
    "cap_add": _STRINGS,
    "cap_drop": _STRINGS,
    "command": _STRING,
    "cpuset_cpus": _STRING,
    "cpu_hard_limit": _BOOL,
    "cpu_cfs_period": _NUMBER,
    "container_exists_attempts": _NUMBER,
    "devices": {"host_path": _STRING, "container_path": _STRING, "cgroup_permissions": _STRING},
    "dns_search_domains": _STRINGS,
    "dns_options": _STRINGS,
    "dns_servers": _STRINGS,
    "entrypoint": _STRINGS,
    "extra_hosts": _STRINGS,
    "force_pull": _BOOL,
    "group_add": _STRINGS,
    "healthchecks": {"disable": _BOOL},
    "hostname": _STRING,
    "image_pull_timeout": _STRING,
    "init": _BOOL,
    "interactive": _BOOL,
    "ipc_mode": _STRING,
    "ipv4_address": _STRING,
    "ipv6_address": _STRING,
    "isolation": _STRING,
    "labels": _STRING_MAPS,
    "load": _STRING,
    "logging": {"type": _STRING, "driver": _STRING, "config": _STRING_MAPS},
    "mac_address": _STRING,
    "memory_hard_limit": _NUMBER,
    "mount": _MOUNT,
    "mounts": _MOUNT,
    "network_aliases": _STRINGS,
    "network_mode": _STRING,
    "oom_score_adj": _NUMBER,
    "pid_mode": _STRING,
    "pids_limit": _NUMBER,
    "port_map": _NUMBER_MAPS,
    "ports": _STRINGS,
    "privileged": _BOOL,
    "readonly_rootfs": _BOOL,
    "runtime": _STRING,
    "security_opt": _STRINGS,
    "shm_size": _NUMBER,
    "storage_opt": _STRING_MAPS,
    "sysctl": _STRING_MAPS,
    "tty": _BOOL,
    "ulimit": _STRING_MAPS,
    "userns_mode": _STRING,
    "uts_mode": _STRING,
    "volume_driver": _STRING,
    "volumes": _STRINGS,
    "work_dir": _STRING,
}
_REQUIRED: Final = ("image",)
_WANTED: Final = {_STRING: "a string", _BOOL: "a bool", _NUMBER: "a number"}


def _converts(value: Any, kind: str) -> bool:
    """Whether cty converts the JSON value to the primitive type."""
    if kind == _STRING:
        return isinstance(value, str | int | float)
    if kind == _BOOL:
        return isinstance(value, bool) or value in ("true", "false")
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _type_problem(name: str, value: Any, kind: str) -> str:
    inappropriate = f'Incorrect attribute value type: Inappropriate value for attribute "{name}": '
    if kind in _WANTED:
        return "" if _converts(value, kind) else inappropriate + f"{_WANTED[kind]} is required."
    if kind == _STRINGS:
        if not isinstance(value, list):
            return inappropriate + "list of string required."
        bad = next((i for i, item in enumerate(value) if not _converts(item, _STRING)), None)
        return "" if bad is None else inappropriate + f"element {bad}: string required."
    # A list of maps, which HCL's block-like syntax and a plain JSON object both give.
    element = _STRING if kind == _STRING_MAPS else _NUMBER
    maps = value if isinstance(value, list) else [value]
    for item in maps:
        if not isinstance(item, dict):
            return inappropriate + f"list of map of {element} required."
        if not all(_converts(v, element) for v in item.values()):
            return inappropriate + f"map of {element} required."
    return ""


def _block_problems(spec: dict[str, Any], config: Any, where: str) -> list[str]:
    """HCL decoding's errors for one block's body (an object)."""
    if not isinstance(config, dict):
        return [f"Unsupported block type: {where} must be an object."]
    problems = []
    for name, value in config.items():
        kind = spec.get(name)
        if kind is None:
            problems.append(f'Unsupported argument: An argument named "{name}" is not expected here.')
        elif isinstance(kind, dict):
            for body in value if isinstance(value, list) else [value]:
                problems += _block_problems(kind, body, f'Block "{name}"')
        elif value is not None and (problem := _type_problem(name, value, kind)):
            problems.append(problem)
    return problems


def docker_config_problems(config: Any, port_labels: set[str]) -> list[str]:
    """What decoding a docker task's config refuses, then the ports it names that the group
    network does not have."""
    config = {} if config is None else config
    problems = _block_problems(DOCKER_TASK_CONFIG, config, "config")
    if not isinstance(config, dict):
        return problems
    for name in _REQUIRED:
        if config.get(name) in (None, ""):
            problems.append(
                f'Missing required argument: The argument "{name}" is required, but no definition was found.'
            )
    ports = config.get("ports")
    if isinstance(ports, list) and not problems:
        problems += [f'Port "{p}" not found, check network block' for p in ports if str(p) not in port_labels]
    return problems


def _port_labels(group: dict[str, Any]) -> set[str]:
    labels = set()
    for network in group.get("Networks") or []:
        for port in (network.get("ReservedPorts") or []) + (network.get("DynamicPorts") or []):
            labels.add(str(port.get("Label")))
    return labels


def driver_config_problems(spec: dict[str, Any]) -> list[str]:
    """Every docker task of the canonical job whose config the driver would not take, as Nomad's
    validation nests a task's errors in its group's."""
    problems = []
    for group in spec.get("TaskGroups") or []:
        labels = _port_labels(group)
        failed = []
        for task in group.get("Tasks") or []:
            if task.get("Driver") != "docker":
                continue
            if task_problems := docker_config_problems(task.get("Config"), labels):
                decoding = multierror_text([f"failed to parse config: {p}" for p in task_problems])
                failed.append(f"Task {task.get('Name')} validation failed: {decoding}")
        if failed:
            problems.append(f"Task group {group.get('Name')} validation failed: {multierror_text(failed)}")
    return problems
