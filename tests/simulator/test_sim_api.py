"""The simulated cluster's HTTP API: Nomad's JSON, answers to bad input, blocking queries, pages,
and the allocation state machine, each checked over real HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio

from supervisor.base.errors import NomadNotFound, NomadRequestError
from supervisor.nomad import Event, NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, make_client, settle


def running(cluster: SimulatedCluster, job_id: str) -> bool:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return any(a.client_status == "running" for a in allocs)


async def raw(cluster: SimulatedCluster, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=cluster.addresses[1]) as http:
        return await http.request(method, path, **kwargs)


async def test_running_allocation_json_as_nomad_writes_it(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(batch_job("runner-1", ports=(8080,)))
    await settle(cluster, lambda: running(cluster, "runner-1"))
    alloc_id = next(iter(cluster.state.allocs))
    response = await raw(cluster, "GET", f"/v1/allocation/{alloc_id}")
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["X-Nomad-Index"]) >= 1
    data = response.json()
    for omitted in (
        "NextAllocation",
        "PreviousAllocation",
        "DesiredTransition",
        "DesiredDescription",
        "FollowupEvalID",
        "RescheduleTracker",
    ):
        assert omitted not in data, f"{omitted} is zero and must be omitted"
    assert data["Job"]["ID"] == "runner-1", "GET embeds the job"
    port = data["AllocatedResources"]["Shared"]["Ports"][0]
    assert port["To"] == 8080
    assert port["Value"] >= 20000
    assert port["HostIP"] == data["AllocatedResources"]["Shared"]["Networks"][0]["IP"]
    assert isinstance(data["CreateTime"], int)
    assert data["CreateTime"] > 10**18, "Unix nanoseconds"
    task = data["TaskStates"]["default-task"]
    assert task["State"] == "running"
    assert task["FinishedAt"] == "0001-01-01T00:00:00Z"
    assert task["StartedAt"].endswith("Z")
    assert [e["Type"] for e in task["Events"]] == ["Received", "Task Setup", "Started"]
    assert set(task["Events"][0]) >= {"Details", "DisplayMessage", "ExitCode", "KillTimeout", "Time", "Type"}
    typed = (await client.get_allocation(alloc_id)).value
    assert typed.ports[0].to == 8080


async def test_list_stubs_carry_every_field(cluster: SimulatedCluster, client: NomadClient) -> None:
    await client.register_job(batch_job("runner-2", meta={"used": "false"}))
    await settle(cluster, lambda: running(cluster, "runner-2"))
    stub = (await raw(cluster, "GET", "/v1/allocations", params={"resources": "true"})).json()[0]
    assert stub["NextAllocation"] == ""
    assert stub["DesiredTransition"] == {
        "ForceReschedule": None,
        "Migrate": None,
        "NoShutdownDelay": None,
        "Reschedule": None,
    }
    assert stub["AllocatedResources"]["Tasks"]["default-task"]["Memory"]["MemoryMaxMB"] == 256
    bare = (await raw(cluster, "GET", "/v1/allocations")).json()[0]
    assert "AllocatedResources" not in bare, "resources only with resources=true (omitempty on the stub)"
    assert "TaskStates" in bare
    jobs = (await raw(cluster, "GET", "/v1/jobs")).json()
    assert "Meta" not in jobs[0], "Meta only with meta=true"
    assert jobs[0]["JobSummary"]["Summary"]["default-group"]["Running"] == 1
    node = (await raw(cluster, "GET", "/v1/nodes")).json()[0]
    assert set(node) >= {"Address", "Drain", "SchedulingEligibility", "Status", "Version", "LastDrain"}


async def test_pagination_with_next_token(cluster: SimulatedCluster, client: NomadClient) -> None:
    for i in range(5):
        await client.register_job(batch_job(f"page-{i}"))
    first = await raw(cluster, "GET", "/v1/jobs", params={"per_page": "2"})
    assert [j["ID"] for j in first.json()] == ["page-0", "page-1"]
    assert first.headers["X-Nomad-NextToken"] == "page-2"
    listed = await client.list_jobs("page-", per_page=2)
    assert [j.id for j in listed.value] == [f"page-{i}" for i in range(5)]
    last = await raw(cluster, "GET", "/v1/jobs", params={"per_page": "2", "next_token": "page-4"})
    assert "X-Nomad-NextToken" not in last.headers


async def test_a_filtered_listing_pages_through_its_matches_only(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    for i in range(7):
        await client.register_job(batch_job(f"page-{i}"))
    wanted = 'ID == "page-1" or ID == "page-3" or ID == "page-5"'
    first = await raw(cluster, "GET", "/v1/jobs", params={"per_page": "2", "filter": wanted})
    assert [j["ID"] for j in first.json()] == ["page-1", "page-3"]
    assert first.headers["X-Nomad-NextToken"] == "page-5", "the token names the next match"
    matches = await raw(
        cluster, "GET", "/v1/jobs", params={"per_page": "2", "filter": wanted, "next_token": "page-5"}
    )
    assert [j["ID"] for j in matches.json()] == ["page-5"]
    assert "X-Nomad-NextToken" not in matches.headers


async def test_blocking_query_returns_on_change_or_after_wait(
    cluster: SimulatedCluster, client: NomadClient, autojump_clock: trio.abc.Clock
) -> None:
    node_id = next(iter(cluster.state.nodes))
    node = await client.get_node(node_id)
    start = trio.current_time()
    unchanged = await client.get_node(node_id, index=node.index, wait=5)
    elapsed = trio.current_time() - start
    assert 5 <= elapsed <= 5 * (1 + 1 / 16) + 0.01, "wait, plus up to wait/16 of jitter"
    assert unchanged.index == node.index, "no change: the same index"

    index = (await client.list_jobs()).index

    async def register_later() -> None:
        await trio.sleep(3)
        await client.register_job(batch_job("blocking-1"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(register_later)
        start = trio.current_time()
        woke = await _list_jobs_blocking(cluster, index, "60s")
    assert trio.current_time() - start == pytest.approx(3, abs=0.1), "returns as soon as the index moves"
    assert woke > index


async def _list_jobs_blocking(cluster: SimulatedCluster, index: int, wait: str) -> int:
    async with httpx.AsyncClient(base_url=cluster.addresses[0], timeout=100) as http:
        response = await http.get("/v1/jobs", params={"index": str(index), "wait": wait})
    return int(response.headers["X-Nomad-Index"])


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "text"),
    [
        ("PUT", "/v1/jobs", {"Job": {"Type": "batch"}}, 400, "Job ID hasn't been provided"),
        ("PUT", "/v1/jobs", {}, 400, "Job must be specified"),
        ("PUT", "/v1/jobs", b"{not json", 400, "invalid character 'n' looking for beginning of object key"),
        ("POST", "/v1/job/a", {"Job": {"ID": "b", "TaskGroups": []}}, 400, "Job ID does not match name"),
        ("PUT", "/v1/jobs", {"Job": {"ID": "x", "Type": "batch"}}, 500, "Missing job task groups"),
        ("GET", "/v1/job/nope", None, 404, "job not found"),
        ("GET", "/v1/allocation/nope", None, 404, "alloc not found"),
        ("GET", "/v1/node/nope", None, 404, "node not found"),
        ("GET", "/v1/evaluation/nope", None, 404, "eval not found"),
        ("POST", "/v1/node/nope/eligibility", {"Eligibility": "eligible"}, 500, "node not found"),
        ("POST", "/v1/node/nope/drain", {"DrainSpec": None}, 500, "node not found"),
        ("DELETE", "/v1/jobs", None, 405, "Invalid method"),
        ("GET", "/v1/job/x/nothing-here", None, 404, "404 page not found"),
        ("GET", "/v1/jobs?index=abc", None, 400, "Invalid index"),
        ("GET", "/v1/jobs?index=5&wait=soon", None, 400, "Invalid wait time"),
        ("GET", "/v1/event/stream?index=x", None, 400, "Unable to parse index"),
        ("GET", "/v1/event/stream?topic=Job:a:b", None, 400, "Invalid topic query"),
    ],
)
async def test_bad_input_gets_nomads_answer(
    cluster: SimulatedCluster, method: str, path: str, body: object, status: int, text: str
) -> None:
    content = body if isinstance(body, bytes) else (orjson.dumps(body) if body is not None else None)
    response = await raw(cluster, method, path, content=content)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/plain")
    assert text in response.text
    assert "Traceback" not in response.text


async def test_eligibility_errors_are_500_like_nomad(cluster: SimulatedCluster, client: NomadClient) -> None:
    node = next(iter(cluster.state.nodes.values()))
    bad = await raw(cluster, "POST", f"/v1/node/{node.id}/eligibility", json={"Eligibility": "maybe"})
    # The leader's RPC refuses it; through a follower, it comes back as an RPC error.
    forwarded = "" if cluster.leader == cluster.servers[1].name else "rpc error: "  # raw() asks server 2
    assert (bad.status_code, bad.text) == (500, f'{forwarded}invalid scheduling eligibility "maybe"')
    await client.register_job(batch_job("spread", count=3))
    await settle(cluster, lambda: len(cluster.state.live_allocs_by_node.get(node.id, ())) == 1)
    await client.drain_node(node.id, deadline=3600)
    assert (await client.get_node(node.id)).value.drain, (
        "batch allocations keep the drain open until its deadline"
    )
    with pytest.raises(NomadRequestError, match="while it is draining") as caught:
        await client.set_eligibility(node.id, eligible=True)
    assert caught.value.status_code == 500
    empty = await raw(cluster, "POST", f"/v1/node/{node.id}/drain")
    assert (empty.status_code, empty.text) == (400, "Request body is empty")


async def test_deregistering_an_unknown_job_is_a_no_op(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    index = cluster.state.index
    response = await client.deregister_job("never-registered", purge=True)
    assert (response.eval_id, response.index) == ("", 0)
    assert cluster.state.index == index, "nothing was written"


async def test_register_versions_and_identical_specs(cluster: SimulatedCluster, client: NomadClient) -> None:
    first = await client.register_job(batch_job("versions"))
    same = await client.register_job(batch_job("versions"))
    assert same.job_modify_index == first.job_modify_index, "an identical spec makes no new version"
    assert same.eval_id != first.eval_id, "but a new evaluation"
    await settle(cluster, lambda: running(cluster, "versions"))
    alloc_id = next(iter(cluster.state.allocs))
    claimed = batch_job("versions")
    config = {
        "Name": "config",
        "Count": 0,
        "Meta": {"used": "true"},
        "Tasks": [{"Name": "c", "Driver": "exec"}],
    }
    claimed["TaskGroups"].append(config)
    await client.register_job(claimed)
    job = (await client.get_job("versions")).value
    assert job.version == 1
    await settle(cluster, lambda: cluster.state.allocs[alloc_id].job_version == 1)
    assert cluster.state.allocs[alloc_id].client_status == "running", "another group's meta: in place"
    assert len(cluster.state.allocs) == 1

    await client.register_job(batch_job("versions", meta={"used": "true"}))
    await settle(cluster, lambda: len(cluster.state.allocs) == 2)
    assert cluster.state.allocs[alloc_id].desired_status == "stop", (
        "its task's meta (its own, its group's or its job's) changed: Nomad replaces the allocation"
    )


async def test_stop_purge_and_dead_status(cluster: SimulatedCluster, client: NomadClient) -> None:
    await client.register_job(batch_job("stopped"))
    await client.register_job(batch_job("purged"))
    await settle(cluster, lambda: running(cluster, "stopped") and running(cluster, "purged"))
    since = cluster.state.index
    deregistered: dict[str, Event] = {}
    async with client.open_event_stream({"Job": "*"}, index=since + 1) as stream:
        await client.deregister_job("stopped")
        await client.deregister_job("purged", purge=True)
        while len(deregistered) < 2:
            batch = await stream.receive()
            if batch.index > since:
                deregistered.update({e.key: e for e in batch.events if e.type == "JobDeregistered"})
    stopped, purged = deregistered["stopped"], deregistered["purged"]
    assert not stopped.deleted
    assert purged.deleted, "purge deletes the row at once"
    with pytest.raises(NomadNotFound):
        await client.get_job("purged")
    await settle(cluster, lambda: cluster.state.jobs[("default", "stopped")].status == "dead")
    job = (await client.get_job("stopped")).value
    assert job.stop
    assert job.version == 1, "stopping makes a new version"
    allocs = (await client.job_allocations("purged")).value
    assert len(allocs) == 1, "allocations outlive a purge until GC"
    await settle(
        cluster,
        lambda: (
            allocs[0].id in cluster.state.allocs
            and cluster.state.allocs[allocs[0].id].client_status == "complete"
        ),
    )


async def test_alloc_stop_links_the_replacement_in_the_same_write(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await client.register_job(batch_job("migrated"))
    await settle(cluster, lambda: running(cluster, "migrated"))
    old_id = next(iter(cluster.state.allocs))
    async with client.open_event_stream({"Allocation": "migrated"}, index=cluster.state.index + 1) as stream:
        await stream.receive()
        await client.stop_allocation(old_id)
        batches = [await stream.receive() for _ in range(2)]
    transition, plan = batches
    assert transition.events[0].type == "AllocationUpdateDesiredStatus"
    assert plan.events[0].type == "PlanResult"
    by_id = {e.key: e.payload for e in plan.events}
    old = by_id[old_id]
    new = next(p for k, p in by_id.items() if k != old_id)
    assert old.next_allocation == new.id  # type: ignore[union-attr]
    assert new.previous_allocation == old_id  # type: ignore[union-attr]
    assert old.desired_description == "alloc is being migrated"  # type: ignore[union-attr]
    assert new.node_id != old.node_id  # type: ignore[union-attr]


async def test_failed_allocation_restarts_then_fails_then_reschedules(
    cluster: SimulatedCluster, client: NomadClient, autojump_clock: trio.abc.Clock
) -> None:
    restart = {"Attempts": 1, "Interval": 3600 * 10**9, "Delay": 2 * 10**9, "Mode": "fail"}
    reschedule = {"Attempts": 1, "Interval": 3600 * 10**9, "Delay": 5 * 10**9, "DelayFunction": "constant"}
    await client.register_job(batch_job("flaky", restart=restart, reschedule=reschedule))
    await settle(cluster, lambda: running(cluster, "flaky"))
    alloc = next(iter(cluster.state.allocs.values()))
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        assert (
            await http.post(f"/sim/v1/allocations/{alloc.id}/fail", json={"reason": "oom"})
        ).status_code == 200
        assert alloc.client_status == "pending", "restarting in place"
        await settle(cluster, lambda: alloc.client_status == "running")
        state = (await client.get_allocation(alloc.id)).value.task_states["default-task"]
        assert state.restarts == 1
        terminated = next(e for e in state.events if e.type == "Terminated")
        assert terminated.exit_code == 137
        assert terminated.details["oom_killed"] == "true"
        start = trio.current_time()
        assert (
            await http.post(f"/sim/v1/allocations/{alloc.id}/fail", json={"reason": "crash"})
        ).status_code == 200
        assert alloc.client_status == "failed", "restart attempts are used up"
        assert alloc.followup_eval_id
        assert cluster.state.jobs[("default", "flaky")].status == "pending", "a reschedule is pending"
        await settle(cluster, lambda: bool(alloc.next_allocation))
        assert trio.current_time() - start == pytest.approx(5, abs=0.1)
        replacement = cluster.state.allocs[alloc.next_allocation]
        assert replacement.previous_allocation == alloc.id
        assert replacement.reschedule_tracker is not None
        assert replacement.reschedule_tracker["Events"][0]["PrevAllocID"] == alloc.id
        assert alloc.desired_description == "alloc was rescheduled because it failed"
        bad = await http.post(f"/sim/v1/allocations/{alloc.id}/fail", json={"reason": "boredom"})
        assert bad.status_code == 400


async def test_garbage_collection_is_silent_for_allocations(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    config = SimConfig(gc_interval=60, job_gc_threshold=600, alloc_gc_threshold=300)
    cluster = await nursery.start(SimulatedCluster(config).run)
    async with make_client(cluster) as client:
        await client.register_job(batch_job("collected"))
        await settle(cluster, lambda: running(cluster, "collected"))
        alloc_id = next(iter(cluster.state.allocs))
        async with client.open_event_stream({"Job": "collected"}, index=cluster.state.index + 1) as stream:
            await client.deregister_job("collected")
            await trio.sleep(400)
            with pytest.raises(NomadNotFound):
                await client.get_allocation(alloc_id)
            assert (await client.get_job("collected")).value.status == "dead", (
                "the job outlives its allocations"
            )
            while True:
                batch = await stream.receive()
                if batch.events[0].type == "JobBatchDeregistered":
                    break
        assert batch.events[0].deleted
        with pytest.raises(NomadNotFound):
            await client.get_job("collected")


async def test_evaluation_json_omits_zero_fields(cluster: SimulatedCluster, client: NomadClient) -> None:
    registered = await client.register_job(batch_job("evaluated"))
    await settle(cluster, lambda: cluster.state.evals[registered.eval_id].status == "complete")
    data = (await raw(cluster, "GET", f"/v1/evaluation/{registered.eval_id}")).json()
    assert data["Status"] == "complete"
    assert data["TriggeredBy"] == "job-register"
    for omitted in ("NodeID", "BlockedEval", "NextEval", "PreviousEval", "FailedTGAllocs", "WaitUntil"):
        assert omitted not in data, omitted
    assert (await client.get_evaluation(registered.eval_id)).value.node_id == ""


async def test_a_job_is_dead_once_its_allocations_are_desired_stop(nursery: trio.Nursery) -> None:
    cluster = await nursery.start(SimulatedCluster(SimConfig(task_kill_delay=30)).run)
    async with make_client(cluster) as client:
        await client.register_job(batch_job("stopping"))
        await settle(cluster, lambda: running(cluster, "stopping"))
        alloc = next(iter(cluster.state.allocs.values()))
        await client.deregister_job("stopping")
        await settle(cluster, lambda: cluster.state.jobs[("default", "stopping")].status == "dead", within=5)
        assert alloc.desired_status == "stop"
        assert alloc.client_status == "running", "the task is still shutting down"
