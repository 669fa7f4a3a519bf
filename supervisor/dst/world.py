"""The simulated world of one seed: a MemoryNetwork, the simulated cluster with its command model,
and the daemons (one, or an active and a standby), each of which can be killed and started again
with its state lost, as a crashed process is.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

import trio
from attrs import define, field

from ..base.entropy import Entropy
from ..base.network import MemoryNetwork
from ..core.config import HaSettings, ServerSettings, Settings
from ..simulator import SimConfig, SimulatedCluster
from ..simulator.agents.command_model import ModelContainers
from ..tree.daemon import Daemon
from .partition import PartitionableNetwork
from .trace import Trace
from .truth import Truth

__all__ = ["DaemonSlot", "World"]

# The cluster's time 0: a fixed wall-clock instant, so that the times it writes replay too.
_EPOCH_NS: Final = 1_780_000_000 * 10**9
_HOST: Final = "127.0.0.1"
_FIRST_PORT: Final = 7200


@define(eq=False)
class DaemonSlot:
    """One daemon process's place: its port and settings; each start is a new Daemon (state lost)."""

    name: str
    port: int
    settings: Settings
    daemon: Daemon | None = None
    scope: trio.CancelScope | None = None
    starts: int = 0
    # The network as this daemon's host reaches it, which a partition can cut off from the cluster
    # (in a pair; a single daemon reaches the shared network itself).
    network: PartitionableNetwork | None = None

    @property
    def url(self) -> str:
        """The daemon's API base URL."""
        return f"http://{_HOST}:{self.port}/api/v1"

    @property
    def running(self) -> bool:
        """Started and not killed."""
        return self.daemon is not None


@define(eq=False)
class World:
    """The cluster and the daemons of one seed, in one trio run."""

    seed: int
    config: SimConfig
    trace: Trace
    ha: bool = False
    network: MemoryNetwork = field(factory=MemoryNetwork)
    slots: list[DaemonSlot] = field(factory=list)
    cluster: SimulatedCluster = field(init=False)
    truth: Truth = field(init=False)
    # Called with the daemon that answered a claim, the instant its client has the answer (a fault
    # that kills it then sets it).
    on_claim_answered: Callable[[DaemonSlot], None] | None = None
    _nursery: trio.Nursery | None = None
    _entropy_seeds: random.Random = field(init=False)

    def __attrs_post_init__(self) -> None:
        self.cluster = SimulatedCluster(self.config, network=self.network, containers=ModelContainers)
        self.truth = Truth(self.cluster)
        self._entropy_seeds = random.Random(self.seed * 7919 + 1)
        # The daemons' defaults, but for their ports (and [ha] enabled for a pair).
        for i in range(2 if self.ha else 1):
            port = _FIRST_PORT + i
            settings = Settings(server=ServerSettings(port=port), ha=HaSettings(enabled=self.ha))
            network = PartitionableNetwork(self.network) if self.ha else None
            self.slots.append(DaemonSlot(f"daemon-{i + 1}", port, settings, network=network))

    async def run(self, *, task_status: trio.TaskStatus[World] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the cluster and start every daemon; serves until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.cluster.run)
            for slot in self.slots:
                await self.start(slot)
            task_status.started(self)
            await trio.sleep_forever()

    def active_slot(self) -> DaemonSlot | None:
        """The daemon a health-checked load balancer sends to: the one whose API serves a term."""
        return next((s for s in self.slots if s.daemon is not None and s.daemon.switch.app), None)

    def acting(self) -> list[DaemonSlot]:
        """The daemons whose informer and effects run (with ``[ha]``, never more than one)."""
        return [s for s in self.slots if s.daemon is not None and s.daemon.acting]

    @property
    def environ(self) -> dict[str, str]:
        """The daemons' environment: where Nomad is."""
        return {"NOMAD_ADDR": ",".join(self.cluster.addresses)}

    async def start(self, slot: DaemonSlot) -> None:
        """Start a fresh daemon in the slot (its entropy drawn from the seed); returns once it serves."""
        assert self._nursery is not None
        assert slot.daemon is None
        slot.starts += 1
        daemon = Daemon(
            slot.settings,
            environ=self.environ,
            network=slot.network or self.network,
            entropy=Entropy.seeded(self._entropy_seeds.getrandbits(64)),
        )
        scope = trio.CancelScope()
        slot.daemon, slot.scope = daemon, scope
        self.trace.record("daemon.start", f"{slot.name} #{slot.starts}")
        try:
            await self._nursery.start(self._run_daemon, slot, daemon, scope)
        except RuntimeError:
            if not scope.cancel_called:
                raise
            # Killed while it started (its start waits for Nomad to check the runner jobs): as a
            # process killed before it served.
            self.trace.record("daemon.killed_starting", slot.name)

    @staticmethod
    async def _run_daemon(
        slot: DaemonSlot, daemon: Daemon, scope: trio.CancelScope, *, task_status: trio.TaskStatus[Daemon]
    ) -> None:
        with scope:
            await daemon.run(task_status=task_status)
        if slot.daemon is daemon:
            slot.daemon = None

    def claim_answered(self, slot: DaemonSlot) -> None:
        """A client has just had a claim answered by ``slot``'s daemon."""
        if self.on_claim_answered is not None:
            self.on_claim_answered(slot)

    def kill(self, slot: DaemonSlot) -> None:
        """Kill the slot's daemon at once, as SIGKILL does: no stop, nothing given back."""
        if slot.scope is not None:
            slot.scope.cancel("killed")
        slot.daemon, slot.scope = None, None
        self.trace.record("daemon.kill", slot.name)

    async def stop_all(self) -> None:
        """Stop every daemon gracefully, and wait for each to end."""
        for slot in self.slots:
            if slot.daemon is not None:
                slot.daemon.stop()
        for slot in self.slots:
            if slot.daemon is not None:
                await slot.daemon.ended.wait()
