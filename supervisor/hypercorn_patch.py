"""A fix for a race in hypercorn 0.18's trio worker, applied before the API server starts.

``TCPServer._close`` calls ``send_eof()`` without taking the connection's ``send_lock``, while every
other write takes it. When a WebSocket client closes just as the application finishes (the
everyday end of an execution: the client closes on ``exit`` while we close too), the close-frame
reply and ``send_eof`` collide and trio raises BusyResourceError in hypercorn's reader task. That
error is not caught there, so it ends the whole server. Taking the lock in ``_close`` removes the
race; the task that already holds it (a failed write closing the connection) goes straight on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from hypercorn.trio import tcp_server

__all__ = ["apply"]

_LOCK_WAIT: Final = 5.0
_PATCHED: Final = "_supervisor_close_under_send_lock"


def apply() -> None:
    """Patch ``TCPServer._close`` once; later calls do nothing."""
    server_class: Any = tcp_server.TCPServer
    if getattr(server_class, _PATCHED, False):
        return
    original: Callable[[Any], Awaitable[None]] = server_class._close

    async def close_under_send_lock(self: Any) -> None:
        lock: trio.Lock = self.send_lock
        if lock.statistics().owner is trio.lowlevel.current_task():
            await original(self)
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(_LOCK_WAIT):
                async with lock:
                    await original(self)
                    return
            await original(self)

    server_class._close = close_under_send_lock
    setattr(server_class, _PATCHED, True)
