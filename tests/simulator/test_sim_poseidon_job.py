"""Poseidon's runner job as its template makes it (``template-environment-job.hcl``, in API JSON),
and the networked variant a deployment configures, against the strict simulated cluster: taken,
placed by its 10 MB of disk, on a CNI network, pulling its image.

Deterministic: the cluster runs on the test's virtual clock (trio_mode, autojump), its servers on
127.0.0.1 port 0; ``settle`` waits on that clock with a hard cap.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import settle

SECOND = 10**9


def poseidon_job(job_id: str, *, network: dict[str, Any] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "image": "openhpi/docker_exec_phusion",
        "command": "sleep",
        "args": ["infinity"],
        "force_pull": True,
    }
    group: dict[str, Any] = {
        "Name": "default-group",
        "Count": 1,
        "EphemeralDisk": {"Migrate": False, "SizeMB": 10, "Sticky": False},
        "Spreads": [{"Attribute": "${node.unique.name}", "Weight": 100}],
        "RestartPolicy": {"Attempts": 3, "Delay": 15 * SECOND, "Interval": 3600 * SECOND, "Mode": "fail"},
        "ReschedulePolicy": {
            "Unlimited": False,
            "Attempts": 3,
            "Interval": 6 * 3600 * SECOND,
            "Delay": 60 * SECOND,
            "MaxDelay": 240 * SECOND,
            "DelayFunction": "exponential",
        },
        "Tasks": [
            {
                "Name": "default-task",
                "Driver": "docker",
                "KillTimeout": 0,
                "KillSignal": "SIGKILL",
                "Config": config,
                "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1},
                "Resources": {"CPU": 40, "MemoryMB": 50},
            }
        ],
    }
    if network is None:
        config["network_mode"] = "none"
    else:
        group["Networks"] = [network]
        config["ports"] = [p["Label"] for p in network.get("DynamicPorts") or []]
    config_group = {
        "Name": "config",
        "Count": 0,
        "Tasks": [
            {
                "Name": "config",
                "Driver": "exec",
                "Config": {"command": "true"},
                "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1},
                "Resources": {"CPU": 1, "MemoryMB": 10},
            }
        ],
        "Meta": {"used": "false", "prewarmingPoolSize": "0"},
    }
    return {
        "ID": job_id,
        "Name": job_id,
        "Type": "batch",
        "Datacenters": ["dc1"],
        "TaskGroups": [group, config_group],
    }


def running(cluster: SimulatedCluster, job_id: str) -> list[Any]:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return [a for a in allocs if a.client_status == "running"]


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=1)])
async def test_poseidons_runners_book_10_mb_of_disk_so_hundreds_fit_on_a_node(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    # 100 runners at 40 MHz fill the CPU of a default node; their disk would hold 2048.
    for i in range(100):
        await client.register_job(poseidon_job(f"runner-{i}"))
    await settle(cluster, lambda: sum(len(running(cluster, f"runner-{i}")) for i in range(100)) == 100)
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        (node,) = (await http.get("/sim/v1/state")).json()["nodes"]
        stored = (await http.get("/v1/job/runner-0")).json()
    assert node["resources"]["used"] == {"cpu_mhz": 4000, "memory_mb": 5000, "disk_mb": 1000}
    group = stored["TaskGroups"][0]
    assert group["EphemeralDisk"]["SizeMB"] == 10
    assert group["Spreads"][0]["Attribute"] == "${node.unique.name}"
    assert group["Tasks"][0]["Config"]["force_pull"] is True


async def test_a_networked_runner_on_secure_bridge_with_dns_is_placed(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    network = {
        "Mode": "cni/secure-bridge",
        "DNS": {"Servers": ["1.1.1.1"], "Searches": ["example.org"], "Options": ["ndots:2"]},
        "DynamicPorts": [{"Label": "8080", "To": 8080}],
    }
    await client.register_job(poseidon_job("networked", network=network))
    await settle(cluster, lambda: bool(running(cluster, "networked")))
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        stored = (await http.get("/v1/job/networked")).json()
    assert stored["TaskGroups"][0]["Networks"][0]["DNS"]["Servers"] == ["1.1.1.1"]
    (alloc,) = running(cluster, "networked")
    assert alloc.images["default-task"].startswith("openhpi/docker_exec_phusion@sha256:")
