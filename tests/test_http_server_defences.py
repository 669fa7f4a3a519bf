"""The API's HTTP server against slow and hostile clients: each test is the attack itself, run on
the server with small settings (what such a test tests is the defence's rule, not its default).

Where virtual time serves (``autojump_clock``), the server runs on a ``MemoryNetwork`` and the
figures are exact; the slowloris runs over real loopback sockets, on the real clock.
"""

from __future__ import annotations

from typing import Any

import h11
import pytest
import trio
import trio.testing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.network import TcpNetwork

from .http_serving import CAP, HOST, HttpClient, hello_app, serving, warnings_or_worse


async def _read_all(stream: trio.abc.Stream) -> bytes:
    """Everything the server writes until it closes."""
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data


def _upload_app() -> Starlette:
    """Reads the body whole, as the API's routes do, and answers a bug's 500 as the API does."""

    async def upload(request: Request) -> Response:
        return PlainTextResponse(str(len(await request.body())))

    async def bug(request: Request, exc: Exception) -> Response:
        return JSONResponse({"message": "bug", "errorCode": "UNKNOWN"}, status_code=500)

    return Starlette(routes=[Route("/upload", upload, methods=["POST"])], exception_handlers={Exception: bug})


async def test_a_head_that_stalls_is_answered_408_at_header_timeout(autojump_clock: Any) -> None:
    """Part of a request line, then nothing: 408 and the close at header_timeout after the accept.
    A connection that sends nothing at all is closed as quietly at the same time."""
    async with serving(hello_app, HttpServerSettings(header_timeout=5, keep_alive_timeout=60)) as served:
        stream = await served.connect()
        silent = await served.connect()
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: a")
        assert (await _read_all(stream)).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert trio.current_time() == 5
        assert await _read_all(silent) == b""
        assert trio.current_time() == 5


async def test_the_next_request_has_the_idle_timeout_until_its_first_byte_then_the_header_timeout(
    autojump_clock: Any,
) -> None:
    async with serving(hello_app, HttpServerSettings(header_timeout=5, keep_alive_timeout=60)) as served:
        client = await served.client()
        assert (await client.request("GET", "/"))[1] == b"hello"
        await trio.sleep(50)  # idle, within the keep-alive timeout
        await client.stream.send_all(b"GET / HT")
        began = trio.current_time()
        assert (await _read_all(client.stream)).startswith(b"HTTP/1.1 408 ")
        assert trio.current_time() - began == 5


