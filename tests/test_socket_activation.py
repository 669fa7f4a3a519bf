"""Systemd's socket activation: the variables read (and removed), and the passed socket served
again by a restarted API server, its connections made meanwhile kept waiting, not refused."""

from __future__ import annotations

import os
import socket

import h11
import pytest
import trio

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.errors import ConfigError
from supervisor.base.network import TcpNetwork
from supervisor.base.socket_activation import PassedSocket, passed_sockets, take_passed_listener
from supervisor.tree.api_serving import ApiEndpoint, ApiServing

from .http_serving import HttpClient, hello_app

PID = 4242


@pytest.mark.parametrize(
    ("environ", "passed"),
    [
        ({}, []),
        # Another process's sockets: its parent's, inherited.
        ({"LISTEN_PID": "4241", "LISTEN_FDS": "1"}, []),
        ({"LISTEN_PID": str(PID), "LISTEN_FDS": "0"}, []),
        ({"LISTEN_PID": str(PID)}, []),
        ({"LISTEN_FDS": "1"}, []),
        ({"LISTEN_PID": str(PID), "LISTEN_FDS": "1"}, [PassedSocket(3, "unknown")]),
        (
            {"LISTEN_PID": str(PID), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "api.socket:metrics"},
            [PassedSocket(3, "api.socket"), PassedSocket(4, "metrics")],
        ),
        # Names of another count are no names.
        (
            {"LISTEN_PID": str(PID), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "api.socket"},
            [PassedSocket(3, "unknown"), PassedSocket(4, "unknown")],
        ),
    ],
)
def test_the_variables(environ: dict[str, str], passed: list[PassedSocket]) -> None:
    assert passed_sockets(environ, PID) == passed


def test_a_count_that_is_no_count_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="LISTEN_FDS: 'two' is not a count"):
        passed_sockets({"LISTEN_PID": str(PID), "LISTEN_FDS": "two"}, PID)


def test_the_variables_are_removed_once_read_even_when_not_ours() -> None:
    environ = {"LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "x", "PATH": "/bin"}
    assert take_passed_listener(environ) is None
    assert environ == {"PATH": "/bin"}


async def test_a_restarted_server_serves_the_same_passed_socket_and_answers_what_waited() -> None:
    held = socket.create_server(("127.0.0.1", 0))  # systemd's own copy, held by the test
    port = held.getsockname()[1]
    listener = trio.SocketListener(
        trio.socket.from_stdlib_socket(socket.socket(fileno=os.dup(held.fileno())))
    )
    endpoint = ApiEndpoint(0, passed=(listener, "api.socket"))
    async with trio.open_nursery() as connections:
        first = AsgiServer(hello_app, HttpServerSettings())
        async with trio.open_nursery() as tree:
            urls = await tree.start(ApiServing(first, TcpNetwork(), "127.0.0.1", endpoint, connections).run)
            assert urls == [f"http://127.0.0.1:{port}"]
            client = HttpClient(await trio.open_tcp_stream("127.0.0.1", port))
            response, _ = await client.request("GET", "/")
            assert response.status_code == 200
            await client.stream.aclose()
            first.stop()
        # Between the two runs nobody accepts: the connection waits in the socket's backlog.
        waiting = HttpClient(await trio.open_tcp_stream("127.0.0.1", port))
        await waiting.send(
            h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage()
        )
        second = AsgiServer(hello_app, HttpServerSettings())
        async with trio.open_nursery() as tree:
            await tree.start(ApiServing(second, TcpNetwork(), "127.0.0.1", endpoint, connections).run)
            response, body = await waiting.response()
            assert (response.status_code, body) == (200, b"hello")
            await waiting.stream.aclose()
            second.stop()
    assert listener.socket.fileno() >= 0, "the passed socket is never closed"
    listener.socket.close()
    held.close()
