"""The event-stream reader against raw HTTP servers on 127.0.0.1 that end streams the ways Nomad does."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import trio

from supervisor.base.errors import (
    NomadPermissionDenied,
    StreamConnectionLost,
    StreamEnded,
    StreamHeartbeatTimeout,
    StreamLineTooLong,
    StreamServerError,
)
from supervisor.nomad import EventBatch, NomadClient, NomadSettings

from .fakes import CHUNKED_200, HIJACKED_200, RawRequest, batch_line, chunk, start_raw_http_server


def client_for(base_url: str, **settings: Any) -> NomadClient:
    return NomadClient(NomadSettings(addresses=(base_url,), **settings))


async def collect(client: NomadClient, **options: Any) -> tuple[list[EventBatch], Exception, int]:
    """Every batch until the stream ends, the error that ended it, and the malformed-line count."""
    batches = []
    async with client.open_event_stream({"Job": "*", "Allocation": "*"}, **options) as stream:
        with pytest.raises(Exception) as ended:  # noqa: PT011 - which error is what each test asserts
            async for batch in stream:
                batches.append(batch)
        return batches, ended.value, stream.statistics.malformed_lines


async def test_subscribes_with_topics_index_and_namespace_and_reads_batches() -> None:
    requests: list[RawRequest] = []

    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        requests.append(request)
        await stream.send_all(CHUNKED_200 + chunk(b"{}\n") + chunk(batch_line(10) + batch_line(11)))
        await stream.send_all(chunk(batch_line(12)[:30]) + chunk(batch_line(12)[30:]) + b"0\r\n\r\n")

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url, namespace="poseidon", token="s3cret") as client:
            batches, ended, malformed = await collect(client, index=10)
        nursery.cancel_scope.cancel("test over")

    assert [b.index for b in batches] == [10, 11, 12], "a line split across chunks is joined"
    assert isinstance(ended, StreamEnded)
    assert ended.last_index == 12
    assert malformed == 0
    request = requests[0]
    assert urlsplit(request.target).path == "/v1/event/stream"
    query = parse_qsl(urlsplit(request.target).query)
    assert ("index", "10") in query
    assert ("topic", "Job:*") in query
    assert ("topic", "Allocation:*") in query
    assert ("namespace", "poseidon") in query
    assert request.headers["x-nomad-token"] == "s3cret"


async def test_drop_mid_line_is_connection_lost_with_the_last_index() -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(CHUNKED_200 + chunk(b"{}\n" + batch_line(20) + batch_line(21)[:40]))
        # The server restarts: the socket closes without the chunked body's terminator.

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            batches, ended, _ = await collect(client)
        nursery.cancel_scope.cancel("test over")

    assert [b.index for b in batches] == [20]
    assert isinstance(ended, StreamConnectionLost)
    assert ended.last_index == 20
    assert "mid-line" in str(ended)


async def test_trailing_error_text_of_older_nomad_is_kept() -> None:
    text = b"rpc error: subscription closed by server, client should resubscribe"

    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(CHUNKED_200 + chunk(b"{}\n" + batch_line(30)) + chunk(text) + b"0\r\n\r\n")

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            batches, ended, _ = await collect(client)
        nursery.cancel_scope.cancel("test over")

    assert [b.index for b in batches] == [30]
    assert isinstance(ended, StreamServerError)
    assert ended.text == text.decode()
    assert ended.last_index == 30


async def test_garbage_lines_in_the_middle_are_skipped_and_counted() -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        body = b"{}\n" + batch_line(40) + b"<html>proxy hiccup</html>\n" + b'{"Index": 41, "Events": 7}\n'
        body += batch_line(-1)  # a raft index is never negative (a fuzzed stream had one, CI)
        await stream.send_all(CHUNKED_200 + chunk(body + b"\n" + batch_line(42)) + b"0\r\n\r\n")

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            batches, ended, malformed = await collect(client)
        nursery.cancel_scope.cancel("test over")

    assert [b.index for b in batches] == [40, 42]
    assert malformed == 3, "blank lines are not malformed"
    assert isinstance(ended, StreamEnded)


async def test_hijacked_stream_of_newer_nomad_ends_at_close() -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(HIJACKED_200 + b"{}\n" + batch_line(50) + batch_line(51))

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            batches, ended, _ = await collect(client)
        nursery.cancel_scope.cancel("test over")

    assert [b.index for b in batches] == [50, 51]
    assert isinstance(ended, StreamEnded)


async def test_heartbeats_keep_the_stream_alive_and_silence_times_out(autojump_clock: trio.abc.Clock) -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(CHUNKED_200 + chunk(b"{}\n"))
        for _ in range(3):
            await trio.sleep(30)
            await stream.send_all(chunk(b"{}\n"))
        await trio.sleep(30)
        await stream.send_all(chunk(batch_line(60)))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            start = trio.current_time()
            async with client.open_event_stream({"Job": "*"}, heartbeat_timeout=45) as stream:
                batch = await stream.receive()
                assert batch.index == 60
                assert trio.current_time() - start == pytest.approx(120)
                with pytest.raises(StreamHeartbeatTimeout) as ended:
                    await stream.receive()
                assert trio.current_time() - start == pytest.approx(165), "45 s after the last line"
                assert stream.statistics.heartbeats == 4
                with pytest.raises(StreamHeartbeatTimeout):
                    await stream.receive()
        nursery.cancel_scope.cancel("test over")

    assert ended.value.last_index == 60


async def test_oversize_line_ends_the_stream() -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(CHUNKED_200 + chunk(batch_line(70)) + chunk(b'{"Index":71,' + b" " * 5000))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            batches, ended, _ = await collect(client, max_line_bytes=4096)
        nursery.cancel_scope.cancel("test over")

    assert [b.index for b in batches] == [70]
    assert isinstance(ended, StreamLineTooLong)


async def test_http_error_status_before_the_stream_is_raised_with_nomads_text() -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        body = b"Permission denied"
        await stream.send_all(
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            with pytest.raises(NomadPermissionDenied, match="Permission denied"):
                async with client.open_event_stream({"Node": "*"}):
                    pass  # pragma: no cover - the subscription is refused
        nursery.cancel_scope.cancel("test over")


async def test_cancelling_the_reader_leaves_the_client_usable(autojump_clock: trio.abc.Clock) -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(CHUNKED_200 + chunk(b"{}\n" + batch_line(80)))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with client_for(url) as client:
            for _ in range(2):
                with trio.move_on_after(0.5) as scope:
                    async with client.open_event_stream({"Job": "*"}) as stream:
                        assert (await stream.receive()).index == 80
                        await stream.receive()
                assert scope.cancelled_caught
        nursery.cancel_scope.cancel("test over")


async def test_a_slow_consumer_is_not_a_silent_server(autojump_clock: trio.abc.Clock) -> None:
    async def handler(request: RawRequest, stream: trio.SocketStream) -> None:
        await stream.send_all(CHUNKED_200 + chunk(b"{}\n" + batch_line(90) + batch_line(91)))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        url = await start_raw_http_server(nursery, handler)
        async with (
            client_for(url) as client,
            client.open_event_stream({"Job": "*"}, heartbeat_timeout=45) as stream,
        ):
            assert (await stream.receive()).index == 90
            await trio.sleep(100)  # busy elsewhere, far past the heartbeat deadline
            assert (await stream.receive()).index == 91, "bytes already received are read, not timed out"
        nursery.cancel_scope.cancel("test over")
