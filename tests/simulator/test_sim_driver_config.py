"""A docker task's config checked as the docker driver decodes it, and its ports against the group
network's labels; refused at registration, with HCL's texts.

Deterministic: the cluster runs on the test's virtual clock (trio_mode, autojump), its servers on
127.0.0.1 port 0; ``settle`` waits on that clock with a hard cap.
"""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.base.errors import NomadRequestError
from supervisor.nomad import NomadClient
from supervisor.simulator import SimulatedCluster
from supervisor.simulator.scheduling.driver_config import docker_config_problems

from .conftest import batch_job, settle

# What a runner job and operators' templates put in a docker task's config, each key once.
EVERY_KEY_A_TEMPLATE_USES: dict[str, Any] = {
    "image": "openhpi/co_execenv_python:3.8",
    "command": "sleep",
    "args": ["infinity"],
    "entrypoint": ["/bin/sh", "-c"],
    "network_mode": "none",
    "force_pull": True,
    "volumes": ["/tmp:/shared:ro"],
    "security_opt": ["no-new-privileges"],
    "runtime": "runsc",
    "cap_drop": ["ALL"],
    "cap_add": ["CHOWN"],
    "labels": [{"team": "codeocean"}],
    "dns_servers": ["1.1.1.1"],
    "ulimit": {"nofile": "1024:2048", "nproc": "512"},
    "pids_limit": 256,
    "readonly_rootfs": False,
    "work_dir": "/workspace",
    "hostname": "runner",
    "auth": {"username": "ci", "password": "secret", "server_address": "registry.example.org"},
    "mount": [{"type": "tmpfs", "target": "/tmp", "readonly": False, "tmpfs_options": {"size": 100000}}],
}


def docker_job(job_id: str, config: Any, *, ports: tuple[str, ...] = ()) -> dict[str, Any]:
    job = batch_job(job_id)
    group = job["TaskGroups"][0]
    group["Tasks"][0]["Config"] = config
    if ports:
        group["Networks"] = [{"Mode": "bridge", "DynamicPorts": [{"Label": p} for p in ports]}]
    return job


async def test_every_option_a_template_uses_is_taken(cluster: SimulatedCluster, client: NomadClient) -> None:
    await client.register_job(docker_job("template", EVERY_KEY_A_TEMPLATE_USES))
    await settle(cluster, lambda: bool(cluster.state.allocs_by_job.get(("default", "template"))))
    assert docker_config_problems(EVERY_KEY_A_TEMPLATE_USES, set()) == []


async def test_an_unknown_option_is_refused_whole_with_hcls_text(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    config = {"image": "python:3.12", "network": "none"}
    with pytest.raises(NomadRequestError) as caught:
        await client.register_job(docker_job("typo", config))
    assert caught.value.status_code == 500
    assert caught.value.body == (
        "1 error occurred:\n"
        "\t* Task group default-group validation failed: 1 error occurred:\n"
        "\t* Task default-task validation failed: 1 error occurred:\n"
        '\t* failed to parse config: Unsupported argument: An argument named "network" is not expected here.'
        "\n\n\n\n\n\n"
    )
    assert ("default", "typo") not in cluster.state.jobs


@pytest.mark.parametrize(
    ("config", "ports", "message"),
    [
        ({"command": "sleep"}, (), 'The argument "image" is required'),
        ({"image": "python", "force_pull": "yes"}, (), 'attribute "force_pull": a bool is required'),
        ({"image": "python", "network_mode": ["none"]}, (), 'attribute "network_mode": a string is required'),
        ({"image": "python", "ports": "http"}, ("http",), 'attribute "ports": list of string required'),
        ({"image": "python", "ports": ["http"]}, ("ssh",), 'Port "http" not found, check network block'),
        ({"image": "python", "pids_limit": "many"}, (), 'attribute "pids_limit": a number is required'),
        ({"image": "python", "auth": {"user": "x"}}, (), 'An argument named "user" is not expected here'),
        ({"image": "python", "ulimit": ["nofile"]}, (), 'attribute "ulimit": list of map of string required'),
    ],
)
async def test_a_config_the_driver_cannot_decode_is_refused(
    client: NomadClient, config: dict[str, Any], ports: tuple[str, ...], message: str
) -> None:
    with pytest.raises(NomadRequestError, match=message):
        await client.register_job(docker_job("bad", config, ports=ports))


def test_values_convert_as_cty_converts_them() -> None:
    config = {"image": "python", "force_pull": "true", "hostname": 5, "pids_limit": "64", "ports": ["http"]}
    assert docker_config_problems(config, {"http"}) == []
