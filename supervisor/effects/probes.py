"""Probes of suspect runners: an exec of ``sh -c true`` in each, once a listing taken after its agent came
back shows it running.

The servers list an allocation as its client last wrote it. A client that comes back without a
task's container (its host rebooted) writes so only once it has reached the servers, which may be
after its node is ready and relisted: until then the listing shows the allocation running while an
exec into it answers that the task is not running. So a listing proves nothing of a suspect runner;
an exec that ran in it does. A probe that fails leaves the runner suspect: its client's next write
(the task run again, or ended) proves or ends it, and the next listing probes it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import trio
from loguru import logger

from ..base.errors import ExecRejected, SupervisorError
from ..core.evidence import RunnerProven
from ..core.orders import Change
from ..nomad.api import ExecOpener

__all__ = ["PROBE_COMMAND", "RunnerProbes"]

# Every command the daemon runs in a runner goes through its shell, as this one does.
PROBE_COMMAND: Final = ("/bin/sh", "-c", "true")
# Nomad's close code for an exec refused with a 4xx: the task is not running, or not started yet.
_REFUSED_4XX: Final = 1008
# A probe that has not answered by then says nothing; the next listing probes again.
_PATIENCE: Final = 10.0
# Probes at once: every agent back at once makes every runner suspect, and each probe is an exec.
PARALLEL_PROBES: Final = 16


class RunnerProbes:
    """At most one probe per runner at a time and ``PARALLEL_PROBES`` in all, in the background."""

    def __init__(
        self, client: ExecOpener, tell: Callable[[Change], object], *, task: str, nursery: trio.Nursery
    ) -> None:
        self._client = client
        self._task = task
        self._tell = tell
        self._nursery = nursery
        self._probing: set[str] = set()
        self._limiter = trio.CapacityLimiter(PARALLEL_PROBES)
        self.proven = 0

    def probe(self, runner_id: str, alloc_id: str) -> None:
        """Run ``true`` in the runner's allocation: proven if it exits 0."""
        if runner_id not in self._probing:
            self._probing.add(runner_id)
            self._nursery.start_soon(self._probe, runner_id, alloc_id)

    async def container_runs(self, alloc_id: str) -> bool:
        """Run ``true`` in the allocation now: whether it exited 0. A refusal that says the task
        does not run (a 4xx close) is False; an agent out of reach or no answer raises (nothing
        is known then)."""
        try:
            with trio.fail_after(_PATIENCE):
                async with self._client.open_exec(
                    alloc_id, task=self._task, command=PROBE_COMMAND
                ) as session:
                    exited, _, _ = await session.wait_exit()
        except ExecRejected as refused:
            if refused.code != _REFUSED_4XX:
                raise
            return False
        return exited.exit_code == 0

    async def _probe(self, runner_id: str, alloc_id: str) -> None:
        try:
            async with self._limiter:
                await self._run(runner_id, alloc_id)
        finally:
            self._probing.discard(runner_id)

    async def _run(self, runner_id: str, alloc_id: str) -> None:
        try:
            with trio.move_on_after(_PATIENCE):
                async with self._client.open_exec(
                    alloc_id, task=self._task, command=PROBE_COMMAND
                ) as session:
                    exited, _, _ = await session.wait_exit()
                if exited.exit_code == 0:
                    self.proven += 1
                    self._tell(RunnerProven(runner_id, alloc_id))
                    return
                logger.info("runner {}: a probe exited {}; still suspect", runner_id, exited.exit_code)
                return
            logger.info("runner {}: a probe had no answer within {:g}s; still suspect", runner_id, _PATIENCE)
        except SupervisorError as exc:
            logger.info("runner {}: a probe could not run ({}); still suspect", runner_id, exc)
