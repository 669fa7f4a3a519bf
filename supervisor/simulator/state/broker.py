"""One server's event broker: a buffer of the last ``event_buffer_size`` batches and its subscribers.

Each simulated server has its own broker, filled from the writes it applies; a restarted server
starts with an empty one. Subscriptions follow Nomad's rules (nomad-api.md §1.1, §1.4): index 0 or
an index older than the buffer replays from the oldest buffered batch, a buffered index is inclusive,
an index past the newest batch still delivers the newest one, and a slow reader never misses a batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import trio
from attrs import frozen

from .store import PublishedBatch, PublishedEvent

__all__ = ["EventBroker", "Subscription", "TopicFilter"]


@frozen
class TopicFilter:
    """What one subscription asked for: topic -> keys (``*`` for all), and namespaces (``*`` for all)."""

    topics: dict[str, frozenset[str]]
    namespaces: frozenset[str]

    def matches(self, event: PublishedEvent) -> bool:
        """Whether the event passes the subscription's topics, keys and namespaces."""
        keys = self.topics.get(event.topic) or self.topics.get("*")
        if keys is None:
            return False
        if "*" not in keys and event.key not in keys and not keys.intersection(event.filter_keys):
            return False
        return not event.namespace or "*" in self.namespaces or event.namespace in self.namespaces

    def line(self, batch: PublishedBatch) -> bytes | None:
        """The NDJSON line of ``batch`` for this subscription, or None when nothing passes."""
        events = [event.data for event in batch.events if self.matches(event)]
        if not events:
            return None
        return b'{"Index":%d,"Events":[%s]}\n' % (batch.index, b",".join(events))


class Subscription:
    """The batches one reader has yet to receive; unbounded, as Nomad never drops a slow reader."""

    def __init__(self, topic_filter: TopicFilter, backlog: Iterable[PublishedBatch]) -> None:
        self.filter = topic_filter
        self._pending: deque[PublishedBatch] = deque(backlog)
        self._wakeup = trio.Event()

    def push(self, batch: PublishedBatch) -> None:
        """Queue a batch for the subscriber and wake it."""
        self._pending.append(batch)
        self._wakeup.set()

    async def next_lines(self, wait: float) -> list[bytes]:
        """Lines of the pending batches; waits up to ``wait`` seconds for one (empty if none came)."""
        with trio.move_on_after(wait):
            while not self._pending:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
        lines = []
        while self._pending:
            line = self.filter.line(self._pending.popleft())
            if line is not None:
                lines.append(line)
        return lines


class EventBroker:
    """One server's event buffer and its subscribers, with Nomad's index rules."""

    def __init__(self, buffer_size: int) -> None:
        self._buffer: deque[PublishedBatch] = deque(maxlen=buffer_size)
        self._subscriptions: set[Subscription] = set()

    def publish(self, batch: PublishedBatch) -> None:
        """Buffer a batch (the newest ``event_buffer_size``) and hand it to every subscriber."""
        if not batch.events:
            return
        self._buffer.append(batch)
        for subscription in self._subscriptions:
            subscription.push(batch)

    def subscribe(self, topic_filter: TopicFilter, index: int) -> Subscription:
        """A subscriber from ``index``, inclusive, replaying what the buffer still holds (Nomad's rules)."""
        if not self._buffer or index <= 0:
            backlog = list(self._buffer)
        elif index > self._buffer[-1].index:
            backlog = [self._buffer[-1]]
        else:
            backlog = [b for b in self._buffer if b.index >= index]
        subscription = Subscription(topic_filter, backlog)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Forget the subscriber."""
        self._subscriptions.discard(subscription)

    def reset(self) -> None:
        """A restart: the buffer is in memory only."""
        self._buffer.clear()
        self._subscriptions.clear()

    @property
    def oldest_index(self) -> int:
        """The oldest index the buffer holds (0 when it is empty)."""
        return self._buffer[0].index if self._buffer else 0
