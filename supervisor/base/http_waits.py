"""The connections of an HTTP server that wait on their client: for a request's first byte (idle),
or for the rest of a head begun. Each kind in the order its waits began, so that a server at its
connection cap finds the one that has waited longest in constant time: an idle one first (its
client, if it comes back, connects again, as HTTP clients do on a keep-alive connection closed under
them), then a head (slowloris holds its places so), answered 408. A wait younger than ``SLOW_WAIT``
is spared: its client's request may be on its way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Final, final

import trio

__all__ = ["SLOW_WAIT", "Waits"]

# How long (seconds) a connection has waited on its client before a server at its cap takes it.
SLOW_WAIT: Final = 0.5


@final
class Waits:
    """A server's idle connections and unfinished heads, each a cancel scope with its start."""

    def __init__(self) -> None:
        self._idle: dict[trio.CancelScope, float] = {}
        self._heads: dict[trio.CancelScope, float] = {}

    def idle(self, scope: trio.CancelScope, began: float) -> AbstractContextManager[None]:
        """While ``scope`` waits for a request's first byte, since ``began``."""
        return _kept(self._idle, scope, began)

    def head(self, scope: trio.CancelScope, began: float) -> AbstractContextManager[None]:
        """While ``scope`` waits for the rest of a head begun at ``began``."""
        return _kept(self._heads, scope, began)

    def cancel_longest(self) -> str | None:
        """Cancel the idle wait that began longest ago, ``SLOW_WAIT`` ago or more, else such a
        head's; which kind it was ("idle", "head"), or None if no wait is that old."""
        now = trio.current_time()
        for kind, waits in (("idle", self._idle), ("head", self._heads)):
            for scope, began in waits.items():
                if scope.cancel_called:  # taken already; its task has not run since
                    continue
                if now - began < SLOW_WAIT:
                    break
                scope.cancel(f"{kind} connection taken for a new one at the cap")
                return kind
        return None


@contextmanager
def _kept(waits: dict[trio.CancelScope, float], scope: trio.CancelScope, began: float) -> Iterator[None]:
    waits[scope] = began
    try:
        yield
    finally:
        del waits[scope]
