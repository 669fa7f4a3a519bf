"""Tiers as nested nurseries: one nursery per tier, opened in order, each child started in its
tier's nursery under ``supervise``; at the end they unwind from the innermost out, each tier waiting
for its draining children within their share of the stop's budget before it is cancelled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import final

import trio
from attrs import define, field

from ..base.entropy import Entropy
from .graceful_stop import GracefulStop
from .supervision import ChildRun, PartsT, RestartIntensity, Shutdown, TierSpec, supervise

__all__ = ["NestedTiers", "OpenTiers", "ask_to_stop"]


@define
class OpenTiers:
    """The open tiers: their nurseries, and when each of their children has ended for good."""

    nurseries: dict[str, trio.Nursery] = field(factory=dict)
    ended: dict[str, trio.Event] = field(factory=dict)


@final
class NestedTiers:
    """Opens tiers and starts their children, every restart counted against ``restarts`` (past
    it, ``escalate``); nothing is restarted once ``stop`` has begun, and draining children are
    waited for within their share of its budget."""

    def __init__(
        self,
        restarts: RestartIntensity,
        escalate: Callable[[str], None],
        stop: GracefulStop,
        entropy: Entropy,
        *,
        ha: bool,
    ) -> None:
        self._restarts = restarts
        self._escalate = escalate
        self._stop = stop
        self._entropy = entropy
        self._ha = ha

    async def nest(
        self,
        tiers: Sequence[TierSpec[PartsT]],
        body: Callable[[OpenTiers], Awaitable[None]],
        opened: OpenTiers | None = None,
    ) -> None:
        """Open one nursery per tier, nested in order, and run ``body`` inside the innermost (it
        starts the children); then unwind from the innermost out: each tier waits for its draining
        children within their share of the budget, and is cancelled."""
        opened = OpenTiers() if opened is None else opened
        if not tiers:
            await body(opened)
            return
        tier = tiers[0]
        async with trio.open_nursery() as nursery:
            opened.nurseries[tier.name] = nursery
            await self.nest(tiers[1:], body, opened)
            await self._drain(tier, opened)
            nursery.cancel_scope.cancel(f"the {tier.name} tier stopped")

    async def start_children(
        self, tiers: Sequence[TierSpec[PartsT]], parts: PartsT, opened: OpenTiers
    ) -> None:
        """Start every child of ``tiers`` from ``parts``, tier by tier, each in its tier's nursery
        (those for ``[ha]`` only when it is on)."""
        for tier in tiers:
            nursery = opened.nurseries[tier.name]
            for child in tier.children:
                if child.ha_only and not self._ha:
                    continue
                ended = opened.ended[child.name] = trio.Event()
                supervised = partial(
                    supervise,
                    child,
                    child.start(parts, nursery),
                    self._restarts,
                    self._escalate,
                    entropy=self._entropy,
                    stopping=lambda: self._stop.requested,
                )
                await nursery.start(_marking_end, supervised, ended)

    async def _drain(self, tier: TierSpec[PartsT], opened: OpenTiers) -> None:
        """Wait for the tier's draining children to return, each within its share of the budget
        (once stopping; a term that ends otherwise drains only what needs no budget)."""
        for child in tier.children:
            ended = opened.ended.get(child.name)
            if child.shutdown is not Shutdown.DRAIN or ended is None:
                continue
            budget = max(0.0, self._stop.deadline - trio.current_time()) * child.share
            with trio.move_on_after(budget):
                await ended.wait()


def ask_to_stop(tiers: Sequence[TierSpec[PartsT]], parts: PartsT) -> None:
    """Ask every draining child of ``tiers`` that says how (the API server: stop accepting)."""
    for tier in tiers:
        for child in tier.children:
            if child.ask is not None:
                child.ask(parts)()


async def _marking_end(
    supervised: ChildRun,
    ended: trio.Event,
    *,
    task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a supervised child; ``ended`` is set when it is over for good."""
    try:
        await supervised(task_status=task_status)
    finally:
        ended.set()
