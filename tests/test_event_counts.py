"""The events read from Nomad's event stream, counted by topic and type across the client's streams,
each name outside Nomad's own set as ``other`` (a raw HTTP server on 127.0.0.1 plays Nomad)."""

from __future__ import annotations

import pytest
import trio

from supervisor.base.errors import StreamEnded
from supervisor.nomad import NomadClient, NomadSettings

from .fakes import CHUNKED_200, RawRequest, batch_line, chunk, start_raw_http_server


async def _read_to_the_end(client: NomadClient) -> int:
    """Every batch of one stream; how many there were."""
    batches = 0
    async with client.open_event_stream({"Job": "*", "Allocation": "*"}) as stream:
        with pytest.raises(StreamEnded):
            async for _ in stream:
                batches += 1
    return batches


async def test_events_are_counted_by_topic_and_type_across_streams() -> None:
    bodies = [
        batch_line(10)
        + batch_line(11, topic="Allocation", type_="PlanResult")
        + b"{}\n"  # a heartbeat is no event
        + b"not json\n"  # skipped, not counted
        + batch_line(12, topic="Allocation", type_="AllocationUpdated"),
        batch_line(13)
        + batch_line(14, topic="Node", type_="NodeDrain")
        + batch_line(15, topic="Job", type_="SomethingNew")
        + batch_line(16, topic="Weird", type_="JobRegistered"),
    ]

    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(CHUNKED_200 + chunk(bodies.pop(0)) + b"0\r\n\r\n")

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with NomadClient(NomadSettings(addresses=(url,))) as client:
            assert await _read_to_the_end(client) == 3
            assert await _read_to_the_end(client) == 4
            counted = client.nomad_events.items()
        nursery.cancel_scope.cancel("test over")

    assert counted == [
        (("Allocation", "AllocationUpdated"), 1),
        (("Allocation", "PlanResult"), 1),
        (("Job", "JobRegistered"), 2),
        (("Job", "other"), 1),
        (("Node", "NodeDrain"), 1),
        (("other", "JobRegistered"), 1),
    ]
