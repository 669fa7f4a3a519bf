"""The informer applies the stream's batches in the task that reads them; a relist asked for
meanwhile runs between two of them, never beside one (tests/test_watcher_turns.py has the order of
the turns)."""

from __future__ import annotations

import trio

from .conftest import Harness


async def test_a_batch_read_while_a_relist_runs_waits_for_it(harness: Harness, nursery: trio.Nursery) -> None:
    await harness.environment(10, prewarmingPoolSize=2)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    service = harness.service
    watcher = service.informer
    assert watcher is not None
    runner_id = next(iter(service.pool.runners))
    release = trio.Event()

    async def hold_the_lock_a_relist_needs() -> None:
        async with service.environments.lock:
            await release.wait()

    nursery.start_soon(hold_the_lock_a_relist_needs)
    await harness.wait_for(service.environments.lock.locked)
    service.relists.request("periodic")
    await harness.wait_for(lambda: service.environments.lock.statistics().tasks_waiting == 1)
    purged = await harness.nomad.deregister_job(runner_id, purge=True)

    def read() -> bool:
        stream = watcher._stream
        return stream is not None and stream.statistics.last_index >= purged.index

    await harness.wait_for(read, within=10)
    await trio.sleep(0.2)
    assert runner_id in service.pool.runners, "the purge's batch is read, and waits for the relist"
    assert watcher.last_index < purged.index
    release.set()
    await harness.wait_for(lambda: runner_id not in service.pool.runners, within=10)
    await harness.wait_for(lambda: watcher.last_index >= purged.index, within=10)
    assert watcher.relisted.get("periodic") == 1
