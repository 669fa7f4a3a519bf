"""Group networks as Nomad's feasibility checker sees them: CNI networks fingerprinted per node, a
``cni/<name>`` group only where that network is, ``bridge`` with the CNI reference plugins that
Nomad's server requires of it.

Deterministic: the cluster runs on the test's virtual clock (trio_mode, autojump), its servers on
127.0.0.1 port 0; ``settle`` waits on that clock with a hard cap.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from supervisor.base.errors import NomadRequestError
from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, settle


def networked(job_id: str, mode: str, **group: Any) -> dict[str, Any]:
    job = batch_job(job_id)
    job["TaskGroups"][0]["Networks"] = [{"Mode": mode, "DynamicPorts": [{"Label": "http", "To": 8080}]}]
    job["TaskGroups"][0].update(group)
    return job


def running(cluster: SimulatedCluster, job_id: str) -> bool:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return any(a.client_status == "running" for a in allocs)


async def evaluation(cluster: SimulatedCluster, client: NomadClient, job: dict[str, Any]) -> dict[str, Any]:
    registered = await client.register_job(job)
    await settle(cluster, lambda: cluster.state.evals[registered.eval_id].status == "complete")
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        answer: dict[str, Any] = (await http.get(f"/v1/evaluation/{registered.eval_id}")).json()
    return answer


async def test_each_node_advertises_its_cni_networks_and_the_reference_plugins(
    cluster: SimulatedCluster,
) -> None:
    node_id = next(iter(cluster.state.nodes))
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        node = (await http.get(f"/v1/node/{node_id}")).json()
    modes = [n["Mode"] for n in node["NodeResources"]["Networks"]]
    assert modes == ["host", "bridge", "cni/secure-bridge"]
    assert node["Attributes"]["plugins.cni.version.bridge"] == "1.6.2"


async def test_a_cni_group_network_lands_where_the_network_is(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(networked("secure", "cni/secure-bridge"))
    await settle(cluster, lambda: running(cluster, "secure"))
    (alloc,) = cluster.state.allocs_by_job[("default", "secure")].values()
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        placed = (await http.get(f"/v1/allocation/{alloc.id}")).json()
    assert placed["AllocatedResources"]["Shared"]["Networks"][0]["Mode"] == "cni/secure-bridge"


async def test_a_cni_network_no_node_has_is_a_missing_network_on_every_node(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    answer = await evaluation(cluster, client, networked("elsewhere", "cni/other"))
    metric = answer["FailedTGAllocs"]["default-group"]
    # The network checker is one of the group's checkers, settled per computed class.
    assert metric["ConstraintFiltered"] == {"missing network": 1, "computed class ineligible": 2}
    assert metric["NodesFiltered"] == 3
    assert metric["NodesExhausted"] == 0
    assert answer["BlockedEval"], "it waits for a node that has the network"


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, cni_networks=("open", "secure-bridge"))])
async def test_the_cni_networks_are_configured_per_cluster(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(networked("open", "cni/open"))
    await settle(cluster, lambda: running(cluster, "open"))


async def test_a_bridge_network_needs_the_cni_reference_plugins(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(networked("bridged", "bridge"))
    await settle(cluster, lambda: running(cluster, "bridged"))
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        job = (await http.get("/v1/job/bridged")).json()
    constraints = job["TaskGroups"][0]["Constraints"]
    assert {"LTarget": "${attr.plugins.cni.version.bridge}", "Operand": "semver", "RTarget": ">= 0.4.0"} in [
        {k: c[k] for k in ("LTarget", "Operand", "RTarget")} for c in constraints
    ]
    assert len(constraints) == 5

    # A node without the plugins (here: a group that wants a newer bridge than any node has).
    newer = networked(
        "newer",
        "bridge",
        Constraints=[
            {"LTarget": "${attr.plugins.cni.version.bridge}", "Operand": "semver", "RTarget": ">= 2.0"}
        ],
    )
    metric = (await evaluation(cluster, client, newer))["FailedTGAllocs"]["default-group"]
    assert metric["ConstraintFiltered"] == {
        "${attr.plugins.cni.version.bridge} semver >= 2.0": 1,
        "computed class ineligible": 2,
    }


async def test_a_semver_constraint_the_simulator_cannot_read_is_refused(client: NomadClient) -> None:
    job = batch_job("tilde")
    job["Constraints"] = [{"LTarget": "${attr.nomad.version}", "Operand": "semver", "RTarget": "~> 1.10"}]
    with pytest.raises(NomadRequestError, match=r'Constraint "semver ~> 1.10" is not simulated'):
        await client.register_job(job)
