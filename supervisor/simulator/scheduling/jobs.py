"""Job writes as Nomad's job endpoint does them: register (with versions), deregister (stop or purge),
and stopping one allocation.

A job is made canonical (``canonical.py``), given the constraints Nomad's server adds
(``constraints.py``) and validated as Nomad's server validates it (``validation.py``), its docker
tasks' configs as the docker driver decodes them (``driver_config.py``); what Nomad refuses, or the
simulator cannot model (a constraint it cannot check), is a 500 in go-multierror's text, and
nothing is written. An existing job keeps its type: a registration that changes it is refused (a 500,
Nomad's ``validateJobUpdate``), even while the job is stopped and not yet purged.
"""

from __future__ import annotations

from typing import Any, Final

from ..http.errors import NomadError
from ..state.objects import SimAlloc, SimJob
from ..state.store import ClusterState
from .canonical import canonical_job
from .constraints import add_implicit_constraints, constraint_problems
from .driver_config import driver_config_problems
from .scheduler import Scheduler
from .validation import job_problems, multierror_text

__all__ = ["JobService", "registration_problems"]

# Keys of a stored job that the server sets; they do not make a new version.
_SERVER_KEYS: Final = frozenset(
    {
        "Status",
        "StatusDescription",
        "Version",
        "CreateIndex",
        "ModifyIndex",
        "JobModifyIndex",
        "SubmitTime",
        "Stop",
        "Stable",
        "Namespace",
    }
)
_ENFORCE_INDEX: Final = "Enforcing job modify index"


def _comparable(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in _SERVER_KEYS}


def _deregister_response(eval_id: str, index: int, job_modify_index: int) -> dict[str, Any]:
    return {
        "EvalCreateIndex": index,
        "EvalID": eval_id,
        "Index": index,
        "JobModifyIndex": job_modify_index,
        "KnownLeader": False,
        "LastContact": 0,
        "NextToken": "",
        "VolumeEvalID": "",
        "VolumeEvalIndex": 0,
    }


def registration_problems(spec: dict[str, Any]) -> list[str]:
    """What Job.Register refuses a canonical job for (its implicit constraints added first), in
    Nomad's order: the job's own rules, its constraints, its docker tasks' configs."""
    add_implicit_constraints(spec)
    return job_problems(spec) + constraint_problems(spec) + driver_config_problems(spec)


class JobService:
    """Job writes as Nomad's job endpoint does them."""

    def __init__(self, state: ClusterState, scheduler: Scheduler) -> None:
        self.state = state
        self.config = state.config
        self.scheduler = scheduler

    def register(
        self,
        job_spec: dict[str, Any],
        namespace: str,
        *,
        region: str = "",
        enforce_index: bool = False,
        job_modify_index: int = 0,
    ) -> dict[str, Any]:
        """Register a job (an ``api.Job`` as decoded) as Nomad's Job.Register does: canonical,
        refused whole (500) when invalid or when ``enforce_index`` does not hold, a new version
        only when the spec changed."""
        spec = canonical_job(job_spec, namespace=namespace, region=region or self.config.region)
        problems = registration_problems(spec)
        if problems:
            raise NomadError(500, multierror_text(problems))
        state = self.state
        key = (namespace, str(spec["ID"]))
        job = state.jobs.get(key)
        if enforce_index:
            self._enforce_index(job, job_modify_index)
        if job is not None and job.type != spec.get("Type"):
            # Nomad's validateJobUpdate, after the index check: a stopped job that is not purged
            # still holds its type.
            raise NomadError(500, f'cannot update job from type "{job.type}" to "{spec.get("Type")}"')
        unchanged = job is not None and not job.stop and _comparable(job.spec) == _comparable(spec)
        with state.write("EvaluationUpdated" if unchanged else "JobRegistered") as tx:
            if job is None:
                job = SimJob(namespace=namespace, id=key[1], spec=spec, submit_time=state.now_ns())
                state.jobs[key] = job
            elif not unchanged:
                job.spec, job.version, job.stop = spec, job.version + 1, False
                job.submit_time = state.now_ns()
            if not unchanged:
                job.job_modify_index = state.index + 1
                tx.touch(job)
            evaluation = state.new_eval(tx, key, "job-register")
        if not unchanged:
            state.record_registration(key[1])
        self.scheduler.enqueue(evaluation)
        return {
            "EvalCreateIndex": evaluation.create_index,
            "EvalID": evaluation.id,
            "Index": evaluation.create_index,
            "JobModifyIndex": job.job_modify_index,
            "KnownLeader": False,
            "LastContact": 0,
            "NextToken": "",
            "Warnings": "",
        }

    @staticmethod
    def _enforce_index(job: SimJob | None, expected: int) -> None:
        if job is not None and expected == 0:
            raise NomadError(500, f"{_ENFORCE_INDEX} 0: job already exists")
        if job is not None and expected != job.job_modify_index:
            raise NomadError(
                500,
                f"{_ENFORCE_INDEX} {expected}: job exists with conflicting job modify index: "
                f"{job.job_modify_index}",
            )
        if job is None and expected != 0:
            raise NomadError(500, f"{_ENFORCE_INDEX} {expected}: job does not exist")

    def deregister(self, namespace: str, job_id: str, *, purge: bool) -> dict[str, Any]:
        """Stop or purge a job as Nomad's Job.Deregister does; an unknown job is a no-op."""
        state = self.state
        key = (namespace, job_id)
        job = state.jobs.get(key)
        if job is None:
            # Nomad >= 1.6: an unknown job is a no-op that creates no evaluation.
            return _deregister_response("", 0, 0)
        with state.write("JobDeregistered") as tx:
            if purge:
                del state.jobs[key]
                state.job_dead_since.pop(key, None)
                tx.delete_job(job)
            else:
                job.stop, job.version = True, job.version + 1
                job.job_modify_index = state.index + 1
                tx.touch(job)
            evaluation = state.new_eval(tx, key, "job-deregister")
        self.scheduler.enqueue(evaluation)
        return _deregister_response(evaluation.id, evaluation.create_index, job.job_modify_index)

    def stop_allocation(self, alloc: SimAlloc) -> dict[str, Any]:
        """``POST /v1/allocation/:id/stop``: the allocation is migrated, so a replacement is placed."""
        state = self.state
        with state.write("AllocationUpdateDesiredStatus") as tx:
            state.alloc_changed(tx, alloc, desired_transition={**alloc.desired_transition, "Migrate": True})
            evaluation = state.new_eval(tx, (alloc.namespace, alloc.job_id), "alloc-stop")
        self.scheduler.enqueue(evaluation)
        return {"EvalID": evaluation.id, "Index": evaluation.create_index}
