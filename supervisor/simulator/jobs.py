"""Job writes as Nomad's job endpoint does them: register (with versions), deregister (stop or purge),
and stopping one allocation.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from .constraints import constraint_problems
from .objects import SimAlloc, SimJob
from .scheduler import Scheduler
from .state import ClusterState

__all__ = ["JobService", "NomadError"]

# Keys of an api.Job that the server sets; they do not make a new version.
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
_JOB_TYPES: Final = frozenset({"service", "batch", "system", "sysbatch"})


class NomadError(Exception):
    """An error answer: Nomad's status code and its text body."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _comparable(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in _SERVER_KEYS}


def validate(spec: dict[str, Any]) -> list[str]:
    """Server-side validation (Nomad answers these with 500)."""
    problems = []
    if spec.get("Type", "service") not in _JOB_TYPES:
        problems.append(f'Invalid job type: "{spec.get("Type")}"')
    groups = spec.get("TaskGroups")
    if not groups:
        problems.append("Missing job task groups")
    for group in groups or []:
        if not isinstance(group, dict) or not group.get("Name"):
            problems.append("Task group without a name")
            continue
        if not group.get("Tasks"):
            problems.append(f'Task group "{group["Name"]}" has no tasks')
        for task in group.get("Tasks") or []:
            if not isinstance(task, dict) or not task.get("Name") or not task.get("Driver"):
                problems.append(f'Task group "{group["Name"]}": every task needs a Name and a Driver')
        count = group.get("Count", 1)
        if count is not None and (not isinstance(count, int) or count < 0):
            problems.append(f'Task group "{group["Name"]}": Count must be a non-negative integer')
    return problems + constraint_problems(spec)


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


class JobService:
    """Job writes as Nomad's job endpoint does them."""

    def __init__(self, state: ClusterState, scheduler: Scheduler) -> None:
        self.state = state
        self.scheduler = scheduler

    def register(self, spec: dict[str, Any], namespace: str) -> dict[str, Any]:
        """Register a job as Nomad's Job.Register does: a new version only when the spec changed."""
        problems = validate(spec)
        if problems:
            details = "".join(f"\n\t* {p}" for p in problems)
            raise NomadError(500, f"Job validation failed: {len(problems)} error(s) occurred:{details}\n\n")
        state = self.state
        key = (namespace, str(spec["ID"]))
        spec = copy.deepcopy(spec)
        spec.setdefault("Name", spec["ID"])
        spec.setdefault("Type", "service")
        spec["Namespace"] = namespace
        job = state.jobs.get(key)
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
