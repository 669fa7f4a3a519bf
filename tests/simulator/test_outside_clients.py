"""Clients none of us wrote must work against the simulated cluster: python-nomad (synchronous, run in a
thread), and our own client through the same round trip."""

from __future__ import annotations

import queue
from typing import Any

import nomad
import trio

from supervisor.nomad import Allocation, Event, Job
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, make_client, settle

JOB_ID = "round-trip"


async def test_python_nomad_round_trip(nursery: trio.Nursery) -> None:
    cluster = await nursery.start(SimulatedCluster(SimConfig(seed=5, heartbeat_interval=0.2)).run)
    host, port = cluster.addresses[0].removeprefix("http://").split(":")
    client = nomad.Nomad(host=host, port=int(port), timeout=5)

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    thread, stop_stream, events = client.event.stream.get_stream(
        index=0, topic=[f"Job:{JOB_ID}", f"Allocation:{JOB_ID}"]
    )
    thread.start()
    try:
        registered = await call(client.jobs.register_job, {"Job": batch_job(JOB_ID)})
        assert registered["EvalID"]
        await settle(
            cluster, lambda: any(a.client_status == "running" for a in cluster.state.allocs.values())
        )

        jobs = await call(client.jobs.get_jobs)
        assert [j["ID"] for j in jobs] == [JOB_ID]
        assert await call(client.jobs.__contains__, JOB_ID)
        allocations = await call(client.allocations.get_allocations, resources=True)
        assert allocations[0]["JobID"] == JOB_ID
        assert allocations[0]["ClientStatus"] == "running"
        job_allocations = await call(client.job.get_allocations, JOB_ID)
        assert [a["ID"] for a in job_allocations] == [allocations[0]["ID"]]

        node_id = allocations[0]["NodeID"]
        node = await call(client.node.get_node, node_id)
        assert node["Status"] == "ready"
        await call(client.node.drain_node_with_spec, node_id, {"Deadline": 3600 * 10**9}, mark_eligible=False)
        assert (await call(client.node.get_node, node_id))["Drain"] is True
        await call(client.node.drain_node_with_spec, node_id, None, mark_eligible=True)
        node = await call(client.node.get_node, node_id)
        assert node["Drain"] is False
        assert node["SchedulingEligibility"] == "eligible"
        await call(client.node.eligible_node, node_id, ineligible=True)
        assert (await call(client.node.get_node, node_id))["SchedulingEligibility"] == "ineligible"
        await call(client.node.eligible_node, node_id, eligible=True)

        await call(client.job.deregister_job, JOB_ID, purge=True)
        assert not await call(client.jobs.__contains__, JOB_ID)

        received: list[dict[str, Any]] = []
        with trio.fail_after(10):
            while not any(e["Type"] == "JobDeregistered" for b in received for e in b["Events"]):
                try:
                    received.append(events.get_nowait())
                except queue.Empty:
                    await trio.sleep(0.05)
    finally:
        stop_stream.set()
        await trio.to_thread.run_sync(thread.join, 10)
    types = [(e["Topic"], e["Type"]) for batch in received for e in batch["Events"]]
    assert ("Job", "JobRegistered") in types
    assert ("Allocation", "PlanResult") in types
    assert ("Allocation", "AllocationUpdated") in types
    assert ("Job", "JobDeregistered") in types
    assert not thread.is_alive()


async def test_our_client_round_trip(cluster: SimulatedCluster) -> None:
    async with (
        make_client(cluster) as client,
        client.open_event_stream({"Job": JOB_ID, "Allocation": JOB_ID}) as stream,
    ):
        await client.register_job(batch_job(JOB_ID))
        await settle(
            cluster, lambda: any(a.client_status == "running" for a in cluster.state.allocs.values())
        )
        jobs = await client.list_jobs()
        assert [j.id for j in jobs.value] == [JOB_ID]
        allocations = (await client.list_allocations()).value
        assert allocations[0].client_status == "running"
        assert [a.id for a in (await client.job_allocations(JOB_ID)).value] == [allocations[0].id]
        node_id = allocations[0].node_id
        assert (await client.get_node(node_id)).value.status == "ready"
        await client.drain_node(node_id, deadline=3600)
        assert (await client.get_node(node_id)).value.drain
        await client.drain_node(node_id, deadline=None, mark_eligible=True)
        node = (await client.get_node(node_id)).value
        assert not node.drain
        assert node.eligible
        await client.deregister_job(JOB_ID, purge=True)
        seen: list[Event] = []
        while not any(e.type == "JobDeregistered" for e in seen):
            seen.extend((await stream.receive()).events)
    assert any(isinstance(e.payload, Job) and e.type == "JobRegistered" for e in seen)
    assert any(isinstance(e.payload, Allocation) and e.payload.client_status == "running" for e in seen)
    async with make_client(cluster) as fresh:
        assert (await fresh.list_jobs()).value == []


async def test_python_nomad_reads_why_and_where_a_job_runs(nursery: trio.Nursery) -> None:
    cluster = await nursery.start(SimulatedCluster(SimConfig(seed=5)).run)
    host, port = cluster.addresses[0].removeprefix("http://").split(":")
    client = nomad.Nomad(host=host, port=int(port), timeout=5)

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    await call(client.jobs.register_job, {"Job": batch_job(JOB_ID, count=2)})
    await settle(
        cluster, lambda: sum(a.client_status == "running" for a in cluster.state.allocs.values()) == 2
    )
    changed = batch_job(JOB_ID, count=2, meta={"used": "true"})
    await call(client.job.register_job, JOB_ID, {"Job": changed})
    await settle(cluster, lambda: cluster.state.jobs[("default", JOB_ID)].version == 1)

    summary = await call(client.job.get_summary, JOB_ID)
    assert summary["JobID"] == JOB_ID
    assert summary["Summary"]["default-group"]["Running"] == 2
    versions = await call(client.job.get_versions, JOB_ID)
    assert [v["Version"] for v in versions["Versions"]] == [1, 0]
    evaluations = await call(client.job.get_evaluations, JOB_ID)
    assert {e["TriggeredBy"] for e in evaluations} == {"job-register"}
    placing = next(
        e for e in evaluations if e["ID"] == cluster.state.allocs[next(iter(cluster.state.allocs))].eval_id
    )
    placed = await call(client.evaluation.get_allocations, placing["ID"])
    assert {a["JobID"] for a in placed} == {JOB_ID}
    assert len(placed) == 2
    assert await call(client.evaluations.get_evaluations) != []

    peers = await call(client.status.peers.get_peers)
    assert peers == [server.rpc_address for server in cluster.servers]
    assert await call(client.regions.get_regions) == ["global"]
    namespaces = await call(client.namespaces.get_namespaces)
    assert [n["Name"] for n in namespaces] == ["default"]
    assert (await call(client.namespace.get_namespace, "default"))[
        "Description"
    ] == "Default shared namespace"
