"""The API's ASGI server: HTTP/1.1 and WebSocket on trio, h11 and wsproto, through the network seam.

It replaces hypercorn 0.18, whose trio worker needed four patches: a close that raced a write ended
the whole server (BusyResourceError), shielded writes let a client that stopped reading hold the stop,
a keep-alive timer kept each connection its client had closed alive for 75 s, and reference cycles
left each connection's buffers to the garbage collector. And it serves on any ``Listening``, so that
a test can serve over in-memory streams.

A connection is one task. The app runs in it, HTTP/1.1 exchange after exchange, reading the request
body from the network only as it asks for more; a WebSocket's frames are read beside it. Every write
and the connection's close take the connection's send lock, but for a cut (``close_connections``):
that close must end a write blocked on a peer that stopped reading, as trio's ``aclose`` may.
TLS is the listener's (``base/tls.py``): a connection is served over whatever stream it accepts.
Not here: HTTP/2, trailers, WebSocket compression.
"""

from __future__ import annotations

import contextlib
import errno
from typing import Any, Final, final

import trio
from loguru import logger
from starlette.types import ASGIApp, Message

from ..base.body_budget import BodyBudget
from ..base.descriptors import DescriptorCount
from ..base.http_waits import Waits
from ..base.network import Listening
from .http_connection import Connection
from .http_wire import PEER_ERRORS, HttpServerSettings

__all__ = ["AsgiServer", "HttpServerSettings"]

_Listener = trio.abc.Listener[trio.abc.Stream]
# accept() failures that mean "no file descriptor or buffer for now", as in trio's serve_listeners.
_ACCEPT_RETRY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_DELAY: Final = 0.1
# Refusals (connections past the cap or the descriptors' reserve, failed accepts) are logged at
# most this often, with how many there were since (seconds).
_REFUSAL_LOG_INTERVAL: Final = 5.0
_REFUSAL_BODY: Final = b'{"message":"the server has too many connections open; try again later"}'
_REFUSAL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\nretry-after: 1\r\n\r\n%s"
    % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)
# How long a refused connection is given to take its 503 (seconds).
_REFUSAL_WRITE_TIMEOUT: Final = 1.0


