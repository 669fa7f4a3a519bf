"""How many bytes of large request bodies a server holds at once.

An app that reads a body whole and parses it (the API's JSON, a file copy's base64) holds it about
three times over for a while: the parts as read, the parts joined, the parsed document. Eight
clients each sending 50 MiB at once took the daemon past 600 MiB, and glibc kept much of it after.
A body larger than ``SMALL`` takes its share of the budget before its first byte is read, and gives
it back when its exchange ends; a body that would pass the budget waits in line for its turn (its
client waits in TCP's flow control meanwhile; past ``body_timeout`` it is answered 503), so that at
most ``total`` bytes of large bodies are in flight. A body of unknown length (chunked) takes the
whole budget once it passes ``SMALL``: it is one at a time. Freed heap pages go back to the system
after each large body.
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

import trio

from .memory import release_free_memory

__all__ = ["SMALL", "BodyBudget"]

# Bodies up to this size (bytes) never wait.
SMALL: Final = 1024 * 1024


@final
class BodyBudget:
    """Bytes of large bodies in flight, across a server's connections; given out in the order they
    were asked for, so that a steady flow of small shares cannot starve a large one."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0
        self._line: deque[object] = deque()
        # Set (and replaced) whenever a share is given back or the line moves.
        self._moved = trio.Event()

    async def take(self, size: int, patience: float) -> int | None:
        """Wait in line until ``size`` bytes (at most the whole budget) are free and hold them; the
        share held, to be given back by ``give_back``; None if not given within ``patience``
        seconds."""
        share = min(size, self.total)
        await trio.lowlevel.checkpoint()
        ticket = object()
        self._line.append(ticket)
        try:
            with trio.move_on_after(patience):
                while self._line[0] is not ticket or self.held + share > self.total:
                    await self._moved.wait()
                self.held += share
                return share
            return None
        finally:
            self._line.remove(ticket)
            self._move()

    def give_back(self, share: int) -> None:
        """A body's exchange has ended: its share is free again, and so are its pages."""
        if share <= 0:
            return
        self.held -= share
        self._move()
        release_free_memory()

    def _move(self) -> None:
        self._moved.set()
        self._moved = trio.Event()
