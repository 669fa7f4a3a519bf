"""The runner factory against a fake Nomad client: what it does when a runner changes under it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
import trio.testing

from supervisor.base.errors import NomadRequestError, NomadUnavailableError
from supervisor.core.config import FactorySettings
from supervisor.core.environments import claim_meta
from supervisor.core.evidence import Moment
from supervisor.core.pool import RunnerPool
from supervisor.core.runners import CreateRunner, DestroyRunner, MarkUsed
from supervisor.effects.factory import RunnerFactory
from supervisor.nomad.models import (
    Allocation,
    JobDeregisterResponse,
    JobListStub,
    JobRegisterResponse,
)

from .factory_doubles import ENVIRONMENT, QuickNomad, SlowNomad, two_creations


def one_runner_and_a_slow_factory() -> tuple[RunnerPool, str, SlowNomad, RunnerFactory]:
    """A pool with one runner to create, and a factory whose registrations wait to be released."""
    pool = RunnerPool()
    _, actions = pool.set_environment(ENVIRONMENT)
    runner_id = actions[0].runner_id  # type: ignore[union-attr]
    nomad = SlowNomad()
    factory = RunnerFactory(nomad, pool, FactorySettings(registrations_per_second=1000))
    return pool, runner_id, nomad, factory


async def test_a_runner_released_while_marked_used_does_not_come_back() -> None:
    pool, runner_id, nomad, factory = one_runner_and_a_slow_factory()
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(CreateRunner(runner_id, 10))
        await trio.testing.wait_all_tasks_blocked()
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert pool.runners[runner_id].registered_index == 42
        pool.apply_allocation(
            Allocation(id="a1", job_id=runner_id, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        nomad.release, nomad.registering = trio.Event(), trio.Event()
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        with trio.fail_after(5):
            await nomad.registering.wait()  # the write is under way (past the rate limiter's pause)
        for action in pool.release(runner.id):  # the client gives it back while the write is under way
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.testing.wait_all_tasks_blocked()
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel("test over")
    assert nomad.calls[2:] == [
        ("register", runner_id),  # the claim's meta write starts
        ("deregister", runner_id),  # the release purges the job meanwhile
        ("registered", runner_id),  # the write lands late and brings the job back...
        ("deregister", runner_id),  # ...so it is undone
    ]


async def test_an_environment_removed_while_a_creation_waits_for_its_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    nomad = QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await two_creations(nursery, nomad, registrations_per_second=1)
        await trio.testing.wait_all_tasks_blocked()  # the first is registered, the second waits
        assert len(nomad.calls) == 1
        for action in pool.remove_environment(10):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.sleep(5)
        nursery.cancel_scope.cancel("test over")
    created = nomad.calls[0][1]
    assert [call for call in nomad.calls if call[0] == "register"] == [("register", created)], (
        "nothing is registered after the removal"
    )
    assert ("deregister", created) in nomad.calls


async def test_a_claims_meta_write_does_not_wait_for_the_registration_pace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The pace is for new runner jobs, each of which places an allocation; marking a runner used
    updates its job in place, so a claim's write never queues behind a refill."""
    nomad = QuickNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await two_creations(nursery, nomad, registrations_per_second=0.1)
        await trio.testing.wait_all_tasks_blocked()  # the first is registered, the second waits 10 s
        first = nomad.calls[0][1]
        pool.apply_allocation(
            Allocation(id="a1", job_id=first, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        started = trio.current_time()
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        await trio.testing.wait_all_tasks_blocked()
        assert nomad.calls[1:] == [("register", first)], "written at once"
        assert trio.current_time() == started
        await trio.sleep(11)
        assert len(nomad.calls) == 3, "the second creation still came at its pace"
        nursery.cancel_scope.cancel("test over")


class _BrokenOnceNomad(QuickNomad):
    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        if not self.calls:
            self.calls.append(("broken", job["ID"]))
            raise ValueError("a bug in one action")
        return await super().register_job(job)


async def test_an_unexpected_error_fails_one_action_and_the_factory_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    nomad = _BrokenOnceNomad()
    async with trio.open_nursery() as nursery:
        pool, factory = await two_creations(nursery, nomad, registrations_per_second=10)
        await trio.sleep(1)
        nursery.cancel_scope.cancel("test over")
    broken, created = nomad.calls[0][1], nomad.calls[1][1]
    assert nomad.calls == [("broken", broken), ("register", created)]
    assert factory.failed == 1
    assert broken not in pool.runners, "the failed runner is forgotten, so the pool refills"
    assert pool.runners[created].registered_index == 42


async def test_a_tombstone_waits_for_a_registration_still_under_way() -> None:
    """A runner removed while its job's registration is on the wire: Nomad answers the purge with
    index 0 (no such job yet), and no listing may drop the tombstone before that registration lands
    and is purged in turn, or the job would be adopted as a fresh idle runner."""
    pool, runner_id, nomad, factory = one_runner_and_a_slow_factory()
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(CreateRunner(runner_id, 10))
        with trio.fail_after(5):
            await nomad.registering.wait()
        for action in pool.destroy(runner_id, "the execution environment changed"):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.testing.wait_all_tasks_blocked()
        assert ("deregister", runner_id) in nomad.calls
        assert pool.tombstones[runner_id].gone_at is None, "the registration may still land"
        pool.reconcile([], [], Moment(1.0), index=100)
        assert runner_id in pool.tombstones
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert nomad.calls[-1] == ("deregister", runner_id), "purged once its registration landed"
        assert pool.tombstones[runner_id].gone_at is not None
        nursery.cancel_scope.cancel("test over")


class _LostAnswerNomad(QuickNomad):
    """The first claim write lands in Nomad, but its answer is lost (a server restarted)."""

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        if claim_meta(job).get("used") == "true" and not any(c[0] == "lost" for c in self.calls):
            self.calls.append(("lost", job["ID"]))
            raise NomadUnavailableError("the server restarted before it answered")
        return await super().register_job(job)


async def _claim_whose_write_is_lost_then_release(nomad: _LostAnswerNomad) -> str:
    """A runner is claimed; its claim's write is lost; its client gives it back while the write
    waits for its retry. Two minutes pass; returns the runner's ID."""
    async with trio.open_nursery() as nursery:
        pool, factory = await two_creations(nursery, nomad, registrations_per_second=1000)
        await trio.testing.wait_all_tasks_blocked()
        first = nomad.calls[0][1]
        pool.apply_allocation(
            Allocation(id="a1", job_id=first, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        await trio.testing.wait_all_tasks_blocked()  # the write failed; its retry waits
        assert ("lost", runner.id) in nomad.calls
        for action in pool.release(runner.id):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.sleep(120)
        nursery.cancel_scope.cancel("test over")
    return runner.id


async def test_a_claim_write_whose_answer_was_lost_is_undone_once_the_runner_is_released(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its write may have landed after the release's purge and brought the job back, marked used:
    nobody would ever give that runner back."""
    nomad = _LostAnswerNomad()
    runner_id = await _claim_whose_write_is_lost_then_release(nomad)
    after_loss = nomad.calls[nomad.calls.index(("lost", runner_id)) + 1 :]
    assert after_loss.count(("deregister", runner_id)) == 2, "the release's purge, then the write undone"
    assert ("register", runner_id) not in after_loss, "the write is not retried for a released runner"


class _LeaderlessNomad(_LostAnswerNomad):
    """After the lost answer, the cluster has no leader for a while: every purge fails at first."""

    def __init__(self) -> None:
        super().__init__()
        self.failing_purges = 3

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        if any(c[0] == "lost" for c in self.calls) and self.failing_purges:
            self.failing_purges -= 1
            self.calls.append(("no leader", job_id))
            raise NomadUnavailableError("HTTP 500: No cluster leader")
        return await super().deregister_job(job_id, purge=purge)


async def test_undoing_a_late_write_is_retried_while_nomad_elects_a_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The purge that undoes a lost claim write fails too: it is retried like any purge, and the
    factory goes on (the job would leak otherwise)."""
    nomad = _LeaderlessNomad()
    runner_id = await _claim_whose_write_is_lost_then_release(nomad)
    assert nomad.failing_purges == 0, "the leader election was seen"
    after_loss = nomad.calls[nomad.calls.index(("lost", runner_id)) + 1 :]
    assert after_loss.count(("deregister", runner_id)) == 2, "the release's purge, then the write undone"


async def test_a_claim_learns_whether_its_used_mark_reached_nomad(autojump_clock: trio.abc.Clock) -> None:
    """The claim is answered only once its runner's job says 'used' in Nomad: a daemon that takes
    over before that would list the runner as idle and hand it out again."""
    pool, runner_id, nomad, factory = one_runner_and_a_slow_factory()
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(CreateRunner(runner_id, 10))
        nomad.release.set()
        await trio.testing.wait_all_tasks_blocked()
        pool.apply_allocation(
            Allocation(id="a1", job_id=runner_id, client_status="running", create_index=43, modify_index=43),
            Moment(trio.current_time()),
        )
        runner, _ = pool.claim(10, 0, now=0)
        nomad.release = trio.Event()
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        with trio.move_on_after(5) as waited:
            await factory.marked(runner.id)
        assert waited.cancelled_caught, "not while the write is under way"
        nomad.release.set()
        assert await factory.marked(runner.id) is True
        nursery.cancel_scope.cancel("test over")


async def test_a_used_mark_that_nomad_refuses_is_no_claim(autojump_clock: trio.abc.Clock) -> None:
    pool, runner_id, _, _ = one_runner_and_a_slow_factory()

    class _Refusing(SlowNomad):
        async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
            raise NomadRequestError("PUT /v1/jobs", status_code=400, body="refused")

    factory = RunnerFactory(_Refusing(), pool, FactorySettings(registrations_per_second=1000))
    pool.registered(runner_id, 42)
    pool.apply_allocation(
        Allocation(id="a1", job_id=runner_id, client_status="running", create_index=43, modify_index=43),
        Moment(0.0),
    )
    runner, _ = pool.claim(10, 0, now=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        factory.submit(MarkUsed(runner.id, ENVIRONMENT, 0))
        assert await factory.marked(runner.id) is False
        nursery.cancel_scope.cancel("test over")


async def test_a_purge_cut_short_by_the_factorys_restart_is_left_to_the_next_listing() -> None:
    """A purge on the wire when the factory is cancelled (a crash restarts it): whether Nomad
    still has the job is unknown. The tombstone no longer waits for a purge that will never
    answer: a listing that shows the job has it destroyed again, so that it is not leaked."""
    pool, runner_id, _, _ = one_runner_and_a_slow_factory()

    class _Hanging(SlowNomad):
        async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
            self.calls.append(("deregister", job_id))
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    hanging = _Hanging()
    factory = RunnerFactory(hanging, pool, FactorySettings(registrations_per_second=1000))
    pool.registered(runner_id, 42)
    async with trio.open_nursery() as nursery:
        await nursery.start(factory.run)
        for action in pool.destroy(runner_id, "the execution environment changed"):
            if isinstance(action, DestroyRunner):
                factory.submit(action)
        await trio.testing.wait_all_tasks_blocked()
        assert ("deregister", runner_id) in hanging.calls
        assert pool.tombstones[runner_id].gone_at is None
        nursery.cancel_scope.cancel("the factory restarts")
    assert pool.tombstones[runner_id].gone_at is not None
    listed = JobListStub(id=runner_id, status="running", create_index=42, modify_index=42)
    again = pool.reconcile([listed], [], Moment(1.0), index=100)
    assert any(isinstance(a, DestroyRunner) and a.runner_id == runner_id for a in again)