@final
class AsgiServer:
    """Serves one ASGI app on one listener; ``stop`` drains it, ``close_connections`` cuts."""

    def __init__(
        self, app: ASGIApp, settings: HttpServerSettings, *, descriptors: DescriptorCount | None = None
    ) -> None:
        self._app = app
        self._settings = settings
        self._descriptors = descriptors or DescriptorCount()
        self._refusals = _RefusalLog()
        self._bodies = BodyBudget(settings.body_budget)
        self._waits = Waits()
        self._stopping = trio.Event()
        # Open now, in the order they were accepted.
        self._connections: dict[Connection, None] = {}
        # Set when the last connection has ended.
        self._drained = trio.Event()
        # The lifespan's state: each request's scope gets a shallow copy (ASGI's "state").
        self._state: dict[str, Any] = {}

    @property
    def connection_count(self) -> int:
        """Connections open now."""
        return len(self._connections)

    async def serve(
        self,
        listening: Listening,
        *,
        connection_nursery: trio.Nursery | None = None,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until stop() and every connection has ended; started with the base URL
        'http://host:port' once the app's lifespan startup is complete. Connections run in
        ``connection_nursery`` when one is given, so that they outlive a failure of this task
        (trio's ``serve_listeners`` takes its ``handler_nursery`` so); in a nursery of its own
        otherwise."""
        try:
            async with trio.open_nursery() as lifespan_nursery:
                lifespan = _Lifespan(self._app, self._state)
                lifespan_nursery.start_soon(lifespan.run)
                await lifespan.start_up()
                url = f"http://{listening.address}"
                if connection_nursery is not None:
                    task_status.started(url)
                    await self._accept_until_stopped(listening.listener, connection_nursery)
                    await self._wait_drained()
                else:
                    async with trio.open_nursery() as handler_nursery:
                        task_status.started(url)
                        await self._accept_until_stopped(listening.listener, handler_nursery)
                await lifespan.shut_down()
                lifespan_nursery.cancel_scope.cancel("the server has stopped")
        finally:
            with trio.move_on_after(self._settings.close_timeout, shield=True):
                await listening.listener.aclose()

    async def _wait_drained(self) -> None:
        while self._connections:
            self._drained = trio.Event()
            await self._drained.wait()

    def stop(self) -> None:
        """Graceful stop: stop accepting (close the listener); idle keep-alive connections close at
        once; a request in flight finishes and its response carries 'Connection: close'; WebSockets
        go on until the app closes them. serve() returns when the last connection has ended.
        Idempotent."""
        self._stopping.set()
        for connection in self._connections:
            connection.stop_if_idle()

    def close_connections(self) -> int:
        """Cut every connection now (the stop's budget has passed): each connection's stream is
        closed forcefully so that a write blocked on a client that stopped reading ends at once;
        returns how many."""
        for connection in self._connections:
            connection.cut()
        return len(self._connections)

    async def _accept_until_stopped(self, listener: _Listener, handler_nursery: trio.Nursery) -> None:
        async with trio.open_nursery() as accepting:
            accepting.start_soon(self._accept, listener, handler_nursery, accepting)
            await self._stopping.wait()
            accepting.cancel_scope.cancel("the server stops")
        with trio.move_on_after(self._settings.close_timeout, shield=True):
            await listener.aclose()

    async def _accept(
        self, listener: _Listener, handler_nursery: trio.Nursery, late_lines: trio.Nursery
    ) -> None:
        """Accept until the listener closes; ``late_lines`` runs the refusals' late log lines (a
        task only while one is due, so that a server that refuses nothing runs none)."""
        while True:
            try:
                stream = await listener.accept()
            except trio.ClosedResourceError:
                self.stop()  # closed under us: nothing more can come
                return
            except OSError as exc:
                if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                    raise
                self._count_refusal(late_lines, "accepting a connection failed, trying again", str(exc))
                await trio.sleep(_ACCEPT_RETRY_DELAY)
                continue
            self._descriptors.opened()
            if (why := self._refusal()) is not None and not self._make_room(late_lines):
                self._count_refusal(late_lines, "connections refused with a 503", why)
                handler_nursery.start_soon(self._refuse, stream)
            else:
                handler_nursery.start_soon(self._serve_connection, stream)
            del stream  # the connection's task holds it alone, and lets it go when it ends

    def _count_refusal(self, late_lines: trio.Nursery, what: str, detail: str) -> None:
        if self._refusals.count(what, detail):
            late_lines.start_soon(self._refusals.log_late)

    def _make_room(self, late_lines: trio.Nursery) -> bool:
        """At the cap: take the connection that has waited longest on its client (``Waits``), so
        that the new one is served in its place; False if none has waited long enough."""
        taken = self._waits.cancel_longest()
        if taken is not None:
            what = "idle connections closed" if taken == "idle" else "slow heads answered 408"
            self._count_refusal(late_lines, f"{what} for new connections", "at the cap or the reserve")
        return taken is not None

    def _refusal(self) -> str | None:
        """Why a connection just accepted is not to be served, if it is not."""
        settings = self._settings
        if len(self._connections) >= settings.max_connections:
            return f"{len(self._connections)} open, at max_connections"
        if (left := self._descriptors.left()) < settings.fd_reserve:
            return f"{left} descriptors left under the soft limit, fd_reserve is {settings.fd_reserve}"
        return None

    async def _refuse(self, stream: trio.abc.Stream) -> None:
        """Answer 503 at once and close, whether or not the client reads it."""
        try:
            with trio.move_on_after(_REFUSAL_WRITE_TIMEOUT):
                await stream.send_all(_REFUSAL)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)
            self._descriptors.closed()

    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        connection = Connection(
            stream, self._app, self._settings, self._state, self._stopping, self._bodies, self._waits
        )
        self._connections[connection] = None
        try:
            with connection.cut_scope:
                await connection.run()
        except* PEER_ERRORS:
            pass
        except* Exception:
            logger.exception("a connection of the API server failed")
        finally:
            self._connections.pop(connection, None)
            await connection.close()
            self._descriptors.closed()
            if not self._connections:
                self._drained.set()


class _RefusalLog:
    """Refusals logged at most every _REFUSAL_LOG_INTERVAL seconds, each kind with its count; those
    that come after a line are logged once the interval has passed (``log_late``)."""

    def __init__(self) -> None:
        self._logged_at = -float("inf")
        # Per kind: how many since the last line, and why the last one was.
        self._counts: dict[str, tuple[int, str]] = {}
        self._late = False

    def count(self, what: str, detail: str) -> bool:
        """One more refusal of a kind (``detail``: why this one); True if ``log_late`` is to run."""
        times, _ = self._counts.get(what, (0, ""))
        self._counts[what] = (times + 1, detail)
        if trio.current_time() - self._logged_at >= _REFUSAL_LOG_INTERVAL:
            self._log()
            return False
        due, self._late = not self._late, True
        return due

    async def log_late(self) -> None:
        """Log what was counted since the last line, once the interval has passed."""
        await trio.sleep_until(self._logged_at + _REFUSAL_LOG_INTERVAL)
        self._late = False
        if self._counts:
            self._log()

    def _log(self) -> None:
        for kind, (times, last) in self._counts.items():
            logger.warning("{}: {} since the last such line, the last: {}", kind, times, last)
        self._counts.clear()
        self._logged_at = trio.current_time()


class _Lifespan:
    """The app's lifespan: startup before the server serves, shutdown after its last connection."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self._app = app
        self._state = state
        self._to_app, self._inbox = trio.open_memory_channel[Message](1)
        self._answers, self._answered = trio.open_memory_channel[Message](1)
        self._last_answer = ""

    async def run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self._state}
        # Both closed when the app returns: a phase under way, or to come, learns that it has ended.
        async with self._answers, self._inbox:
            try:
                await self._app(scope, self._inbox.receive, self._answer)
            except Exception:
                # An app without a lifespan raises on its scope at once: it is served without one.
                if self._last_answer == "lifespan.startup.complete":
                    logger.exception("the app's lifespan failed")

    async def start_up(self) -> None:
        """RuntimeError if the app answers that its startup failed."""
        answer = await self._phase("startup")
        if answer.get("type") == "lifespan.startup.failed":
            raise RuntimeError(f"the app's lifespan startup failed: {answer.get('message', '')}")

    async def shut_down(self) -> None:
        answer = await self._phase("shutdown")
        if answer.get("type") == "lifespan.shutdown.failed":
            logger.error("the app's lifespan shutdown failed: {}", answer.get("message", ""))

    async def _answer(self, message: Message) -> None:
        self._last_answer = message["type"]
        await self._answers.send(message)

    async def _phase(self, name: str) -> Message:
        with contextlib.suppress(trio.BrokenResourceError):
            await self._to_app.send({"type": f"lifespan.{name}"})
        try:
            return await self._answered.receive()
        except trio.EndOfChannel:
            return {}
