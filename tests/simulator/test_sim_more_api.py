"""The routes beyond the supervisor's own, as Nomad answers them: evaluations listed and paged, job
evaluation with a forced reschedule, versions and summary, forced GC, node purge and the node's
return, namespaces; each checked over real HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, settle


def live(cluster: SimulatedCluster, job_id: str) -> list[Any]:
    return [a for a in cluster.state.allocs_by_job.get(("default", job_id), {}).values() if not a.terminal]


async def raw(cluster: SimulatedCluster, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        return await http.request(method, path, **kwargs)


async def test_evaluations_are_listed_filtered_and_paged(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    for name in ("a", "b", "c"):
        await client.register_job(batch_job(name))
    await settle(cluster, lambda: all(e.status == "complete" for e in cluster.state.evals.values()))
    listed = (await raw(cluster, "GET", "/v1/evaluations")).json()
    assert [e["JobID"] for e in listed] == ["a", "b", "c"], "by CreateIndex"
    first = await raw(cluster, "GET", "/v1/evaluations", params={"per_page": "2"})
    token = first.headers["X-Nomad-NextToken"]
    assert token == f"{listed[2]['CreateIndex']}.{listed[2]['ID']}"
    rest = (
        await raw(cluster, "GET", "/v1/evaluations", params={"per_page": "2", "next_token": token})
    ).json()
    assert [e["ID"] for e in rest] == [listed[2]["ID"]]
    only_b = (await raw(cluster, "GET", "/v1/evaluations", params={"job": "b"})).json()
    assert [e["JobID"] for e in only_b] == ["b"]
    filtered = await raw(cluster, "GET", "/v1/evaluations", params={"filter": 'JobID == "c"'})
    assert [e["JobID"] for e in filtered.json()] == ["c"]
    both = await raw(cluster, "GET", "/v1/evaluations", params={"filter": 'JobID == "c"', "job": "c"})
    assert (both.status_code, both.text) == (
        400,
        "Filter expression cannot be used with other filter parameters",
    )
    assert (await raw(cluster, "GET", "/v1/job/nope/evaluations")).json() == []
    assert (await raw(cluster, "GET", "/v1/evaluation/nope/allocations")).json() == []


async def test_unknown_objects_are_404s_with_the_query_meta(cluster: SimulatedCluster) -> None:
    for path, text in (
        ("/v1/job/nope/summary", "job not found"),
        ("/v1/job/nope/versions", "job versions not found"),
        ("/v1/namespace/nope", "Namespace not found"),
    ):
        response = await raw(cluster, "GET", path)
        assert (response.status_code, response.text) == (404, text)
        assert int(response.headers["X-Nomad-Index"]) >= 1
        assert response.headers["X-Nomad-KnownLeader"] == "true"
    evaluate = await raw(cluster, "POST", "/v1/job/nope/evaluate")
    assert (evaluate.status_code, evaluate.text) == (500, "job not found")
    purge = await raw(cluster, "POST", "/v1/node/nope/purge")
    assert (purge.status_code, purge.text) == (500, "node not found")
    wrong = await raw(cluster, "POST", "/v1/job/a/evaluate", json={"JobID": "b"})
    assert (wrong.status_code, wrong.text) == (400, "JobID not same as job name")
    typed = await raw(cluster, "POST", "/v1/job/a/evaluate", json={"JobID": 1})
    assert typed.status_code == 400
    assert typed.text.startswith("json: cannot unmarshal number into Go struct field")
    assert (await raw(cluster, "POST", "/v1/system/gc")).status_code == 405


async def test_versions_and_summary_follow_the_job(cluster: SimulatedCluster, client: NomadClient) -> None:
    await client.register_job(batch_job("versioned", count=2))
    await settle(cluster, lambda: len(live(cluster, "versioned")) == 2)
    await client.register_job(batch_job("versioned", count=2, meta={"changed": "yes"}))
    await settle(cluster, lambda: cluster.state.jobs[("default", "versioned")].version == 1)
    versions = (await raw(cluster, "GET", "/v1/job/versioned/versions")).json()
    assert [v["Version"] for v in versions["Versions"]] == [1, 0]
    assert versions["Versions"][0]["TaskGroups"][0]["Meta"] == {"changed": "yes"}
    assert versions["Diffs"] is None
    await settle(cluster, lambda: all(a.client_status == "running" for a in live(cluster, "versioned")))
    summary = (await raw(cluster, "GET", "/v1/job/versioned/summary")).json()
    assert summary["Summary"]["default-group"]["Running"] == 2
    assert summary["Summary"]["default-group"]["Queued"] == 0
    bad = await raw(cluster, "GET", "/v1/job/versioned/versions", params={"diffs": "maybe"})
    assert bad.status_code == 500
    assert bad.text.startswith('Failed to parse value of "diffs" (maybe) as a bool')


async def test_a_forced_evaluation_reschedules_a_failed_allocation_now(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    later = {"Attempts": 1, "Interval": 24 * 3600 * 10**9, "Delay": 3600 * 10**9, "DelayFunction": "constant"}
    job = batch_job("failing", restart={"Attempts": 0, "Mode": "fail"}, reschedule=later)
    await client.register_job(job)
    await settle(cluster, lambda: any(a.client_status == "running" for a in live(cluster, "failing")))
    (alloc,) = live(cluster, "failing")
    cluster.agents.fail(alloc, "crash")
    await settle(cluster, lambda: alloc.client_status == "failed")
    assert not alloc.next_allocation, "its reschedule waits an hour"

    evaluate = {"JobID": "failing", "EvalOptions": {"ForceReschedule": True}}
    response = await raw(cluster, "POST", "/v1/job/failing/evaluate", json=evaluate)
    assert response.headers["X-Nomad-Index"] == str(response.json()["EvalCreateIndex"])
    await settle(cluster, lambda: bool(alloc.next_allocation))
    replacement = cluster.state.allocs[alloc.next_allocation]
    assert alloc.desired_description == "alloc was rescheduled because it failed"
    assert replacement.previous_allocation == alloc.id
    assert replacement.reschedule_tracker is not None
    assert replacement.reschedule_tracker["Events"][-1]["PrevAllocID"] == alloc.id


async def test_forced_gc_collects_a_dead_job_at_once(cluster: SimulatedCluster, client: NomadClient) -> None:
    await client.register_job(batch_job("done"))
    await settle(cluster, lambda: len(live(cluster, "done")) == 1)
    await client.deregister_job("done")
    await settle(cluster, lambda: cluster.state.jobs[("default", "done")].status == "dead")
    await settle(cluster, lambda: all(a.client_terminal for a in cluster.state.allocs.values()))
    response = await raw(cluster, "PUT", "/v1/system/gc")
    assert (response.status_code, response.content) == (200, b"")
    assert (await raw(cluster, "GET", "/v1/job/done")).status_code == 404
    assert not cluster.state.allocs


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=3, heartbeat_grace=1.0)])
async def test_a_purged_node_loses_its_allocations_and_its_live_agent_registers_it_again(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(batch_job("moved"))
    await settle(cluster, lambda: any(a.client_status == "running" for a in live(cluster, "moved")))
    (alloc,) = live(cluster, "moved")
    node_id, created = alloc.node_id, cluster.state.nodes[alloc.node_id].create_index
    purged = (await raw(cluster, "POST", f"/v1/node/{node_id}/purge")).json()
    assert purged["NodeModifyIndex"] == purged["Index"]
    assert len(purged["EvalIDs"]) == 1
    assert (await raw(cluster, "GET", f"/v1/node/{node_id}")).status_code == 404
    await settle(cluster, lambda: alloc.client_status == "lost" and len(live(cluster, "moved")) == 1)
    assert live(cluster, "moved")[0].node_id != node_id, "replaced on another node"

    await settle(
        cluster, lambda: node_id in cluster.state.nodes and cluster.state.nodes[node_id].status == "ready"
    )
    node = (await raw(cluster, "GET", f"/v1/node/{node_id}")).json()
    assert node["CreateIndex"] > created, "registered anew"
    assert [e["Message"] for e in node["Events"]] == ["Node registered"]
