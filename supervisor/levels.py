"""Level state that tasks can wait on: the event stream's health is a state, never a cancellation."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

__all__ = ["AsyncValue", "StreamState"]

T = TypeVar("T")


class StreamState(enum.Enum):
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
        while not predicate(self._value):
            await self._changed.wait()
        return self._value
