"""Waiting for the first of several things."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

__all__ = ["wait_any"]


async def wait_any(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as one of ``waits`` has returned."""
    async with trio.open_nursery() as racing:
        for wait in waits:

            async def until(wait: Callable[[], Awaitable[object]] = wait) -> None:
                await wait()
                racing.cancel_scope.cancel("one of the waits has returned")

            racing.start_soon(until)
