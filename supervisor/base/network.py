"""The network seam: every connection opened and every address listened on goes through a ``Network``.

The daemon and the simulated cluster are each given one. ``TcpNetwork`` (the default) opens real TCP
connections and listeners; ``MemoryNetwork`` connects the two ends of in-memory streams instead, so
that a daemon and a simulated cluster can run together in one trio run with no socket at all (on a
MockClock, say). Everything above speaks only ``trio.abc.Stream`` and ``trio.abc.Listener``: TLS wraps
a stream of either kind, trio-websocket wraps a client stream, and ``network_transport`` carries
httpx's requests over it.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
import socket
from collections.abc import Callable
from typing import Final, Protocol

import trio
import trio.testing
from attrs import define, field, frozen

__all__ = ["Listening", "MemoryNetwork", "Network", "TcpNetwork"]

# Ports handed out by a MemoryNetwork for port 0, as an operating system hands out ephemeral ports.
_FIRST_MEMORY_PORT: Final = 40000
# Connections a memory listener holds before its accept (a socket's backlog).
_MEMORY_BACKLOG: Final = 2048


@frozen
class Listening:
    """A listener and the address it was bound to (the port chosen, where 0 was asked for)."""

    listener: trio.abc.Listener[trio.abc.Stream]
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port``, with an IPv6 host in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class Network(Protocol):
    """Connect to ``host:port``, or listen on it."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """A connection to ``host:port``; OSError when nobody listens there."""
        ...

    async def listen(self, host: str, port: int, *, backlog: int | None = None) -> Listening:
        """A listener on ``host:port`` (port 0: any free one); OSError when the address is taken."""
        ...

    def firewall(self, host: str, port: int) -> Callable[[], None]:
        """Drop every new connection to ``host:port`` (a connect waits until its own timeout), as a
        firewall that drops packets does, until the returned function is called. The address must
        have no listener meanwhile."""
        ...


class TcpNetwork:
    """The real network: TCP connections and listeners of the operating system."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """A TCP connection; to an IP address (Nomad's HTTPAddr, a configured server) without trio's
        name resolution and happy eyeballs, which cost as much as the connect itself."""
        try:
            family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
        except ValueError:
            return await trio.open_tcp_stream(host, port)
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            await sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)

    async def listen(self, host: str, port: int, *, backlog: int | None = None) -> Listening:
        """The first listener trio opens for ``host:port``; the others (another address family of
        the same name) are closed, as a server bound to one address has one socket."""
        listeners = await trio.open_tcp_listeners(port, host=host, backlog=backlog)
        for extra in listeners[1:]:
            await extra.aclose()
        bound = listeners[0].socket.getsockname()
        return Listening(listeners[0], bound[0], bound[1])

    def firewall(self, host: str, port: int) -> Callable[[], None]:
        """Hold the port with a socket whose accept queue (of one) is full, so that the kernel drops
        every new connection's SYN."""
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind((host, port))
        held.listen(0)
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.setblocking(False)
        filler.connect_ex((host, port))

        def remove() -> None:
            filler.close()
            held.close()

        return remove


@define(eq=False)
class _MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    network: MemoryNetwork
    key: tuple[str, int]
    _send: trio.MemorySendChannel[trio.abc.Stream]
    _receive: trio.MemoryReceiveChannel[trio.abc.Stream]

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the listener is closed") from None

    async def aclose(self) -> None:
        if self.network.listeners.get(self.key) is self:
            del self.network.listeners[self.key]
        self._send.close()
        # Connections not accepted yet are refused: their peers see the stream end.
        while True:
            try:
                stream = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            await trio.aclose_forcefully(stream)
        self._receive.close()
        await trio.lowlevel.checkpoint()

    def offer(self, stream: trio.abc.Stream) -> None:
        self._send.send_nowait(stream)


@define
class MemoryNetwork:
    """Connections in memory: ``connect`` hands one end of a stream pair to whoever listens on the
    address, and returns the other. Nobody listening there is ECONNREFUSED, as on loopback."""

    listeners: dict[tuple[str, int], _MemoryListener] = field(factory=dict)
    firewalled: set[tuple[str, int]] = field(factory=set)
    _ports: itertools.count[int] = field(factory=lambda: itertools.count(_FIRST_MEMORY_PORT))
    # Connections opened so far (a test's proof that something went through the seam).
    connections: int = 0

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """One end of a new stream pair; the other is queued for the listener's accept."""
        await trio.lowlevel.checkpoint()
        while (host, port) in self.firewalled:
            await trio.sleep_forever()  # the caller's timeout ends it
        listener = self.listeners.get((host, port))
        if listener is None:
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"nothing listens on {host}:{port}")
        ours, theirs = trio.testing.memory_stream_pair()
        try:
            listener.offer(theirs)
        except trio.WouldBlock:
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"{host}:{port}: backlog full") from None
        self.connections += 1
        return ours

    async def listen(self, host: str, port: int, *, backlog: int | None = None) -> Listening:
        """A listener on ``host:port``; port 0 takes the next free one."""
        await trio.lowlevel.checkpoint()
        if port == 0:
            port = next(p for p in self._ports if (host, p) not in self.listeners)
        if (host, port) in self.listeners:
            raise OSError(errno.EADDRINUSE, f"{host}:{port} is taken")
        send, receive = trio.open_memory_channel[trio.abc.Stream](backlog or _MEMORY_BACKLOG)
        listener = _MemoryListener(self, (host, port), send, receive)
        self.listeners[(host, port)] = listener
        return Listening(listener, host, port)

    def firewall(self, host: str, port: int) -> Callable[[], None]:
        """New connections to ``host:port`` wait until their own timeouts, until the return is called."""
        self.firewalled.add((host, port))
        return lambda: self.firewalled.discard((host, port))
