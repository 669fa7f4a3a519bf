"""A restarted server or agent listens on its own port again, even if another socket held that port
for a while (on a machine running many clusters, an outgoing connection may be given it)."""

from __future__ import annotations

import socket

import trio
import trio.testing

from supervisor.base.network import Listening, TcpNetwork
from supervisor.simulator.http.server import open_listener


async def test_a_port_held_by_another_socket_for_a_while_is_bound_once_it_is_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first = await open_listener(TcpNetwork(), "127.0.0.1", 0)
    port = first.port
    await first.listener.aclose()
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    bound: list[Listening] = []

    async def rebind() -> None:
        bound.append(await open_listener(TcpNetwork(), "127.0.0.1", port))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(rebind)
        await trio.sleep(2)
        assert not bound, "the port is still held"
        squatter.close()
    assert bound[0].port == port
    await bound[0].listener.aclose()
