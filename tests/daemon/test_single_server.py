"""A cluster with one Nomad server: while it restarts, nothing can reach Nomad at all."""

from __future__ import annotations

from functools import partial

import pytest

from supervisor.core.config import ExecutionSettings, ServerSettings, Settings
from supervisor.desk.executions import MESSAGE_CONNECTION_LOST
from supervisor.simulator import SimConfig

from .conftest import Harness


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(
        seed=12, servers=1, nodes=1, alloc_start_delay=0.01, task_kill_delay=0.01, eval_delay=0.001
    )


@pytest.fixture
def settings() -> Settings:
    return Settings(server=ServerSettings(port=0), execution=ExecutionSettings(stop_grace=0.2))


async def test_the_only_server_restarting_under_an_execution_keeps_the_runner(harness: Harness) -> None:
    """Through the server (the agent firewalled off), its restart cuts the session."""
    await harness.firewall_agents()
    await harness.environment(10)
    runner = await harness.runner(10)

    restart_the_only_server = partial(harness.restart_leader, 1.5)
    messages = await harness.run_until_end(runner, "echo go; sleep 60", restart_the_only_server)
    assert messages[-1] == {"type": "error", "data": MESSAGE_CONNECTION_LOST}
    # The stop could not reach Nomad at first; it goes through once the server is back.
    await harness.wait_for(lambda: harness.cluster.execs.count == 0, within=20)
    assert harness.service.pool.used_runner(runner) is not None, "the runner and its files are kept"
    again = await harness.execute(runner, command="echo still here")
    assert again[-1] == {"type": "exit", "data": 0}
