"""The hypercorn fix: closing a connection waits for a write in flight instead of colliding with it."""

from __future__ import annotations

from typing import cast

import trio
import trio.testing
from hypercorn.trio.tcp_server import TCPServer

from supervisor import hypercorn_patch


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
