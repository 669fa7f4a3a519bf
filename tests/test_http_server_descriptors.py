"""The API's HTTP server at its connection cap and its descriptors' reserve, and the soft open file
limit raised at start: each test is the attack (more connections than the server may hold) on the
server with small settings.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from typing import Any

import h11
import trio
import trio.testing

from supervisor.api.http_server import HttpServerSettings
from supervisor.base.descriptors import DescriptorCount, open_descriptors
from supervisor.base.http_waits import SLOW_WAIT

from .http_serving import HttpClient, hello_app, serving


async def _answer(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data


async def test_connections_past_max_connections_are_answered_503_and_closed_at_once(
    autojump_clock: Any, log_records: list[Any]
) -> None:
    """Three connections in the middle of a request's head hold a server capped at three: a fourth
    and fifth are answered 503 (JSON, Connection: close) and closed, never held; once one closes, a
    new one is served. The first refusal is logged at once, the next 5 s later, with its count."""
    async with serving(hello_app, HttpServerSettings(max_connections=3)) as served:
        held = [await served.connect() for _ in range(3)]
        for stream in held:
            await stream.send_all(b"GET / HTTP/1.1\r\n")
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(2):
            answer = await _answer(await served.connect())
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert b"connection: close" in answer
            assert answer.endswith(b'{"message":"the server has too many connections open; try again later"}')
        assert served.server.connection_count == 3
        await trio.sleep(6)  # the second refusal's line is written 5 s after the first
        await held[0].aclose()
        await trio.testing.wait_all_tasks_blocked()
        client = HttpClient(await served.connect())
        assert (await client.request("GET", "/"))[1] == b"hello"
    refusals = [r["message"] for r in log_records if "refused" in r["message"]]
    assert [message.partition(" since")[0] for message in refusals] == [
        "connections refused with a 503: 1",
        "connections refused with a 503: 1",
    ]


async def test_at_the_cap_the_oldest_idle_connection_makes_room_for_a_new_one(autojump_clock: Any) -> None:
    """Idle connections (no byte of a request) fill the cap: a new connection is served, and the
    oldest idle one closed in its place, as nginx reuses idle keep-alive connections when short;
    but not one just accepted, whose request may be on its way: the new one is refused then."""
    async with serving(hello_app, HttpServerSettings(max_connections=3)) as served:
        idle = [await served.connect() for _ in range(3)]
        await trio.testing.wait_all_tasks_blocked()
        assert (await _answer(await served.connect())).startswith(b"HTTP/1.1 503 ")
        await trio.sleep(SLOW_WAIT)
        client = HttpClient(await served.connect())
        assert (await client.request("GET", "/"))[1] == b"hello"
        assert await idle[0].receive_some() == b"", "the oldest idle connection was closed"
        await trio.testing.wait_all_tasks_blocked()
        assert served.server.connection_count == 3


async def test_at_the_cap_a_head_coming_for_half_a_second_makes_room_with_a_408(autojump_clock: Any) -> None:
    """Slowloris: heads begun and never finished fill the cap. A head younger than ``SLOW_WAIT``
    is a client's on its way, so a new connection then is refused; once they have been coming that
    long, a new connection is served in the place of the oldest, which is answered 408."""
    async with serving(hello_app, HttpServerSettings(max_connections=3)) as served:
        heads = [await served.connect() for _ in range(3)]
        for stream in heads:
            await stream.send_all(b"GET / HTTP/1.1\r\nX-Slow: yes\r\n")
        await trio.testing.wait_all_tasks_blocked()
        assert (await _answer(await served.connect())).startswith(b"HTTP/1.1 503 ")
        await trio.sleep(SLOW_WAIT)
        client = HttpClient(await served.connect())
        assert (await client.request("GET", "/"))[1] == b"hello"
        answer = await _answer(heads[0])
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        with trio.move_on_after(0.1):
            await heads[1].receive_some()
            raise AssertionError("only the oldest head made room")
        assert trio.current_time() < HttpServerSettings().header_timeout


async def test_a_connection_that_would_eat_into_the_descriptors_reserve_is_refused() -> None:
    """A soft limit of 1,100 and a reserve of 100: with 990 descriptors open, a connection is served;
    with 1,001 (the reserve entered) and no idle connection to close, a new one is answered 503,
    and the one in the middle of a request goes on."""
    open_now = [990]
    count = DescriptorCount(remeasure=0, measure=lambda: open_now[0], limit=lambda: 1100)
    async with serving(hello_app, HttpServerSettings(fd_reserve=100)) as served:
        served.server._descriptors = count  # driven by the test
        client = HttpClient(await served.connect())
        assert (await client.request("GET", "/"))[1] == b"hello"
        await client.stream.send_all(b"GET / HTTP/1.1\r\n")
        await trio.testing.wait_all_tasks_blocked()
        open_now[0] = 1001
        answer = await _answer(await served.connect())
        assert answer.startswith(b"HTTP/1.1 503 ")
        await client.stream.send_all(b"Host: a\r\n\r\n")
        client.h11.start_next_cycle()
        client.h11.send(h11.Request(method="GET", target="/", headers=[("host", "a")]))
        client.h11.send(h11.EndOfMessage())
        assert (await client.response())[1] == b"hello", "a connection held goes on"


async def test_the_descriptor_count_lists_them_only_every_so_often_and_adds_the_servers_own(
    autojump_clock: Any,
) -> None:
    listings: list[int] = []

    def measure() -> int:
        listings.append(1)
        return 50

    count = DescriptorCount(remeasure=2, measure=measure, limit=lambda: 1024)
    assert count.left() == 974
    count.opened()
    count.opened()
    count.closed()
    assert count.estimate() == 51
    assert len(listings) == 1
    await trio.sleep(2)
    assert count.estimate() == 50
    assert len(listings) == 2
    assert open_descriptors() > 0


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    """In a child process whose soft limit is lowered first (the test's own is left alone)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 256)
    script = (
        "import resource\n"
        "from supervisor.base.descriptors import raise_open_file_limit\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({low}, {hard}))\n"
        "print(raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert done.stdout.strip() == f"({low}, {target}) ({target}, {hard})"
    assert "open file limit raised from" in done.stderr


async def test_at_the_cap_the_connection_idle_longest_makes_room_not_the_oldest(autojump_clock: Any) -> None:
    """A client's keep-alive connection accepted first but just answered is spared; the one that has
    said nothing for longest is closed for the new connection (its client's next request would
    otherwise fail on a connection closed under it)."""
    async with serving(hello_app, HttpServerSettings(max_connections=3)) as served:
        client = HttpClient(await served.connect())
        silent = [await served.connect() for _ in range(2)]
        await trio.sleep(2 * SLOW_WAIT)
        assert (await client.request("GET", "/"))[1] == b"hello"
        await trio.sleep(SLOW_WAIT)
        newcomer = HttpClient(await served.connect())
        assert (await newcomer.request("GET", "/"))[1] == b"hello"
        assert await silent[0].receive_some() == b"", "the one idle longest was closed"
        assert (await client.request("GET", "/"))[1] == b"hello", "the client's connection was spared"
