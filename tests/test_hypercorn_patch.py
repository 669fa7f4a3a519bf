"""The hypercorn fixes: closing a connection waits for a write in flight instead of colliding with
it, a connection its client closed before any request is closed at once, and a connection served
is freed without the garbage collector."""

from __future__ import annotations

import gc
import weakref
from functools import partial
from typing import Any, cast

import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.trio.tcp_server import TCPServer

from supervisor import hypercorn_patch

from .waiting import wait_until


class _Stream:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def send_eof(self) -> None:
        self.calls.append("send_eof")

    async def aclose(self) -> None:
        self.calls.append("aclose")


class _Server:
    """Just what TCPServer._close touches."""

    def __init__(self) -> None:
        self.send_lock = trio.Lock()
        self.stream = _Stream()


async def test_close_waits_for_the_write_holding_the_send_lock() -> None:
    hypercorn_patch.apply()
    hypercorn_patch.apply()  # idempotent
    server = _Server()
    release = trio.Event()

    async def write() -> None:
        async with server.send_lock:
            server.stream.calls.append("write started")
            await release.wait()
            server.stream.calls.append("write done")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(TCPServer._close, cast(TCPServer, server))
        await trio.testing.wait_all_tasks_blocked()
        assert server.stream.calls == ["write started"], "close waits while a write is in flight"
        release.set()
    assert server.stream.calls == ["write started", "write done", "send_eof", "aclose"]


async def test_close_by_the_task_that_holds_the_lock_goes_straight_on() -> None:
    hypercorn_patch.apply()
    server = _Server()
    with trio.fail_after(1):
        async with server.send_lock:
            await TCPServer._close(cast(TCPServer, server))
    assert server.stream.calls == ["send_eof", "aclose"]


async def _hello(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def test_a_connection_closed_before_its_first_request_is_closed_at_once() -> None:
    hypercorn_patch.apply()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = 75.0
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, _hello, config, mode="asgi"))
        client = await trio.open_tcp_stream("127.0.0.1", int(binds[0].rsplit(":", 1)[1]))
        await client.send_eof()  # the client leaves without a request
        with trio.fail_after(5):  # without the fix, the server closes its end after 75 s
            assert await client.receive_some() == b""
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_a_connection_served_is_freed_without_the_garbage_collector() -> None:
    hypercorn_patch.apply()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    servers: list[weakref.ref[Any]] = []
    init = TCPServer.__init__

    def remember(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        servers.append(weakref.ref(self))

    TCPServer.__init__ = remember  # type: ignore[method-assign]
    gc.disable()
    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, _hello, config, mode="asgi"))
            client = await trio.open_tcp_stream("127.0.0.1", int(binds[0].rsplit(":", 1)[1]))
            await client.send_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            with trio.fail_after(5):
                while await client.receive_some():
                    pass
            await client.aclose()
            await wait_until(lambda: servers[0]() is None, within=5)  # no collection runs
            nursery.cancel_scope.cancel()
    finally:
        TCPServer.__init__ = init  # type: ignore[method-assign]
        gc.enable()
    assert len(servers) == 1
