"""The network seam: a MemoryNetwork connects streams in memory as loopback TCP would (refused when
nobody listens, a firewall that drops connects), and httpx speaks over either network through the
transport, with httpx's own errors.

Virtual time (``autojump_clock``) where a connect must time out; the TCP test binds 127.0.0.1 port 0.
"""

from __future__ import annotations

import errno

import httpx
import pytest
import trio
import trio.testing

from supervisor.base.network import MemoryNetwork, TcpNetwork
from supervisor.nomad.transport import network_transport


async def test_a_memory_connection_reaches_its_listener_and_carries_bytes_both_ways() -> None:
    network = MemoryNetwork()
    listening = await network.listen("10.0.0.1", 0)
    assert (listening.host, listening.port) == ("10.0.0.1", 40000), "port 0 takes the first free one"
    assert listening.address == "10.0.0.1:40000"
    client = await network.connect("10.0.0.1", 40000)
    server = await listening.listener.accept()
    await client.send_all(b"ping")
    assert await server.receive_some(10) == b"ping"
    await server.send_all(b"pong")
    assert await client.receive_some(10) == b"pong"
    assert network.connections == 1


async def test_nobody_listening_is_refused_and_a_taken_address_is_in_use() -> None:
    network = MemoryNetwork()
    with pytest.raises(ConnectionRefusedError):
        await network.connect("10.0.0.1", 4646)
    await network.listen("10.0.0.1", 4646)
    with pytest.raises(OSError, match="taken") as taken:
        await network.listen("10.0.0.1", 4646)
    assert taken.value.errno == errno.EADDRINUSE


async def test_a_closed_listener_refuses_and_ends_the_connections_it_never_accepted() -> None:
    network = MemoryNetwork()
    listening = await network.listen("10.0.0.1", 1)
    waiting = await network.connect("10.0.0.1", 1)
    await listening.listener.aclose()
    assert await waiting.receive_some(10) == b"", "the peer sees the end"
    with pytest.raises(ConnectionRefusedError):
        await network.connect("10.0.0.1", 1)
    with pytest.raises(trio.ClosedResourceError):
        await listening.listener.accept()


async def test_a_firewall_drops_connects_until_it_is_taken_away(autojump_clock: trio.abc.Clock) -> None:
    network = MemoryNetwork()
    await network.listen("10.0.0.1", 1)
    remove = network.firewall("10.0.0.1", 1)
    with trio.move_on_after(30) as waited:
        await network.connect("10.0.0.1", 1)
    assert waited.cancelled_caught, "the connect waits until its own timeout"
    remove()
    await network.connect("10.0.0.1", 1)


async def test_httpx_over_memory_gets_answers_and_httpx_errors(autojump_clock: trio.abc.Clock) -> None:
    network = MemoryNetwork()
    listening = await network.listen("10.0.0.1", 80)

    async def answer_once() -> None:
        stream = await listening.listener.accept()
        request = b""
        while not request.endswith(b"\r\n\r\n"):
            request += await stream.receive_some(1024)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with (
        trio.open_nursery() as nursery,
        httpx.AsyncClient(transport=network_transport(network)) as http,
    ):
        nursery.start_soon(answer_once)
        response = await http.get("http://10.0.0.1/v1/status/leader")
        assert (response.status_code, response.text) == (200, "ok")
        with pytest.raises(httpx.ConnectError):
            await http.get("http://10.0.0.2/")
        await network.listen("10.0.0.3", 80)  # a new connection: the first one is kept alive
        network.firewall("10.0.0.3", 80)
        with pytest.raises(httpx.ConnectTimeout):
            await http.get("http://10.0.0.3/", timeout=httpx.Timeout(5, connect=1))


async def test_tcp_listens_on_port_0_and_connects() -> None:
    network = TcpNetwork()
    listening = await network.listen("127.0.0.1", 0)
    assert listening.port > 0
    client = await network.connect("127.0.0.1", listening.port)
    server = await listening.listener.accept()
    await client.send_all(b"x")
    assert await server.receive_some(1) == b"x"
    for stream in (client, server, listening.listener):
        await stream.aclose()
