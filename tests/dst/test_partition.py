"""A daemon's network cut off from the cluster: in ``fail`` its connections break and new ones are
refused until the cut heals; in ``hang`` nothing goes through until it heals, and then the
connections carry on."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from supervisor.base.network import MemoryNetwork
from supervisor.dst.partition import PartitionableNetwork

_HOST, _PORT = "127.0.0.1", 4646


async def _served(network: MemoryNetwork) -> trio.abc.Listener[trio.abc.Stream]:
    listening = await network.listen(_HOST, _PORT)
    return listening.listener


async def test_a_failing_cut_breaks_every_connection_for_good_and_refuses_new_ones() -> None:
    shared = MemoryNetwork()
    listener = await _served(shared)
    daemon = PartitionableNetwork(shared)
    link = await daemon.connect(_HOST, _PORT)
    server = await listener.accept()
    received: list[BaseException] = []

    async def receive() -> None:
        try:
            await link.receive_some()
        except trio.BrokenResourceError as error:
            received.append(error)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        daemon.cut("fail")
    assert len(received) == 1, "the receive under way breaks"
    with pytest.raises(OSError, match="no route to host"):
        await daemon.connect(_HOST, _PORT)
    assert await server.receive_some() == b"", "the server sees the connection end"
    daemon.heal()
    with pytest.raises(trio.BrokenResourceError):
        await link.send_all(b"GET")
    fresh = await daemon.connect(_HOST, _PORT)
    await fresh.send_all(b"GET")
    assert await (await listener.accept()).receive_some() == b"GET"


async def test_a_hanging_cut_holds_everything_until_it_heals(autojump_clock: trio.testing.MockClock) -> None:
    shared = MemoryNetwork()
    listener = await _served(shared)
    daemon = PartitionableNetwork(shared)
    link = await daemon.connect(_HOST, _PORT)
    server = await listener.accept()
    daemon.cut("hang")
    await server.send_all(b"event")
    with trio.move_on_after(5.0) as waited:
        await link.receive_some()
    assert waited.cancelled_caught, "nothing arrives while cut off"
    with trio.move_on_after(5.0) as waited:
        await daemon.connect(_HOST, _PORT)
    assert waited.cancelled_caught, "a connect waits for its caller's timeout"
    got: list[bytes | bytearray] = []

    async def receive() -> None:
        got.append(await link.receive_some())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.sleep(3.0)
        assert got == []
        daemon.heal()
    assert got == [b"event"], "what was sent meanwhile arrives once the cut heals"
    await link.send_all(b"more")
    assert await server.receive_some() == b"more"


async def test_the_daemons_own_listeners_are_on_its_side_of_the_cut() -> None:
    shared = MemoryNetwork()
    daemon = PartitionableNetwork(shared)
    listening = await daemon.listen(_HOST, 7200)
    daemon.cut("fail")
    client = await shared.connect(_HOST, 7200)
    await client.send_all(b"claim")
    assert await (await listening.listener.accept()).receive_some() == b"claim"
