"""The ``[[environments]]`` of the configuration, ensured in Nomad once the term's first listing is in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import trio

from ..core.environments import ExecutionEnvironment
from ..desk.service import RunnerService

__all__ = ["ConfiguredEnvironments"]


@final
class ConfiguredEnvironments:
    """Ensures ``environments`` through the term's ``service``, and is done."""

    def __init__(self, service: RunnerService, environments: Sequence[ExecutionEnvironment]) -> None:
        self._service = service
        self._environments = tuple(environments)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Ensure them (at once done, when the configuration declares none)."""
        task_status.started()
        if not self._environments:
            return
        await self._service.ensure_environments(self._environments)
