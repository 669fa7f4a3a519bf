"""Commands a previous run of the daemon left running in the runners it had claimed.

A daemon that is killed (SIGKILL, a crash of its host) cannot stop the commands of its running
executions, and Nomad leaves them running when their exec sessions drop. The next run adopts the
claimed runners from their jobs' meta; before any new work starts in one, it stops every command
noted there (``stop_every_noted_command``), and it sweeps every adopted claim in the background
meanwhile, retrying while Nomad cannot reach the runner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

import trio
from loguru import logger

from ..base.backoff import Backoff, BackoffPolicy
from ..base.entropy import Entropy
from ..base.errors import ExecAgentUnreachable, SupervisorError, TransientError
from ..core.commands import stop_every_noted_command
from ..nomad.api import ExecOpener

__all__ = ["LeftoverSweep"]

_RETRY: Final = BackoffPolicy(base=2.0, cap=30.0)


class LeftoverSweep:
    """One sweep per adopted claim; requests in that runner wait for it."""

    def __init__(
        self,
        client: ExecOpener,
        *,
        task: str,
        grace: float,
        alloc_of: Callable[[str], str | None],
        nursery: trio.Nursery,
        entropy: Entropy | None = None,
    ) -> None:
        self._client = client
        self._task = task
        self._grace = grace
        self._alloc_of = alloc_of
        self._nursery = nursery
        # The retries' jitter.
        self._entropy = Entropy() if entropy is None else entropy
        self._pending: dict[str, trio.Event] = {}
        self.swept = 0

    def adopt(self, runner_ids: Iterable[str]) -> None:
        """Sweep these runners, claimed by a previous run, in the background."""
        for runner_id in runner_ids:
            if runner_id not in self._pending:
                self._pending[runner_id] = done = trio.Event()
                self._nursery.start_soon(self._sweep, runner_id, done)

    async def wait(self, runner_id: str) -> None:
        """Return once the runner holds no command of a previous run."""
        done = self._pending.get(runner_id)
        if done is not None:
            await done.wait()

    async def _sweep(self, runner_id: str, done: trio.Event) -> None:
        backoff = Backoff(_RETRY, random_fraction=self._entropy.fraction)
        try:
            while (alloc_id := self._alloc_of(runner_id)) is not None:
                try:
                    command = stop_every_noted_command(self._grace)
                    async with self._client.open_exec(alloc_id, task=self._task, command=command) as session:
                        await session.wait_exit()
                    self.swept += 1
                    return
                except (TransientError, ExecAgentUnreachable) as exc:
                    logger.info("runner {}: stopping a previous run's commands waits: {}", runner_id, exc)
                    await trio.sleep(backoff.failed(trio.current_time()))
                except SupervisorError as exc:
                    logger.warning(
                        "runner {}: a previous run's commands could not be stopped: {}", runner_id, exc
                    )
                    return
        finally:
            self._pending.pop(runner_id, None)
            done.set()