async def test_a_body_that_stalls_is_answered_408_at_body_timeout(autojump_clock: Any) -> None:
    async with serving(_upload_app(), HttpServerSettings(body_timeout=7)) as served:
        stream = await served.connect()
        await stream.send_all(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
        assert (await _read_all(stream)).startswith(b"HTTP/1.1 408 ")
        assert trio.current_time() == 7


async def test_a_body_slower_than_the_minimum_rate_is_answered_408(
    autojump_clock: Any, log_records: list[Any]
) -> None:
    """A byte every 2 s never stalls for body_timeout (5 s), but is slower than 100 bytes a second:
    once 5 s have been waited for, the next byte is refused."""
    settings = HttpServerSettings(body_timeout=5, body_min_rate=100)
    async with serving(_upload_app(), settings) as served:
        stream = await served.connect()
        await stream.send_all(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n")
        answer = await _trickle(stream)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert 6 <= trio.current_time() <= 7
    assert not warnings_or_worse(log_records)


async def test_a_fast_start_buys_no_credit_for_a_trickle_after_it(autojump_clock: Any) -> None:
    """99,990 of 100,000 bytes at once, then a byte every 2 s: over the whole body that stays above
    100 bytes a second for 16 minutes, but each body_timeout (5 s) of waiting is judged on its own,
    so the trickle is refused within three of them."""
    settings = HttpServerSettings(body_timeout=5, body_min_rate=100)
    async with serving(_upload_app(), settings) as served:
        stream = await served.connect()
        head = b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n"
        await stream.send_all(head + b"x" * 99_990)
        answer = await _trickle(stream)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert trio.current_time() <= 3 * 5


@pytest.mark.parametrize(
    "framing",
    [
        b"2x\r\nhi\r\n0\r\n\r\n",  # a chunk size that is no hex number
        b"1" + b"0" * 31 + b"\r\n",  # 32 hex digits
        b"2\nhi\r\n0\r\n\r\n",  # a bare LF
        b"2\nhi\n0\n\n",  # bare LFs only: h11 would wait for a CRLF for ever
        b"2\r\nhiXX0\r\n\r\n",  # no CRLF after the chunk's data
    ],
)
async def test_broken_chunk_framing_is_a_400_with_no_error_logged(
    framing: bytes, log_records: list[Any]
) -> None:
    async with serving(_upload_app()) as served:
        stream = await served.connect()
        await stream.send_all(
            b"POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + framing
        )
        answer = await _read_all(stream)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert b"connection: close" in answer.lower()
    assert answer.count(b"HTTP/1.1") == 1
    assert not warnings_or_worse(log_records)


async def test_content_length_with_transfer_encoding_is_answered_then_closed() -> None:
    """RFC 9112 §6.1: a proxy before us may have read the body otherwise; the next bytes are not
    to be read as a request."""
    async with serving(_upload_app()) as served:
        stream = await served.connect()
        await stream.send_all(
            b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\nhi\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        answer = await _read_all(stream)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"connection: close" in answer.lower()
    assert answer.endswith(b"\r\n\r\n2")
    assert answer.count(b"HTTP/1.1") == 1


async def test_the_last_request_a_connection_may_carry_says_connection_close() -> None:
    async with serving(hello_app, HttpServerSettings(max_requests_per_connection=3)) as served:
        client = await served.client()
        heads = [(await client.request("GET", "/"))[0] for _ in range(3)]
        assert [(b"connection", b"close") in list(head.headers) for head in heads] == [False, False, True]
        assert await client.closed_by_server()


async def test_a_client_that_never_reads_a_large_response_is_cut_at_write_timeout(
    autojump_clock: Any,
) -> None:
    """A download whose client stopped reading: the write that moves nothing for write_timeout cuts
    the connection, and the app sees its client gone (it would otherwise hold its runner)."""
    ended: list[float] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        async with trio.open_nursery() as nursery:

            async def download() -> None:
                while True:
                    await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})

            nursery.start_soon(download)
            while (await receive())["type"] != "http.disconnect":
                pass
            ended.append(trio.current_time())
            nursery.cancel_scope.cancel()

    async with serving(app, HttpServerSettings(write_timeout=10), lockstep=True) as served:
        client = HttpClient(await served.connect())
        await client.send(h11.Request(method="GET", target="/download", headers=[("host", "a")]))
        await client.send(h11.EndOfMessage())
        assert isinstance(await client.next_event(), h11.Response)
        with trio.move_on_after(30):
            while not ended:
                await trio.testing.wait_all_tasks_blocked()
                await trio.sleep(0.5)
        assert served.server.connection_count == 0
        assert 10 <= ended[0] <= 11
        assert trio.current_time() <= 11


async def test_a_slowloris_of_1200_connections_is_closed_by_header_timeout_while_others_are_served() -> None:
    """1,200 connections over loopback, each sending a byte of its head every 0.2 s: a normal client
    is answered meanwhile, and every one of them is closed (408) by header_timeout after its
    connect (give or take the machine's load)."""
    settings = HttpServerSettings(header_timeout=1.5)
    listening = await TcpNetwork().listen(HOST, 0, backlog=2048)
    server = AsgiServer(hello_app, settings)
    latencies: list[float] = []
    closed_at: list[float] = []
    answers: list[bytes] = []
    with trio.fail_after(CAP):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, listening)

            async def slow(stream: trio.abc.Stream, opened: float) -> None:
                async with stream:
                    with trio.move_on_after(10):
                        try:
                            for byte in b"GET / HTTP/1.1\r\n" + b"X-Padding: a\r\n" * 20:
                                await stream.send_all(bytes([byte]))
                                with trio.move_on_after(0.2):
                                    if answer := await stream.receive_some():
                                        answers.append(bytes(answer))
                                        break
                        except trio.BrokenResourceError:
                            pass  # a byte sent after the server's close: its kernel answers a reset
                    closed_at.append(trio.current_time() - opened)

            async with trio.open_nursery() as attackers:
                for _ in range(1200):
                    stream = await TcpNetwork().connect(HOST, listening.port)
                    attackers.start_soon(slow, stream, trio.current_time())
                for _ in range(5):
                    async with await TcpNetwork().connect(HOST, listening.port) as stream:
                        client = HttpClient(stream)
                        sent = trio.current_time()
                        assert (await client.request("GET", "/"))[1] == b"hello"
                        latencies.append(trio.current_time() - sent)
                    await trio.sleep(0.1)
            server.stop()
    assert len(closed_at) == 1200
    assert answers, "a 408 that a reset did not overtake"
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers)
    assert max(closed_at) < 1.5 + 2, max(closed_at)
    assert max(latencies) < 1.0, latencies


async def _trickle(stream: trio.abc.Stream) -> bytes:
    """Send a body's byte every 2 s until the server answers (60 s at most); its answer."""
    answer = b""
    with trio.move_on_after(60):
        while not answer:
            await trio.sleep(2)
            await stream.send_all(b"x")
            with trio.move_on_after(0.001):
                answer = bytes(await stream.receive_some())
    return answer
