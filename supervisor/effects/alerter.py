"""The prewarming-pool alerter: per environment, ok -> depleting -> due for a reload.

An environment whose idle runners stay below ``alert.prewarming_pool_threshold`` of its pool size for
``alert.reload_timeout`` seconds is reloaded: the informer is asked to list Nomad again
and reconcile the pool, which finds runners lost without an event and refills what is missing.
Poseidon's alert is the only way it ever replaced lost runners; here the pool refills on every loss
and relists periodically, so this is the last line, and it says loudly when it had to act.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

import trio
from attrs import define, field
from loguru import logger

from ..base.levels import Requests
from ..core.config import AlertSettings
from ..core.pool_view import PoolView
from ..core.runners import PoolStats

__all__ = ["AlertStates", "PrewarmingPoolAlerter"]


@define
class AlertStates:
    """The decision, without I/O: which environments are depleting, since when, and which are due."""

    threshold: float
    reload_timeout: float
    depleting_since: dict[int, float] = field(factory=dict)

    def update(self, pools: Mapping[int, PoolStats], now: float) -> list[int]:
        """Record the pools' fill; returns the environments due for a reload."""
        due = []
        for environment_id, stats in pools.items():
            if not stats.is_depleting(self.threshold):
                self.depleting_since.pop(environment_id, None)
                continue
            since = self.depleting_since.setdefault(environment_id, now)
            if self.reload_timeout > 0 and now - since >= self.reload_timeout:
                due.append(environment_id)
        for gone in set(self.depleting_since) - set(pools):
            del self.depleting_since[gone]
        return due

    def reloaded(self, environment_id: int, now: float) -> None:
        """A reload happened: the clock starts again if the pool is still low."""
        if environment_id in self.depleting_since:
            self.depleting_since[environment_id] = now


class PrewarmingPoolAlerter:
    """Watches every pool's fill and asks for a relist when one stays depleted too long."""

    def __init__(self, pool: PoolView, relists: Requests, settings: AlertSettings) -> None:
        self._pool = pool
        self._relists = relists
        self.states = AlertStates(settings.prewarming_pool_threshold, settings.reload_timeout)
        self.check_interval = settings.check_interval

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> NoReturn:
        """Look at every pool's fill every ``alert.check_interval``; never returns."""
        task_status.started()
        while True:
            await trio.sleep(self.check_interval)
            due = self.states.update(self._pool.stats(), trio.current_time())
            if not due:
                continue
            logger.warning(
                "prewarming pool alert: environments {} stayed depleted; reloading", ", ".join(map(str, due))
            )
            self._relists.request("prewarming pool alert")
            for environment_id in due:
                self.states.reloaded(environment_id, trio.current_time())
