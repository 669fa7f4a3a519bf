"""What the allocations on each node hold of its CPU, memory and disk, as Nomad's scheduler counts
them: every allocation that is not terminal (a stopped one frees its share at once, as the plan
that stops it does), the tasks' CPU and MemoryMB (never MemoryMaxMB) and the group's ephemeral disk.
"""

from __future__ import annotations

from attrs import frozen

from .fingerprint import HostSize
from .objects import SimAlloc

__all__ = ["Ask", "NodeUsage"]


@frozen
class Ask:
    """CPU (MHz), memory and disk (MiB): what an allocation asks for, or what a node's hold."""

    cpu: int = 0
    memory_mb: int = 0
    disk_mb: int = 0

    def __add__(self, other: Ask) -> Ask:
        return Ask(self.cpu + other.cpu, self.memory_mb + other.memory_mb, self.disk_mb + other.disk_mb)

    def __sub__(self, other: Ask) -> Ask:
        return Ask(self.cpu - other.cpu, self.memory_mb - other.memory_mb, self.disk_mb - other.disk_mb)

    def exhausted(self, size: HostSize) -> str:
        """The first dimension this much does not fit in, by Nomad's names and in its order
        (``ComparableResources.Superset``): "cpu", "memory", "disk"; "" when it fits."""
        if self.cpu > size.cpu_mhz:
            return "cpu"
        if self.memory_mb > size.memory_mb:
            return "memory"
        if self.disk_mb > size.disk_mb:
            return "disk"
        return ""


def alloc_ask(alloc: SimAlloc) -> Ask:
    """What a placed allocation holds."""
    count = len(alloc.tasks) or 1
    return Ask(alloc.cpu * count, alloc.memory_mb * count, alloc.disk_mb)


class NodeUsage:
    """The sum of what each node's allocations hold, kept as they are placed and end."""

    def __init__(self) -> None:
        self._by_node: dict[str, Ask] = {}
        self._booked: dict[str, Ask] = {}

    def book(self, alloc: SimAlloc) -> None:
        """The allocation now holds its share of its node (once)."""
        if alloc.id in self._booked or alloc.terminal:
            return
        ask = self._booked[alloc.id] = alloc_ask(alloc)
        self._by_node[alloc.node_id] = self._by_node.get(alloc.node_id, Ask()) + ask

    def release(self, alloc: SimAlloc) -> None:
        """The allocation holds nothing any more (idempotent)."""
        ask = self._booked.pop(alloc.id, None)
        if ask is not None:
            self._by_node[alloc.node_id] = self._by_node[alloc.node_id] - ask

    def used(self, node_id: str) -> Ask:
        """What the node's allocations hold."""
        return self._by_node.get(node_id, Ask())
