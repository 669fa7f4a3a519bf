"""A stream that served a while and then dropped (its server restarted) is reconnected at the first
step of the backoff, at the daemon's default settings; only losses in quick succession make it grow.
On trio's MockClock (5 ms autojump threshold): the cluster's own processes take real time."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from supervisor.base.levels import StreamState
from supervisor.core.config import Settings
from supervisor.informer.informer import STREAM_HEALTHY_AFTER

from .conftest import Harness


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.005)


async def cut_and_wait_until_up(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.service.gate.state is StreamState.UP, within=60)
    harness.cluster.cut_streams()
    await harness.wait_for(lambda: harness.service.gate.state is not StreamState.UP, within=5)
    await harness.wait_for(lambda: harness.service.gate.state is StreamState.UP, within=60)


async def test_losses_after_healthy_stretches_do_not_grow_the_backoff(
    harness: Harness, clock: trio.testing.MockClock
) -> None:
    assert harness.daemon.settings.watcher == Settings().watcher, "default settings"
    watcher = harness.service.informer
    assert watcher is not None
    for _ in range(4):
        await cut_and_wait_until_up(harness)
        await trio.sleep(STREAM_HEALTHY_AFTER + 1)
    assert watcher.backoff.failures == 1, "each loss after a healthy stretch starts over"


async def test_losses_in_quick_succession_grow_the_backoff(
    harness: Harness, clock: trio.testing.MockClock
) -> None:
    watcher = harness.service.informer
    assert watcher is not None
    for _ in range(4):
        await cut_and_wait_until_up(harness)
    assert watcher.backoff.failures == 4, "a flapping stream does not earn a fresh start"
