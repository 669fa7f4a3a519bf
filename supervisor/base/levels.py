"""Level state that tasks can wait on: the event stream's health is a state, never a cancellation."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

__all__ = ["AsyncValue", "Requests", "StreamState"]

T = TypeVar("T")


class StreamState(enum.Enum):
    """The event stream's health, as the admission gate keeps it."""

    UP = "up"
    DOWN = "down"
    RECOVERING = "recovering"


class AsyncValue(Generic[T]):
    """A value with ``wait_value(predicate)``; like trio-util's AsyncValue, in a dozen lines."""

    def __init__(self, value: T, clock: Callable[[], float] = trio.current_time) -> None:
        self._value = value
        self._changed = trio.Event()
        self._clock = clock
        self.since = 0.0

    @property
    def value(self) -> T:
        """The value now."""
        return self._value

    @value.setter
    def value(self, value: T) -> None:
        if value == self._value:
            return
        self._value = value
        self.since = self._clock()
        self._changed.set()
        self._changed = trio.Event()

    async def wait_value(self, predicate: Callable[[T], bool]) -> T:
        """Return the value once ``predicate`` holds for it."""
        while not predicate(self._value):
            await self._changed.wait()
        return self._value


class Requests:
    """Requests for one piece of work, coalesced: any number made before ``wait()`` returns are one."""

    def __init__(self) -> None:
        self._reasons: list[str] = []
        self._pending = trio.Event()

    def request(self, reason: str) -> None:
        """Ask for the work, saying why; requests made before the next ``wait()`` are one."""
        if reason not in self._reasons:
            self._reasons.append(reason)
        self._pending.set()

    def clear(self) -> None:
        """Drop the requests made so far: the work they ask for is about to be done anyway."""
        self._reasons = []
        self._pending = trio.Event()

    async def wait(self) -> list[str]:
        """Wait for a request; returns the reasons of every request made since the last wait."""
        await self._pending.wait()
        reasons = self._reasons
        self.clear()
        return reasons
