"""CodeOcean-like churn across periodic relists, at the daemon's default settings.

Workers loop as CodeOcean's client does: claim, list the workspace (it must be empty), PATCH with
``delete: ["./*"]`` and a copy of a unique token, ``cat`` it back, give the runner back. The runs go
on past two periodic relists (``watcher.resync_interval``, 60 s by default). This test runs on trio's
MockClock, which jumps to the next deadline only once every task has waited for 5 ms of real time:
the simulated cluster's commands are real processes, so virtual time must not race past them.
"""

from __future__ import annotations

import base64
import uuid

import attrs
import pytest
import trio
import trio.testing

from supervisor.core.config import Settings
from supervisor.simulator import SimConfig

from .conftest import Harness, output

WORKERS = 3
UNTIL = 135.0  # virtual seconds: past the relists at 60 s and 120 s


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.005)


@pytest.fixture
def sim_config(sim_config: SimConfig) -> SimConfig:
    """Answers take 1 ms to arrive, so a listing is in flight while clients give runners back; the
    cluster's own delays are off, since each costs the autojump clock its real-time threshold."""
    return attrs.evolve(
        sim_config, response_latency=0.001, alloc_start_delay=0.0, task_kill_delay=0.0, eval_delay=0.0
    )


async def test_no_runner_is_handed_out_twice_and_every_workspace_starts_empty(
    harness: Harness, clock: trio.testing.MockClock
) -> None:
    assert harness.daemon.settings.watcher == Settings().watcher, "default settings"
    await harness.environment(10, prewarmingPoolSize=4)
    handed_out: list[str] = []
    leftovers: dict[str, list[str]] = {}
    cycles = 0

    async def worker(number: int) -> None:
        nonlocal cycles
        while trio.current_time() < UNTIL:
            response = await harness.http.post("/runners", json={"executionEnvironmentId": 10})
            if response.status_code == 500:
                assert response.json()["errorCode"] == "NOMAD_OVERLOAD", response.text
                await trio.sleep(0.5)
                continue
            assert response.status_code == 200, response.text
            runner = response.json()["runnerId"]
            handed_out.append(runner)
            files = f"/runners/{runner}/files"
            listing = await harness.http.get(files)
            assert listing.status_code == 200, listing.text
            names = [f["name"] for f in listing.json()["files"]]
            if names:
                leftovers[runner] = names
            token = f"{number}-{uuid.uuid4()}"
            patch = {
                "delete": ["./*"],
                "copy": [{"path": "in.txt", "content": base64.b64encode(token.encode()).decode()}],
            }
            assert (await harness.http.patch(files, json=patch)).status_code == 204
            messages = await harness.execute(runner, command="cat in.txt")
            assert messages[-1] == {"type": "exit", "data": 0}, messages
            assert output(messages) == token
            assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204
            cycles += 1
            await trio.sleep(6.0)

    async with trio.open_nursery() as nursery:
        for number in range(WORKERS):
            nursery.start_soon(worker, number)
    assert harness.service.informer.relisted.get("periodic", 0) >= 2, harness.service.informer.relisted
    assert cycles >= WORKERS * 15
    assert len(handed_out) == len(set(handed_out)), "a runner ID was handed out twice"
    assert leftovers == {}, "a claimed runner held the last client's files"
