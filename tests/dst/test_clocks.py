"""A simulated run reads no real time: the process's clocks follow the virtual one, so that a
library timing on ``time.monotonic`` (httpcore's keep-alive expiry) behaves as the seed says, not as
fast as the machine runs it."""

from __future__ import annotations

import time

import httpx
import trio
import trio.testing

from supervisor.base.network import MemoryNetwork
from supervisor.dst.clocks import virtual_process_clocks
from supervisor.nomad.transport import network_transport


def test_monotonic_and_time_follow_the_virtual_clock_and_are_put_back() -> None:
    clock = trio.testing.MockClock()
    real = time.monotonic
    with virtual_process_clocks(clock.current_time, 1_000.0):
        clock.jump(7.5)
        assert time.monotonic() == 7.5
        assert time.monotonic_ns() == 7_500_000_000
        assert time.time() == 1_007.5
        assert time.time_ns() == 1_007_500_000_000
    assert time.monotonic is real


def _connections_after(pauses: list[float]) -> int:
    """Connections a server saw from one httpx client asking once, then after each pause."""
    network = MemoryNetwork()

    async def serve(stream: trio.abc.Stream) -> None:
        request = b""
        async for chunk in stream:
            request += chunk
            while b"\r\n\r\n" in request:
                _, request = request.split(b"\r\n\r\n", 1)
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def main() -> None:
        listening = await network.listen("10.0.0.1", 80)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, serve, [listening.listener])
            async with httpx.AsyncClient(transport=network_transport(network)) as http:
                await http.get("http://10.0.0.1/")
                for pause in pauses:
                    await trio.sleep(pause)
                    await http.get("http://10.0.0.1/")
            nursery.cancel_scope.cancel()

    clock = trio.testing.MockClock(autojump_threshold=0)
    with virtual_process_clocks(clock.current_time, 0.0):
        trio.run(main, clock=clock)
    return network.connections


def test_a_kept_alive_connection_expires_on_the_virtual_clock() -> None:
    assert _connections_after([4.0]) == 1, "reused within httpx's 5 s"
    assert _connections_after([6.0]) == 2, "expired after 5 virtual seconds, however fast they ran"
