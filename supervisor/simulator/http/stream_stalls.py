"""Event streams that stall: the connection stays open and not a byte flows, not even the ``{}``
heartbeats, as behind a network black hole (no FIN, no RST) between a server's streams and their
readers. A stream already open stops delivering; one opened meanwhile gets its answer's headers and
nothing more. Healing lets the bytes held meanwhile through, on the same connections: a reader that
gave up closed its own.

Every open stream's last delivery is kept, so that a check can tell how long the freshest one has
been silent.
"""

from __future__ import annotations

import trio

from .server import StreamSource

__all__ = ["StreamStalls"]


class _Watched:
    """A stream's source, held while its server's streams stall; when it last delivered."""

    def __init__(self, stalls: StreamStalls, server: str, source: StreamSource) -> None:
        self._stalls = stalls
        self._server = server
        self._source = source
        self.delivered_at = trio.current_time()  # its opening, until its first chunk

    async def next_chunk(self) -> bytes | None:
        chunk = await self._source.next_chunk()
        await self._stalls.passable(self._server)
        self.delivered_at = trio.current_time()
        return chunk

    def close(self) -> None:
        self._stalls.forget(self)
        self._source.close()


class StreamStalls:
    """Which servers' streams stall now, and every open stream's last delivery."""

    def __init__(self) -> None:
        # Server name -> set when its streams flow again.
        self._healed: dict[str, trio.Event] = {}
        self._open: dict[_Watched, None] = {}

    def watch(self, server: str, source: StreamSource) -> StreamSource:
        """``source``, as the stream of ``server`` delivers it."""
        watched = _Watched(self, server, source)
        self._open[watched] = None
        return watched

    def stall(self, server: str) -> None:
        """The server's streams deliver nothing from now on, until healed."""
        if server not in self._healed:
            self._healed[server] = trio.Event()

    def heal(self, server: str) -> None:
        """The server's streams deliver again, what they held first."""
        healed = self._healed.pop(server, None)
        if healed is not None:
            healed.set()

    def stalled(self, server: str) -> bool:
        """Whether the server's streams stall now."""
        return server in self._healed

    async def passable(self, server: str) -> None:
        """Return once the server's streams flow."""
        healed = self._healed.get(server)
        if healed is not None:  # no checkpoint otherwise: a flowing stream is scheduled as before
            await healed.wait()

    def forget(self, watched: _Watched) -> None:
        """A stream closed."""
        self._open.pop(watched, None)

    def freshest_delivery(self) -> float | None:
        """When the open stream that delivered last did (its opening if nothing yet); None when no
        stream is open."""
        return max((w.delivered_at for w in self._open), default=None)
