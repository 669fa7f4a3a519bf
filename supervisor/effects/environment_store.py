"""Execution environments in Nomad: their template jobs written, read and adopted into the pool.

A template job of ours holds its environment in its meta; one that Poseidon wrote holds it in its
own fields (``core.poseidon_templates``), which the listing's stub does not carry: it is read with
one GET, and again only when its ModifyIndex changed, so a relist costs no more reads than
templates changed since the last one.

Writes (PUT, DELETE) and the reads that update the pool from templates (a relist, ``fetch``) take
turns under one lock: a read answered before a write must not be applied after it, or a deleted
environment would come back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

import trio
from loguru import logger

from ..base.backoff import Backoff, BackoffPolicy
from ..base.entropy import Entropy
from ..base.errors import (
    InvalidRequest,
    NomadNotFound,
    NomadPermissionDenied,
    NomadRequestError,
    NomadUnavailableError,
    TerminalError,
    TransientError,
)
from ..base.faults import FaultKind, Faults
from ..core.environments import (
    DEFAULT_SHAPE,
    TEMPLATE_PREFIX,
    ExecutionEnvironment,
    environment_from_template,
    has_environment_meta,
    is_current_template,
    template_job,
)
from ..core.job_template import JobShape
from ..core.orders import Change, RemoveEnvironment, SetEnvironment
from ..core.pool_view import PoolView
from ..core.poseidon_templates import (
    PoseidonTemplateError,
    environment_from_poseidon_job,
    template_environment_id,
)
from ..core.runners import Action, DestroyRunner
from ..nomad import Job, JobListStub
from ..nomad.api import NomadApi
from ..nomad.boundary import in_one_line, token_refused

__all__ = ["JOB_WRITES", "JOB_WRITES_NEED", "EnvironmentStore"]

# The subject of a refused token's fault met writing jobs, and what those writes need.
JOB_WRITES: Final = "job writes"
JOB_WRITES_NEED: Final = "submit-job in the daemon's namespace"
# Nomad's refusal of a registration that changes an existing job's type (validateJobUpdate).
_TYPE_CHANGE: Final = "cannot update job from type"


class EnvironmentStore:
    """The environments' template jobs in Nomad, kept in step with the pool."""

    def __init__(
        self,
        client: NomadApi,
        pool: PoolView,
        tell: Callable[[Change], list[Action]],
        *,
        entropy: Entropy | None = None,
        faults: Faults | None = None,
        shape: JobShape = DEFAULT_SHAPE,
    ) -> None:
        self._client = client
        self._shape = shape
        self._pool = pool
        self._tell = tell
        self._faults = Faults() if faults is None else faults
        # The retries' jitter.
        self._entropy = Entropy() if entropy is None else entropy
        self.lock = trio.Lock()
        # Poseidon's template jobs read so far, by job ID: the ModifyIndex read at, and the
        # environment (None: it holds none, told once).
        self._poseidon: dict[str, tuple[int, ExecutionEnvironment | None]] = {}
        # Our template jobs of an older shape registered anew, by job ID: the JobModifyIndex tried.
        self._reshaped: dict[str, int] = {}

    async def put(self, environment: ExecutionEnvironment, *, roll_out: bool = True) -> bool:
        """Store the environment in Nomad (its template job), then warm its pool; True if new.
        With ``roll_out`` (every PUT, as Poseidon: how a client rolls out an image pushed again
        under the same tag) its runners are replaced even when the definition did not change: idle
        ones at once, used ones when they are given back. A job Nomad refuses is InvalidRequest
        with Nomad's word, and changes nothing; a refused token is a fault as well (health tells it)."""
        async with self.lock:
            try:
                await self._register_template(environment)
            except NomadPermissionDenied as exc:
                self._faults.report(
                    FaultKind.TOKEN_REFUSED, JOB_WRITES, *token_refused(exc.body, JOB_WRITES_NEED)
                )
                raise
            except NomadRequestError as exc:
                message = in_one_line(exc.body) or str(exc)
                raise InvalidRequest(
                    f"Nomad refuses the job of execution environment {environment.id}: {message}"
                ) from exc
            self._faults.clear(FaultKind.TOKEN_REFUSED, JOB_WRITES)
            self._faults.clear(FaultKind.ENVIRONMENT_REFUSED, str(environment.id))
            created = self._pool.environment(environment.id) is None
            self._tell(SetEnvironment(environment, roll_out=roll_out))
        logger.info(
            "environment {} {} (image {}, pool of {})",
            environment.id,
            "created" if created else "updated",
            environment.image,
            environment.prewarming_pool_size,
        )
        return created

    async def _register_template(self, environment: ExecutionEnvironment) -> None:
        """Register the environment's template job, in place of Poseidon's if it is there.

        Nomad refuses to change a job's type (``cannot update job from type "batch" to
        "service"``), even a stopped one's: Poseidon's batch template is purged first, then ours
        registered, both under ``lock``, as Poseidon itself purges and registers its template on
        every PUT. A crash between the two leaves the environment without a template job: a
        restarted daemon answers 404 for it until the client sends it again, which CodeOcean does
        on a 404. Poseidon's runners of it are left alone then: their jobs have no meta naming
        their environment, so they are never taken for orphans; but runner jobs this daemon made
        for it since the takeover (each claim's replacement) name it, and the restarted daemon
        destroys those as orphans. Without a crash nothing is lost in between: a relist waits for
        ``lock``, ``adopt`` only adds environments, and a registration Nomad refuses or fails
        brings Poseidon's job back (``_replace_poseidons``).
        """
        job_id = f"{TEMPLATE_PREFIX}{environment.id}"
        job = template_job(environment, self._shape)
        if job_id in self._poseidon:
            await self._replace_poseidons(job_id, job)
            return
        try:
            await self._client.register_job(job)
        except (NomadRequestError, NomadUnavailableError) as exc:
            if _TYPE_CHANGE not in exc.body:
                raise
            await self._replace_poseidons(job_id, job)  # one this daemon had not listed yet

    async def _replace_poseidons(self, job_id: str, job: dict[str, Any]) -> None:
        """Purge Poseidon's template job ``job_id``, then register ours. When ours is refused, or
        Nomad fails meanwhile, Poseidon's job is registered back as it was read (a purged job may
        come back of any type) and the error raised: the environment keeps the template it had, and
        the client may try again. The writes are shielded from the request's cancellation: a client
        that leaves between them must not leave the environment without a template job."""
        with trio.CancelScope(shield=True):
            try:
                before: dict[str, Any] | None = (await self._client.read_job(job_id)).value
            except NomadNotFound:
                before = None
            await self._client.deregister_job(job_id, purge=True)
            logger.info("template job {} of Poseidon purged, to be registered as this daemon's", job_id)
            self._poseidon.pop(job_id, None)
            try:
                await self._client.register_job(job)
            except (TransientError, TerminalError):
                if before is not None:
                    await self._restore(job_id, before)
                raise

    async def _restore(self, job_id: str, job: dict[str, Any]) -> None:
        """Register Poseidon's template job back after ours failed; if that fails too, the
        environment is left without one until its next PUT (said at ERROR)."""
        try:
            await self._client.register_job(job)
        except (TransientError, TerminalError) as exc:
            logger.error(
                "template job {} of Poseidon purged and neither ours nor its own registered ({}): "
                "the environment lasts until this daemon stops, or until it is PUT again",
                job_id,
                exc,
            )
        else:
            logger.warning("template job {} of Poseidon registered back: ours was not taken", job_id)

    async def delete(self, environment_id: int) -> None:
        """Forget the environment and its runners, and purge its template job."""
        async with self.lock:
            actions = self._tell(RemoveEnvironment(environment_id))
            await self._client.deregister_job(f"{TEMPLATE_PREFIX}{environment_id}", purge=True)
        self._faults.clear(FaultKind.ENVIRONMENT_REFUSED, str(environment_id))
        destroyed = sum(isinstance(a, DestroyRunner) for a in actions)
        logger.info("environment {} deleted: {} runners destroyed", environment_id, destroyed)

    async def load(self) -> None:
        """Adopt every environment stored in Nomad, whatever its template job's status (a template
        job that ended dead but still exists is still a valid definition; Poseidon's loader takes
        only running ones)."""
        async with self.lock:
            await self.adopt((await self._client.list_jobs(TEMPLATE_PREFIX, meta=True)).value)

    async def adopt(self, jobs: Iterable[JobListStub], *, fill: bool = True) -> None:
        """The environments of the listed template jobs (all of them) into the pool; call it
        holding ``lock``. Without ``fill``, their pools are refilled by the reconcile of their
        runner jobs that follows. Poseidon's are read when new or changed since they were last."""
        listed: set[str] = set()
        for job in jobs:
            if job.stop or not job.id.startswith(TEMPLATE_PREFIX):
                continue
            listed.add(job.id)
            if has_environment_meta(job.meta):
                environment = environment_from_template(job.meta)
                if environment is not None and not is_current_template(job.meta):
                    await self._reshape(job, environment)
            else:
                environment = await self._poseidon_environment(job)
            if environment is not None and self._pool.environment(environment.id) != environment:
                self._tell(SetEnvironment(environment, fill=fill))
        for job_id in set(self._poseidon) - listed:
            del self._poseidon[job_id]
        for job_id in set(self._reshaped) - listed:
            del self._reshaped[job_id]

    async def _reshape(self, stub: JobListStub, environment: ExecutionEnvironment) -> None:
        """Register anew a template job of ours in the first shape (count 0: dead, which Poseidon's
        loader skips), so that a switch back to Poseidon finds the environment. Tried once per
        version of the job; a failure is logged, and the template keeps serving as it is."""
        if self._reshaped.get(stub.id) == stub.job_modify_index:
            return
        self._reshaped[stub.id] = stub.job_modify_index
        try:
            await self._client.register_job(template_job(environment, self._shape))
        except (TransientError, TerminalError) as exc:
            logger.warning("template job {} left in its older shape: {}", stub.id, exc)
        else:
            logger.info("template job {} registered anew in the current shape", stub.id)

    async def _poseidon_environment(self, stub: JobListStub) -> ExecutionEnvironment | None:
        """The environment of a template job without our meta (Poseidon's), read by one GET unless
        it was read at the listed ModifyIndex already."""
        environment_id = template_environment_id(stub.id)
        if environment_id is None:
            return None
        known = self._poseidon.get(stub.id)
        if known is not None and known[0] == stub.modify_index:
            return known[1]
        try:
            job = (await self._client.get_job(stub.id)).value
        except NomadNotFound:
            return None  # purged since the listing: the next one will not show it
        except TransientError as exc:
            # One template unread fails no listing: the pool keeps what it knew of it (its ModifyIndex
            # is not recorded, so the next listing reads it again).
            logger.warning("template job {} not read this time: {}", stub.id, exc)
            return self._pool.environment(environment_id)
        if job.stop:
            return None  # stopped since the listing
        return self._read_poseidon(job, stub.modify_index)

    def _read_poseidon(self, job: Job, modify_index: int) -> ExecutionEnvironment | None:
        """The environment of Poseidon's template ``job``, kept for ``modify_index``; a template that
        holds none is told once (until it changes)."""
        try:
            environment: ExecutionEnvironment | None = environment_from_poseidon_job(
                {"ID": job.id, "TaskGroups": job.raw_task_groups}
            )
        except PoseidonTemplateError as exc:
            environment = None
            logger.warning("template job {} holds no valid execution environment, skipped: {}", job.id, exc)
        self._poseidon[job.id] = (modify_index, environment)
        return environment

    async def fetch(self, environment_id: int) -> ExecutionEnvironment | None:
        """The environment as Nomad holds it now (None if it does not), adopted into the pool."""
        async with self.lock:
            try:
                job = (await self._client.get_job(f"{TEMPLATE_PREFIX}{environment_id}")).value
            except NomadNotFound:
                return None
            if job.stop:
                return None
            if has_environment_meta(job.meta):
                environment = environment_from_template(job.meta)
            else:
                environment = self._read_poseidon(job, job.modify_index)
            if environment is not None:
                self._tell(SetEnvironment(environment))
            return environment

    async def ensure(self, environments: Iterable[ExecutionEnvironment]) -> None:
        """Register the environments declared in the configuration, retrying until Nomad answers;
        one Nomad refuses for good is logged and skipped. One already in Nomad as declared keeps its
        runners: a restart of the daemon rolls nothing out."""
        for environment in environments:
            backoff = Backoff(BackoffPolicy(1.0, 30.0), random_fraction=self._entropy.fraction)
            while True:
                try:
                    await self.put(environment, roll_out=False)
                    break
                except InvalidRequest as exc:
                    self._faults.report(
                        FaultKind.ENVIRONMENT_REFUSED,
                        str(environment.id),
                        str(exc),
                        f"mend [[environments]] id {environment.id} in the configuration",
                    )
                    break
                except NomadPermissionDenied:
                    # A fault (told once): tried again, since the operator mends the token's policy
                    # in Nomad, and the environment must then come.
                    await trio.sleep(backoff.failed(trio.current_time()))
                except TerminalError as exc:
                    logger.error("environment {} refused by Nomad: {}", environment.id, exc)
                    break
                except TransientError as exc:
                    delay = backoff.failed(trio.current_time())
                    logger.warning(
                        "environment {} not registered yet ({}); retry in {:.1f}s", environment.id, exc, delay
                    )
                    await trio.sleep(delay)
