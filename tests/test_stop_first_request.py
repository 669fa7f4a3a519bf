"""A graceful stop and a connection accepted just before it whose request was not read yet: its
client sent that request to be answered, so it is, within ``FIRST_REQUEST_GRACE``; a connection
that sends nothing is closed then. (Under socket activation a restart must drop nothing.)"""

from __future__ import annotations

import h11
import trio
import trio.testing

from supervisor.api.http_connection import FIRST_REQUEST_GRACE

from .http_serving import hello_app, serving


async def test_the_first_request_of_a_connection_accepted_before_the_stop_is_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with serving(hello_app) as served:
        late = await served.client()
        silent = await served.client()
        await trio.testing.wait_all_tasks_blocked()
        served.server.stop()
        await trio.sleep(FIRST_REQUEST_GRACE / 2)
        await late.send(h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage())
        response, body = await late.response()
        assert (response.status_code, body) == (200, b"hello")
        assert (b"connection", b"close") in response.headers
        began = trio.current_time()
        assert await silent.closed_by_server()
        assert trio.current_time() - began == FIRST_REQUEST_GRACE / 2
        await served.done.wait()


async def test_a_head_still_coming_at_the_stop_holds_it_no_longer_than_the_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client that has sent part of a head would hold the stop for header_timeout (15 s): it is
    given ``FIRST_REQUEST_GRACE`` to finish, then answered 408."""
    async with serving(hello_app) as served:
        slow = await served.connect()
        await slow.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n")
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
        served.server.stop()
        assert (await _read_all(slow)).startswith(b"HTTP/1.1 408 ")
        await served.done.wait()
        assert trio.current_time() - began <= FIRST_REQUEST_GRACE


async def _read_all(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data
