"""Placement by each node's CPU, memory and disk, the group's ephemeral disk counted, and a refused
placement explained in the evaluation's FailedTGAllocs as Nomad writes it.

Deterministic: the cluster runs on the test's virtual clock (trio_mode, autojump), its servers on
127.0.0.1 port 0; ``settle`` waits on that clock with a hard cap.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from supervisor.cli import main
from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, settle


def live(cluster: SimulatedCluster, job_id: str) -> int:
    return sum(not a.terminal for a in cluster.state.allocs_by_job.get(("default", job_id), {}).values())


async def failed_placement(
    cluster: SimulatedCluster, client: NomadClient, job: dict[str, Any]
) -> dict[str, Any]:
    """Register ``job`` and return its first evaluation as ``GET /v1/evaluation/:id`` answers."""
    registered = await client.register_job(job)
    await settle(cluster, lambda: cluster.state.evals[registered.eval_id].status == "complete")
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        response = await http.get(f"/v1/evaluation/{registered.eval_id}")
    assert response.status_code == 200
    evaluation: dict[str, Any] = response.json()
    return evaluation


async def test_a_node_offers_4000_mhz_8_gib_and_20_gib_of_disk_by_default(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    node_id = next(iter(cluster.state.nodes))
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        node = (await http.get(f"/v1/node/{node_id}")).json()
    resources = node["NodeResources"]
    assert resources["Cpu"]["CpuShares"] == 4000
    assert resources["Memory"]["MemoryMB"] == 8192
    assert resources["Disk"]["DiskMB"] == 20480
    assert node["Attributes"]["cpu.totalcompute"] == "4000"
    assert node["Attributes"]["memory.totalbytes"] == str(8192 * 1024 * 1024)
    assert node["Attributes"]["unique.storage.bytesfree"] == str(20480 * 1024 * 1024)


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=2, node_disk_mb=1000)])
async def test_the_groups_ephemeral_disk_is_counted_and_a_full_disk_is_named(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    # No ephemeral_disk: Nomad's 300 MB each, so three fit on a node of 1000 MB.
    evaluation = await failed_placement(cluster, client, batch_job("runners", count=7))
    assert live(cluster, "runners") == 6
    metric = evaluation["FailedTGAllocs"]["default-group"]
    assert metric["NodesEvaluated"] == 2
    assert metric["NodesExhausted"] == 2
    assert metric["DimensionExhausted"] == {"disk": 2}
    assert metric["ClassExhausted"] is None, "the nodes have no node class"
    # Nomad's ExhaustResources notes only memory and CPU of what the tasks asked.
    assert metric["ResourcesExhausted"]["default-task"]["DiskMB"] == 0
    assert evaluation["QueuedAllocations"] == {"default-group": 1}
    allocation = next(a for a in cluster.state.allocs.values() if a.job_id == "runners")
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        placed = (await http.get(f"/v1/allocation/{allocation.id}")).json()
    assert placed["AllocatedResources"]["Shared"]["DiskMB"] == 300

    small = batch_job("small", count=10)
    # As Poseidon's template: 10 MB of disk, so logs of at most 1 file of 1 MB.
    small["TaskGroups"][0]["EphemeralDisk"] = {"SizeMB": 10}
    small["TaskGroups"][0]["Tasks"][0]["LogConfig"] = {"MaxFiles": 1, "MaxFileSizeMB": 1}
    await client.register_job(small)
    await settle(cluster, lambda: live(cluster, "small") == 10)


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=3)])
async def test_memory_and_cpu_that_no_node_has_are_named_with_what_each_task_asked(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    hungry = batch_job("hungry")
    hungry["TaskGroups"][0]["Tasks"][0]["Resources"] = {"CPU": 100, "MemoryMB": 9000}
    metric = (await failed_placement(cluster, client, hungry))["FailedTGAllocs"]["default-group"]
    assert metric["DimensionExhausted"] == {"memory": 3}
    assert metric["ResourcesExhausted"]["default-task"]["MemoryMB"] == 9000
    assert metric["ResourcesExhausted"]["default-task"]["CPU"] == 0

    busy = batch_job("busy")
    # CPU is checked before memory, as AllocsFit does.
    busy["TaskGroups"][0]["Tasks"][0]["Resources"] = {"CPU": 4001, "MemoryMB": 9000}
    metric = (await failed_placement(cluster, client, busy))["FailedTGAllocs"]["default-group"]
    assert metric["DimensionExhausted"] == {"cpu": 3}
    assert metric["ResourcesExhausted"]["default-task"]["CPU"] == 4001


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=1, node_cpu_mhz=1000)])
async def test_a_stopped_allocation_frees_its_share_and_the_blocked_placement_is_made(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    # MemoryMaxMB is a ceiling, not a reservation: only CPU fills this node.
    await client.register_job(batch_job("first", count=10))
    await settle(cluster, lambda: live(cluster, "first") == 10)
    evaluation = await failed_placement(cluster, client, batch_job("second"))
    assert evaluation["FailedTGAllocs"]["default-group"]["DimensionExhausted"] == {"cpu": 1}
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        (node,) = (await http.get("/sim/v1/state")).json()["nodes"]
    assert node["resources"]["cpu_mhz"] == 1000
    assert node["resources"]["used"] == {"cpu_mhz": 1000, "memory_mb": 500, "disk_mb": 3000}
    await client.deregister_job("first")
    await settle(cluster, lambda: live(cluster, "second") == 1)


async def test_the_binpack_score_follows_what_the_node_holds(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    big = batch_job("big")
    big["TaskGroups"][0]["Tasks"][0]["Resources"] = {"CPU": 2000, "MemoryMB": 4096}
    await client.register_job(big)
    await settle(cluster, lambda: live(cluster, "big") == 1)
    allocation = next(a for a in cluster.state.allocs.values() if a.job_id == "big")
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        placed = (await http.get(f"/v1/allocation/{allocation.id}")).json()
    scores = {s["NodeID"]: s["Scores"]["binpack"] for s in placed["Metrics"]["ScoreMetaData"]}
    # Half of the CPU and half of the memory free: (10**0.5 * 2 - 2) / 18 under spread.
    assert scores[allocation.node_id] == pytest.approx((2 * 10**0.5 - 2) / 18)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--node-disk", "0"], "--node-disk must be at least 1"),
        (["simulate", "--cni", "bad name"], "'bad name' is not a CNI network name"),
    ],
)
def test_bad_node_sizes_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_node_sizes_are_positive_whole_numbers() -> None:
    with pytest.raises(ValueError, match="node_memory_mb must be a positive whole number"):
        SimConfig(node_memory_mb=0)
