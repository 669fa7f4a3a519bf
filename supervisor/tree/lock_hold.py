"""The HA lock, held for a term: renewed while the term lasts; when it is lost (or its hold
crashes), the term ends.
"""

from __future__ import annotations

from typing import Final, final

import trio

from .election import Elector
from .term import Term

__all__ = ["LockHold"]

_HOLD_FAILED: Final = "the lock's hold failed"


@final
class LockHold:
    """Renews ``elector``'s lock for ``term``, and ends the term when the hold ends."""

    def __init__(self, term: Term, elector: Elector) -> None:
        self._term = term
        self._elector = elector

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the lock until it is lost; the term ends then, whichever way the hold ended."""
        term = self._term
        task_status.started()
        why = _HOLD_FAILED
        try:
            why = await self._elector.hold(term.acquired_at)
        finally:
            # Failed (or cancelled): whether the lock is still ours is unknown; let a standby take it now.
            term.release = why == _HOLD_FAILED
            term.why = why
            term.ending.set()
