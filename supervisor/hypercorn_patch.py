"""Four fixes for hypercorn 0.18's trio worker, applied before the API server starts.

``TCPServer._close`` calls ``send_eof()`` without taking the connection's ``send_lock``, while every
other write takes it. When a WebSocket client closes just as the application finishes (the
everyday end of an execution: the client closes on ``exit`` while we close too), the close-frame
reply and ``send_eof`` collide and trio raises BusyResourceError in hypercorn's reader task. That
error is not caught there, so it ends the whole server. Taking the lock in ``_close`` removes the
race; the task that already holds it (a failed write closing the connection) goes straight on.

Its writes are shielded from cancellation, so a client that stops reading (a download it no longer
reads, its TCP window full) holds its connection, and with it the server's graceful stop, for as long
as it likes. ``close_connections`` closes every connection's socket, which ends such a write at once:
the daemon calls it when its stop's budget has passed.

A connection that its client closes before sending a request stays open until the keep-alive
timer that started when it was accepted fires: the reader sees the end of the stream and returns,
but the connection's task group waits for that timer. With the API's keep-alive of 75 s, the
soak's load (at most 100 clients) had 202 such connections open at once (their sockets in
CLOSE-WAIT, their tasks alive). Once the reader is done nothing more can arrive, so the timer is stopped: the
connection closes as soon as its requests have ended.

A served connection is a reference cycle (the server holds its protocol, whose ``send`` is the
server's bound method), so its objects, h11's buffers and the socket among them, waited for the
garbage collector's next full collection, which comes rarely on a large heap (see ``GC_THRESHOLDS``
in the CLI). At every execution's WebSocket, that garbage piled up between collections and the
daemon's RSS grew with it. Once a connection is done its server lets go of the protocol, and
reference counting frees it all at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from hypercorn.trio import tcp_server

__all__ = ["apply", "close_connections"]

_LOCK_WAIT: Final = 5.0
_PATCHED: Final = "_supervisor_close_under_send_lock"
# Every connection hypercorn serves now.
_CONNECTIONS: weakref.WeakSet[Any] = weakref.WeakSet()


def apply() -> None:
    """Patch ``TCPServer`` once; later calls do nothing."""
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

    original_init: Callable[..., None] = server_class.__init__

    def init_and_remember(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        _CONNECTIONS.add(self)

    original_read: Callable[[Any], Awaitable[None]] = server_class._read_data

    async def read_then_stop_idle_timer(self: Any) -> None:
        await original_read(self)
        await self.idle_task.stop()

    original_run: Callable[[Any], Awaitable[None]] = server_class.run

    async def run_then_let_go(self: Any) -> None:
        try:
            await original_run(self)
        finally:
            self.__dict__.pop("protocol", None)
            self.__dict__.pop("_task_group", None)

    server_class._close = close_under_send_lock
    server_class.run = run_then_let_go
    server_class.__init__ = init_and_remember
    server_class._read_data = read_then_stop_idle_timer
    setattr(server_class, _PATCHED, True)


def close_connections() -> int:
    """Close the socket of every connection still served; a write blocked on it ends at once.
    Returns how many there were."""
    closed = 0
    for server in list(_CONNECTIONS):
        stream = getattr(server.stream, "transport_stream", server.stream)  # under TLS, its TCP stream
        socket = getattr(stream, "socket", None)
        if socket is not None and socket.fileno() != -1:
            socket.close()
            closed += 1
    return closed
