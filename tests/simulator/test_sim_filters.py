"""``?filter=`` on the simulated list endpoints: go-bexpr's grammar for what the daemon uses, and
Nomad's 400s for the rest (nomad-api.md §2; Nomad's paginator and go-bexpr)."""

from __future__ import annotations

import httpx
import pytest

from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, settle

LIVE = 'DesiredStatus == "run" and ClientStatus != "complete" and ClientStatus != "failed"'


async def listing(cluster: SimulatedCluster, path: str, expression: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        return await http.get(path, params={"filter": expression})


async def two_jobs_one_stopped(cluster: SimulatedCluster, client: NomadClient) -> None:
    await client.register_job(batch_job("keep"))
    await client.register_job(batch_job("stop"))
    allocs = cluster.state.allocs.values
    await settle(cluster, lambda: sum(a.client_status == "running" for a in allocs()) == 2)
    await client.deregister_job("stop")
    await settle(cluster, lambda: any(a.client_status == "complete" for a in allocs()))


async def test_live_allocations_only(cluster: SimulatedCluster, client: NomadClient) -> None:
    await two_jobs_one_stopped(cluster, client)
    everything = await listing(cluster, "/v1/allocations", "")
    assert {a["JobID"] for a in everything.json()} == {"keep", "stop"}
    live = await listing(cluster, "/v1/allocations", LIVE)
    assert live.status_code == 200, live.text
    assert [a["JobID"] for a in live.json()] == ["keep"]
    typed = await client.list_allocations(filter=LIVE, task_states=False)
    assert [a.job_id for a in typed.value] == ["keep"]
    assert typed.index >= int(everything.headers["X-Nomad-Index"])


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('(JobID == "keep" or JobID == "stop") and not ClientStatus == "complete"', ["keep"]),
        ("JobID == `stop`", ["stop"]),
        ("ClientStatus == complete", ["stop"]),
        ('JobID != "keep" and JobID != "stop"', []),
    ],
)
async def test_grammar(
    cluster: SimulatedCluster, client: NomadClient, expression: str, expected: list[str]
) -> None:
    await two_jobs_one_stopped(cluster, client)
    response = await listing(cluster, "/v1/allocations", expression)
    assert response.status_code == 200, response.text
    assert [a["JobID"] for a in response.json()] == expected


async def test_jobs_and_nodes_filter_too(cluster: SimulatedCluster, client: NomadClient) -> None:
    await two_jobs_one_stopped(cluster, client)
    jobs = await listing(cluster, "/v1/jobs", "Stop == true")
    assert [j["ID"] for j in jobs.json()] == ["stop"]
    nodes = await listing(cluster, "/v1/nodes", 'Status == "ready"')
    assert len(nodes.json()) == len(cluster.state.nodes)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('ClientStatus = "running"', "failed to read filter expression: 1:14 (13): no match found"),
        (
            '(ClientStatus == "running"',
            "failed to read filter expression: 1:27 (26): rule grouping: Unmatched parentheses",
        ),
        ('ClientStatus == "running" and', "failed to read filter expression"),
        (
            'Bogus == "x"',
            "failed to read result page: error finding value in datum: "
            '/Bogus at part 0: couldn\'t find struct field with name "Bogus"',
        ),
        ('"run" in DesiredStatus', "does not support"),
        ('ClientStatus matches "run.*"', 'does not support the operator "matches"'),
        ('TaskStates["t"].State == "running"', "does not support the nested selector"),
    ],
)
async def test_a_bad_expression_is_a_400_with_nomads_text(
    cluster: SimulatedCluster, client: NomadClient, expression: str, message: str
) -> None:
    await two_jobs_one_stopped(cluster, client)
    response = await listing(cluster, "/v1/allocations", expression)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert message in response.text


async def test_an_unknown_field_on_an_empty_list_is_not_evaluated(cluster: SimulatedCluster) -> None:
    response = await listing(cluster, "/v1/allocations", 'Bogus == "x"')
    assert response.status_code == 200, "Nomad evaluates the expression per object"
    assert response.json() == []


@pytest.mark.parametrize("sim_config", [SimConfig(seed=3, history_allocations=500)])
async def test_history_of_purged_runners_is_read_only_by_a_listing_of_everything(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    everything = await client.list_allocations(resources=True)
    assert len(everything.value) == 500
    assert {a.client_status for a in everything.value} == {"complete"}
    assert all(("default", a.job_id) not in cluster.state.jobs for a in everything.value), "jobs purged"
    live = await client.list_allocations(filter=LIVE, task_states=False)
    assert live.value == []
