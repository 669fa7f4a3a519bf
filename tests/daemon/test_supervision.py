"""The daemon supervises its children: a crash is restarted, a child that keeps crashing stops the
daemon gracefully, and a running execution survives both with its output whole.

Real clock (the simulated cluster's commands are real processes). The test of the restart
intensity sets ``[supervision] intensity`` to 2, since that setting is what it tests.
"""

from __future__ import annotations

import pytest

from supervisor.core.config import ServerSettings, Settings, SupervisionSettings
from supervisor.core.pool_view import PoolView

from .conftest import Harness, output

COMMAND = "echo started; sleep 2; echo finished"


def crash_the_expiry(harness: Harness, monkeypatch: pytest.MonkeyPatch, *, times: int) -> None:
    """The inactivity expiry's next looks at the pool raise, ``times`` times."""
    crashes: list[float] = []
    original = PoolView.expired

    def expired(pool: PoolView, now: float) -> list[str]:
        if len(crashes) < times:
            crashes.append(now)
            raise RuntimeError("a bug in the expiry")
        return original(pool, now)

    monkeypatch.setattr(PoolView, "expired", expired)
    harness.service.effects.expiry.changed()


async def test_a_crashed_child_is_restarted_and_running_executions_never_notice(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)

    async def crash() -> None:
        crash_the_expiry(harness, monkeypatch, times=1)
        await harness.wait_for(lambda: harness.daemon.restarts.total == 1)

    messages = await harness.run_until_end(runner, COMMAND, crash)
    assert messages[-1] == {"type": "exit", "data": 0}
    assert output(messages) == "started\r\nfinished\r\n", "the output is whole"
    assert harness.daemon.failure is None
    again = await harness.execute(runner, command="echo ok")
    assert again[-1] == {"type": "exit", "data": 0}, "the daemon serves on"


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), supervision=SupervisionSettings(intensity=2))]
)
async def test_a_child_that_keeps_crashing_stops_the_daemon_gracefully(
    harness: Harness, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)

    async def crash_for_good() -> None:
        crash_the_expiry(harness, monkeypatch, times=1_000)
        await harness.wait_for(lambda: harness.daemon.failure is not None)

    messages = await harness.run_until_end(runner, COMMAND, crash_for_good)
    assert harness.daemon.failure == "inactivity expiry kept failing"
    assert harness.daemon.restarts.total == 3, "two restarts, then one too many"
    assert messages[-1] == {"type": "exit", "data": 0}, "the stop let the running execution finish"
    assert output(messages) == "started\r\nfinished\r\n"
