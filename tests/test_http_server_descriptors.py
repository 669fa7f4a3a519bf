"""The API's HTTP server at its connection cap and its descriptors' reserve, and the soft open file
limit raised at start: each test is the attack (more connections than the server may hold) on the
server with small settings.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from typing import Any

import trio
import trio.testing

from supervisor.api.http_server import HttpServerSettings
from supervisor.base.descriptors import DescriptorCount, open_descriptors

from .http_serving import HttpClient, hello_app, serving


async def _answer(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data


async def test_connections_past_max_connections_are_answered_503_and_closed_at_once(
    log_records: list[Any],
) -> None:
    """Three idle connections hold a server capped at three: a fourth and fifth are answered 503
    (JSON, Connection: close) and closed, never held; once one closes, a new one is served. The
    refusals are logged once, with their count."""
    async with serving(hello_app, HttpServerSettings(max_connections=3)) as served:
        held = [await served.connect() for _ in range(3)]
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(2):
            answer = await _answer(await served.connect())
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert b"connection: close" in answer
            assert answer.endswith(b'{"message":"the server has too many connections open; try again later"}')
        assert served.server.connection_count == 3
        await held[0].aclose()
        await trio.testing.wait_all_tasks_blocked()
        client = HttpClient(await served.connect())
        assert (await client.request("GET", "/"))[1] == b"hello"
    refusals = [r["message"] for r in log_records if "refused" in r["message"]]
    assert len(refusals) == 1
    assert refusals[0].startswith("connections refused with a 503: 1 since")


async def test_a_connection_that_would_eat_into_the_descriptors_reserve_is_refused() -> None:
    """A soft limit of 1,100 and a reserve of 100: with 990 descriptors open, a connection is served;
    with 1,001 (the reserve entered), a new one is answered 503 and the one held goes on."""
    open_now = [990]
    count = DescriptorCount(remeasure=0, measure=lambda: open_now[0], limit=lambda: 1100)
    settings = HttpServerSettings(fd_reserve=100)
    async with serving(hello_app, settings) as served:
        served.server._descriptors = count  # driven by the test
        client = HttpClient(await served.connect())
        assert (await client.request("GET", "/"))[1] == b"hello"
        open_now[0] = 1001
        answer = await _answer(await served.connect())
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert (await client.request("GET", "/"))[1] == b"hello", "a connection held goes on"


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
