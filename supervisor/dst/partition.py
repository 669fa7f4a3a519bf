"""One daemon's view of the MemoryNetwork, which a fault can cut off from the cluster: a network
partition between the daemon's host and Nomad's servers and agents, while its own API still
serves (its load balancer and clients are on its side of the cut).

While cut off, either every packet is dropped (``hang``: a connect waits until its caller's
timeout, and the connections it has carry nothing, until the cut heals and they carry on as TCP
retransmits), or the daemon's host is told the cluster is unreachable (``fail``: a connect fails
with EHOSTUNREACH and every connection it has breaks, for good).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Final

import trio
from attrs import define, field

from ..base.network import Listening, MemoryNetwork

__all__ = ["MODES", "PartitionableNetwork"]

MODES: Final = ("hang", "fail")


@define(eq=False)
class PartitionableNetwork:
    """The shared MemoryNetwork as one daemon reaches it; ``cut`` partitions it from the cluster."""

    network: MemoryNetwork
    mode: str | None = None  # None: connected; otherwise how the cut shows
    _healed: trio.Event = field(factory=trio.Event)
    # The operations under way on this daemon's connections, woken when a cut begins.
    waiting: set[trio.CancelScope] = field(factory=set)
    _links: set[_Link] = field(factory=set)

    @property
    def cut_off(self) -> bool:
        """Partitioned now."""
        return self.mode is not None

    def cut(self, mode: str) -> None:
        """Partition the daemon from the cluster, as ``mode`` (one of MODES) says."""
        assert mode in MODES
        self.mode = mode
        self._healed = trio.Event()
        if mode == "fail":
            for link in self._links:
                link.broken = True
        for scope in self.waiting:
            scope.cancel()

    def heal(self) -> None:
        """The partition ends: new connections go through; a hung one carries on."""
        self.mode = None
        self._healed.set()

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """A connection through the cut, if there is none now."""
        await self._through()
        stream = await self.network.connect(host, port)
        link = _Link(self, stream)
        self._links.add(link)
        return link

    async def listen(self, host: str, port: int, *, backlog: int | None = None) -> Listening:
        """The daemon's own listeners are on its side of any cut."""
        return await self.network.listen(host, port, backlog=backlog)

    def firewall(self, host: str, port: int) -> Callable[[], None]:
        """As the shared network's."""
        return self.network.firewall(host, port)

    async def _through(self) -> None:
        """Return once a packet would go through: at once while connected; raise or wait while cut."""
        while self.mode is not None:
            if self.mode == "fail":
                raise OSError(errno.EHOSTUNREACH, "no route to host")
            await self._healed.wait()

    def forget(self, link: _Link) -> None:
        """A connection closed."""
        self._links.discard(link)


@define(eq=False)
class _Link(trio.abc.Stream):
    """A connection of the daemon's, which a cut hangs or breaks."""

    network: PartitionableNetwork
    inner: trio.abc.Stream
    broken: bool = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._usable()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        while True:
            await self._usable()
            with trio.CancelScope() as scope:
                self.network.waiting.add(scope)
                try:
                    return await self.inner.receive_some(max_bytes)
                finally:
                    self.network.waiting.discard(scope)
            # Woken by a cut: what it does to this connection, and then receive again.

    async def aclose(self) -> None:
        self.network.forget(self)
        await self.inner.aclose()

    async def _usable(self) -> None:
        if not self.broken:
            try:
                await self.network._through()
                return
            except OSError:
                self.broken = True
        await trio.aclose_forcefully(self.inner)
        raise trio.BrokenResourceError("the connection was reset: the host is unreachable")
