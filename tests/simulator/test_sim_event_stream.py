"""The simulated event stream against nomad-api.md §1 and §8, over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import cast

import httpx
import orjson
import pytest
import trio

from supervisor.base.errors import StreamConnectionLost
from supervisor.nomad import Allocation, Event, Node, NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, make_client, settle


async def read_lines(
    url: str, params: list[tuple[str, str | int | float | bool | None]], count: int
) -> list[bytes]:
    """The first ``count`` raw lines of a stream."""
    lines: list[bytes] = []
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(5, read=None)) as http,
        http.stream("GET", url + "/v1/event/stream", params=params) as response,
        aclosing(cast(AsyncGenerator[str, None], response.aiter_lines())) as text_lines,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        async for line in text_lines:
            lines.append(line.encode())
            if len(lines) == count:
                break
    return lines


async def test_heartbeat_on_connect_and_every_interval(
    cluster: SimulatedCluster, autojump_clock: trio.abc.Clock
) -> None:
    start = trio.current_time()
    lines = await read_lines(cluster.addresses[0], [("topic", "Job:no-such-job")], 3)
    assert lines == [b"{}", b"{}", b"{}"]
    assert trio.current_time() - start == pytest.approx(60, abs=0.5), "one on connect, then every 30 s"


async def test_one_write_one_type_for_every_topic(cluster: SimulatedCluster, client: NomadClient) -> None:
    async with client.open_event_stream(
        {"Job": "*", "Evaluation": "*", "Allocation": "*"}, index=1
    ) as stream:
        await client.register_job(batch_job("runner-a"))
        seen: list[tuple[int, str, str]] = []
        while not any(t == "AllocationUpdated" for _, _, t in seen):
            batch = await stream.receive()
            seen.extend((batch.index, e.topic, e.type) for e in batch.events)
    registered = [(topic, kind) for index, topic, kind in seen if kind == "JobRegistered"]
    assert sorted(registered) == [("Evaluation", "JobRegistered"), ("Job", "JobRegistered")]
    plan = [(topic, kind) for _, topic, kind in seen if kind == "PlanResult"]
    assert ("Allocation", "PlanResult") in plan, (
        "new allocations arrive as PlanResult, never AllocationCreated"
    )
    assert all(kind != "AllocationCreated" for _, _, kind in seen)
    indexes = [index for index, _, _ in seen]
    assert indexes == sorted(indexes)


async def test_replay_from_the_oldest_buffered_batch(nursery: trio.Nursery) -> None:
    cluster = await nursery.start(SimulatedCluster(SimConfig(seed=1, event_buffer_size=5)).run)
    async with make_client(cluster) as client:
        for i in range(6):
            await client.register_job(batch_job(f"replay-{i}"))
        await settle(
            cluster,
            lambda: (
                len(cluster.state.allocs) == 6
                and all(a.client_status == "running" for a in cluster.state.allocs.values())
            ),
        )
        oldest = cluster.servers[0].broker.oldest_index
        newest = cluster.state.index
        for index in (0, 1):  # index 0, and an index older than the buffer
            async with client.open_event_stream({"*": "*"}, index=index) as stream:
                assert (await stream.receive()).index == oldest
        async with client.open_event_stream({"*": "*"}, index=newest) as stream:
            assert (await stream.receive()).index == newest, "a buffered index is inclusive"
        async with client.open_event_stream({"*": "*"}, index=newest + 1000) as stream:
            assert (await stream.receive()).index == newest, "an index in the future gets the newest batch"


async def test_filter_keys_and_namespaces(cluster: SimulatedCluster, client: NomadClient) -> None:
    async with (
        client.open_event_stream({"Allocation": "runner-b"}, index=1) as by_job,
        client.open_event_stream({"Job": "*"}, index=1) as default_namespace,
    ):
        await client.register_job(batch_job("runner-c"))
        other = {**batch_job("runner-b"), "Namespace": "other"}
        await client.register_job(batch_job("runner-b"))
        await client.register_job(other)
        batch = await by_job.receive()
        alloc_events = [e for e in batch.events]
        assert {e.topic for e in alloc_events} == {"Allocation"}
        assert all(e.filter_keys[0] == "runner-b" for e in alloc_events), "matched through FilterKeys"
        assert all(e.namespace == "default" for e in alloc_events)
        job_events: list[Event] = []
        while len({e.key for e in job_events}) < 2:
            job_events.extend((await default_namespace.receive()).events)
        assert {e.namespace for e in job_events} == {"default"}, "the other namespace is filtered out"


async def test_node_events_use_nomads_real_types(cluster: SimulatedCluster, client: NomadClient) -> None:
    node = next(iter(cluster.state.nodes.values()))
    newest = cluster.state.index
    async with client.open_event_stream({"Node": "*"}, index=newest + 1) as stream:
        assert (await stream.receive()).index == newest, "the tail batch comes first"
        await client.set_eligibility(node.id, eligible=False)
        eligibility = (await stream.receive()).events[0]
        await client.drain_node(node.id, deadline=60)
        drain = (await stream.receive()).events[0]
    assert eligibility.type == "NodeDrain", "eligibility is NodeDrain up to Nomad 2.0.0"
    assert drain.type == "NodeDrain"
    assert drain.namespace == ""
    assert isinstance(drain.payload, Node)
    assert drain.payload.drain
    assert drain.payload.drain_strategy is not None
    assert drain.payload.drain_strategy.deadline_ns == 60_000_000_000


async def test_eligibility_is_its_own_type_from_nomad_2_0_1(nursery: trio.Nursery) -> None:
    cluster = await nursery.start(SimulatedCluster(SimConfig(nomad_version="2.0.1")).run)
    async with make_client(cluster) as client:
        node = next(iter(cluster.state.nodes.values()))
        async with client.open_event_stream({"Node": "*"}, index=cluster.state.index) as stream:
            await stream.receive()
            await client.set_eligibility(node.id, eligible=False)
            assert (await stream.receive()).events[0].type == "NodeEligibility"


async def test_hijacked_stream_from_nomad_1_11_2_has_no_chunking(nursery: trio.Nursery) -> None:
    cluster = await nursery.start(SimulatedCluster(SimConfig(nomad_version="1.11.3")).run)
    host, port = cluster.addresses[0].removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(b"GET /v1/event/stream?topic=Job:x HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"{}\n" not in data:
        data += await stream.receive_some(4096)
    await stream.aclose()
    head = data.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 200 ok")
    assert b"transfer-encoding" not in head
    assert b"content-length" not in head


async def test_stream_ends_without_a_final_line_when_its_server_restarts(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    async with client.open_event_stream({"Job": "*"}, index=1) as stream:
        await client.register_job(batch_job("runner-d"))
        received = [await stream.receive()]
        cluster.restart_server("server-1", downtime=1)
        # The job's status change once it is placed may have been sent before the restart, on a
        # loaded machine: what was sent is delivered, then the stream ends.
        with pytest.raises(StreamConnectionLost) as lost:
            while True:
                received.append(await stream.receive())
    assert len(received) <= 2
    assert lost.value.last_index == received[-1].index


async def test_stream_cut_resets_every_stream(cluster: SimulatedCluster) -> None:
    clients = [make_client(cluster) for _ in range(2)]
    for i, c in enumerate(clients):
        c._current = i  # one stream on each of two servers
    async with (
        clients[0],
        clients[1],
        clients[0].open_event_stream({"Job": "*"}) as first,
        clients[1].open_event_stream({"Job": "*"}) as second,
    ):
        await trio.testing.wait_all_tasks_blocked()
        async with httpx.AsyncClient() as http:
            response = await http.post(cluster.addresses[2] + "/sim/v1/streams/cut")
        assert response.json() == {"cut": 2}
        for stream in (first, second):
            with pytest.raises(StreamConnectionLost):
                await stream.receive()


async def test_allocation_event_payload_omits_zero_fields(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(5, read=None)) as http,
        http.stream(
            "GET", cluster.addresses[0] + "/v1/event/stream", params={"topic": "Allocation:*"}
        ) as response,
    ):
        await client.register_job(batch_job("runner-e"))
        async with aclosing(cast(AsyncGenerator[str, None], response.aiter_lines())) as lines:
            async for line in lines:
                if line != "{}":
                    break
    event = orjson.loads(line)["Events"][0]
    alloc = event["Payload"]["Allocation"]
    assert event["Type"] == "PlanResult"
    assert event["FilterKeys"] == ["runner-e", ""]
    assert alloc["ClientStatus"] == "pending"
    for omitted in (
        "NextAllocation",
        "PreviousAllocation",
        "DesiredTransition",
        "TaskStates",
        "Job",
        "FollowupEvalID",
        "RescheduleTracker",
    ):
        assert omitted not in alloc, omitted
    assert isinstance(alloc["CreateTime"], int)
    typed = Allocation(id=alloc["ID"])
    assert typed.next_allocation == ""


async def test_node_status_changes_are_node_stream_events(
    cluster: SimulatedCluster, client: NomadClient, autojump_clock: trio.abc.Clock
) -> None:
    node = next(iter(cluster.state.nodes.values()))
    async with client.open_event_stream({"Node": node.id}, index=cluster.state.index + 1) as stream:
        cluster.agents.restarts.restart_agent(node, downtime=60)
        seen: list[tuple[str, str]] = []
        while [s for _, s in seen[-1:]] != ["ready"] or len(seen) < 2:
            for event in (await stream.receive()).events:
                assert isinstance(event.payload, Node)
                seen.append((event.type, event.payload.status))
    assert seen == [
        ("NodeStreamEvent", "down"),
        ("NodeRegistration", "initializing"),
        ("NodeStreamEvent", "ready"),
    ], "status changes are NodeStreamEvent (the docs' NodeEvent is never sent); the agent registers again"
