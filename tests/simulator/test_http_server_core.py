"""The simulated cluster's HTTP server reads its requests through the API server's core
(``base/http_wire.py``): the attacks on framing get the same answers, at Go's generous defaults."""

from __future__ import annotations

import math

import pytest
import trio

from supervisor.base.http_wire import GO_SETTINGS
from supervisor.base.network import MemoryNetwork
from supervisor.simulator.http.server import HttpServer, Request, Response, text_response


async def _echo_length(request: Request) -> Response:
    return text_response(200, str(len(request.body)))


async def _exchange(raw: bytes) -> bytes:
    network = MemoryNetwork()
    server = HttpServer(_echo_length, name="test")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve, network, "127.0.0.1", 0)
        stream = await network.connect("127.0.0.1", port)
        await stream.send_all(raw)
        answer = b""
        while chunk := await stream.receive_some():
            answer += chunk
        nursery.cancel_scope.cancel()
    return answer


def test_the_simulated_cluster_keeps_gos_defaults() -> None:
    assert math.isinf(GO_SETTINGS.header_timeout)
    assert math.isinf(GO_SETTINGS.write_timeout)
    assert HttpServer(_echo_length).settings is GO_SETTINGS


@pytest.mark.parametrize("framing", [b"2x\r\nhi\r\n0\r\n\r\n", b"2\nhi\r\n0\r\n\r\n"])
async def test_broken_chunk_framing_is_a_400(framing: bytes) -> None:
    answer = await _exchange(
        b"POST /v1/jobs HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + framing
    )
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")


async def test_content_length_with_transfer_encoding_is_answered_then_closed() -> None:
    answer = await _exchange(
        b"POST /v1/jobs HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\nhi\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Connection: close" in answer
    assert answer.endswith(b"\r\n\r\n2")
