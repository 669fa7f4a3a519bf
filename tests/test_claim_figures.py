"""What a claim that fails on our own error, or that its request's cancellation ends, comes to in
the desk's figures: the former an ``error``, the latter nothing (it was never answered).

Rules of these tests: they run in trio (pytest-trio's ``trio_mode``) on its autojump clock, with no
I/O: the runner service stands on a Nomad double, its pool filled through its one entry.
"""

from __future__ import annotations

import pytest
import trio

from supervisor.base.levels import StreamState
from supervisor.core.config import Settings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import AllocationSeen, JobRegistered
from supervisor.core.orders import SetEnvironment
from supervisor.desk.service import RunnerService
from supervisor.nomad import Allocation

from .nomad_double import NomadDouble

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())


def warm_service(nursery: trio.Nursery) -> RunnerService:
    service = RunnerService(NomadDouble(), Settings(), execution_nursery=nursery)
    service.effects.tell(SetEnvironment(ENVIRONMENT))
    for i, runner_id in enumerate(list(service.pool.runners)):
        service.effects.tell(JobRegistered(runner_id, 5))
        alloc = Allocation(
            id=f"a{i}", job_id=runner_id, client_status="running", create_index=6, modify_index=6
        )
        service.effects.tell(AllocationSeen(alloc))
    service.gate.report(StreamState.UP)
    return service


async def test_a_claim_that_fails_on_our_error_counts_as_an_error(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = warm_service(nursery)

    async def broken(runner_id: str) -> bool:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service.effects.factory, "marked", broken)
    with pytest.raises(RuntimeError):
        await service.desk.claim(10, 0)
    assert service.figures.claims.get("10", "error") == 1
    assert service.figures.claim_seconds.get("10") is None, "only claimed ones are timed"


async def test_a_claim_cancelled_with_its_request_is_not_counted(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    service = warm_service(nursery)

    async def never(runner_id: str) -> bool:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    monkeypatch.setattr(service.effects.factory, "marked", never)
    with trio.move_on_after(1):
        await service.desk.claim(10, 0)
    assert trio.current_time() == 1
    assert service.figures.claims.by_what() == {}
