"""Systemd's socket activation: the variables read (and removed), what cannot be served refused
in one line, and the passed socket served again by a restarted API server, its connections made
meanwhile kept waiting, not refused."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import h11
import pytest
import trio

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.errors import ConfigError
from supervisor.base.network import TcpNetwork
from supervisor.base.socket_activation import (
    PassedSocket,
    passed_listener,
    passed_sockets,
    take_passed_listener,
)
from supervisor.cli import main
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


def test_several_sockets_are_refused_before_any_is_touched() -> None:
    environ = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "api:metrics"}
    with pytest.raises(ConfigError) as refused:
        take_passed_listener(environ)
    assert str(refused.value) == (
        "LISTEN_FDS=2: systemd passed 2 sockets (descriptors 3 (api), 4 (metrics)) and the API serves "
        "one: keep one ListenStream= in the socket unit"
    )
    assert environ == {}


def test_run_with_several_sockets_exits_2_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [name for name in os.environ if name.startswith(("NOMAD_", "SUPERVISOR_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LISTEN_PID", str(os.getpid()))
    monkeypatch.setenv("LISTEN_FDS", "3")
    assert main(["run", "--listen", "127.0.0.1:0"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "configuration: LISTEN_FDS=3: systemd passed 3 sockets" in error
    assert "keep one ListenStream=" in error
    assert "LISTEN_FDS" not in os.environ


def test_a_descriptor_that_is_not_open_is_a_configuration_error() -> None:
    with socket.socket() as closed:
        fd = os.dup(closed.fileno())
    os.close(fd)
    with pytest.raises(ConfigError, match=rf"^LISTEN_FDS: descriptor {fd} \(api\): Bad file descriptor$"):
        passed_listener(PassedSocket(fd, "api"))


def test_a_descriptor_that_is_no_socket_is_a_configuration_error(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_RDWR)
    try:
        with pytest.raises(ConfigError, match=rf"^LISTEN_FDS: descriptor {fd} \(api\): Socket operation on"):
            passed_listener(PassedSocket(fd, "api"))
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)


def test_a_socket_that_is_not_listening_over_tcp_is_a_configuration_error() -> None:
    for sock in (socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket()):
        with sock, pytest.raises(ConfigError, match="is not a listening TCP socket"):
            passed_listener(PassedSocket(sock.fileno(), "api"))


async def test_a_listening_socket_is_served_and_not_inherited() -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        fd = os.dup(held.fileno())
        os.set_inheritable(fd, True)
        listener, name = passed_listener(PassedSocket(fd, "api.socket"))
        assert name == "api.socket"
        assert listener.socket.fileno() == fd
        assert os.get_inheritable(fd) is False
        await listener.aclose()


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
