"""The informer's batches and listings take turns: first come first served, never beside each
other, and a batch read while a listing fails is never applied over it. An informer whose listing
and batches are scripted, and a fake stream, on virtual time, so that the order of the turns is the
only thing that varies."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
import trio

from supervisor.base.errors import NomadUnavailableError
from supervisor.base.levels import Requests
from supervisor.core.config import Settings
from supervisor.effects.effects import Effects
from supervisor.informer.informer import Informer
from supervisor.nomad import EventBatch, StreamStatistics
from supervisor.nomad.api import NomadApi


class FakeStream:
    def __init__(self) -> None:
        self.statistics = StreamStatistics()
        self.to_reader, self._batches = trio.open_memory_channel[EventBatch](math.inf)

    async def receive(self) -> EventBatch:
        return await self._batches.receive()


class FakeClient:
    def __init__(self) -> None:
        self.stream = FakeStream()

    @asynccontextmanager
    async def open_event_stream(self, topics: Any, **options: Any) -> AsyncIterator[FakeStream]:
        yield self.stream

    def rotate_address(self) -> None:
        pass


class FakeEffects:
    """The effects as the informer's constructor reads them: the pool and the relists."""

    pool: Any = None

    def __init__(self) -> None:
        self.relists = Requests()


class FakeService(Informer):
    """Logs each listing's start and end and each batch applied; a listing runs until let go."""

    def __init__(self) -> None:
        self.fake = FakeClient()
        unused: Any = None  # the environments: the scripted parts need none
        super().__init__(cast(NomadApi, self.fake), cast(Effects, FakeEffects()), unused, Settings())
        self.log: list[str] = []
        self.listings = 0
        self.let_go = trio.Event()
        self.fail_next = False

    async def relist(self) -> int:
        self.listings += 1
        number = self.listings
        self.log.append(f"listing {number}")
        if number > 1:  # the connect's listing ends at once
            await self.let_go.wait()
            self.let_go = trio.Event()
            if self.fail_next:
                self.log.append(f"listing {number} failed")
                raise NomadUnavailableError("the leader went away")
        self.log.append(f"listing {number} done")
        return 1

    def apply_batch(self, batch: EventBatch) -> None:
        self.log.append(f"batch {batch.index}")

    def request_relist(self, reason: str) -> None:
        self.relists.request(reason)


async def start(nursery: trio.Nursery) -> FakeService:
    service = FakeService()
    nursery.start_soon(service.run)
    await trio.sleep(1)
    assert service.log == ["listing 1", "listing 1 done"]
    return service


async def start_with_a_batch_read_during_a_listing(nursery: trio.Nursery) -> FakeService:
    """Batch 7 is read while listing 2 runs (until ``let_go``)."""
    service = await start(nursery)
    service.request_relist("periodic")
    await trio.sleep(1)
    service.fake.stream.to_reader.send_nowait(EventBatch(7, []))
    await trio.sleep(1)
    return service


async def test_a_batch_read_during_a_listing_goes_before_the_listing_asked_for_after_it(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    service = await start_with_a_batch_read_during_a_listing(nursery)
    service.request_relist("alert")
    await trio.sleep(1)
    assert service.log[2:] == ["listing 2"], "the batch waits for the listing under way"
    service.let_go.set()
    await trio.sleep(1)
    assert service.log[2:] == ["listing 2", "listing 2 done", "batch 7", "listing 3"]


async def test_a_batch_read_during_a_listing_that_fails_is_not_applied(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    service = await start_with_a_batch_read_during_a_listing(nursery)
    service.fail_next = True
    service.let_go.set()
    await trio.sleep(1)
    assert service.log[2:5] == ["listing 2", "listing 2 failed", "listing 3"], (
        "the stream is followed again from a new listing"
    )
    assert "batch 7" not in service.log


@pytest.mark.parametrize("batches", [1, 50])
async def test_batches_apply_in_order_between_listings(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, batches: int
) -> None:
    service = await start(nursery)
    for index in range(2, 2 + batches):
        service.fake.stream.to_reader.send_nowait(EventBatch(index, []))
    await trio.sleep(1)
    assert service.log[2:] == [f"batch {i}" for i in range(2, 2 + batches)]
