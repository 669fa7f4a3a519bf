"""Nomad's evaluation routes on one simulated server (``command/agent/eval_endpoint.go``,
``job_endpoint.go``): why a placement failed, and asking for a new evaluation.

- ``GET /v1/evaluations``: full evaluations of the namespace (``*``: all), by ``prefix`` (then in ID
  order, else by CreateIndex and ID), ``job``, ``status`` or ``filter`` (not both: 400), in pages
  whose token is ``<CreateIndex>.<ID>``; a blocking query on the evaluations table.
- ``GET /v1/job/:id/evaluations``: the job's evaluations in the state store's order (status, then
  ID); ``[]`` for a job that has none.
- ``GET /v1/evaluation/:id/allocations``: the stubs of the allocations the evaluation placed; a
  blocking query on the allocations table; ``[]`` for an unknown evaluation.
- ``PUT|POST /v1/job/:id/evaluate``: a new ``job-register`` evaluation of the job, with
  ``EvalOptions.ForceReschedule`` marking its failed allocations for rescheduling now; an unknown
  job is Nomad's 500 ``job not found``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..http.filters import Getter, compile_filter
from ..http.gojson import BOOL, STRING, Struct
from ..http.query import QueryOptions, query_bool
from ..http.request_types import decode_request
from ..http.server import Request, Response, json_response
from ..scheduling.scheduler import reschedule_policy
from ..state.encode import alloc_stub, eval_full
from ..state.objects import SimEval
from .server_helpers import ServerHelpers

__all__ = ["EVAL_FIELDS", "EvaluationRoutes"]

EVAL_FIELDS: Final[Mapping[str, Getter]] = {
    "ID": lambda e: e.id,
    "Namespace": lambda e: e.namespace,
    "Priority": lambda e: e.priority,
    "Type": lambda e: e.type,
    "TriggeredBy": lambda e: e.triggered_by,
    "JobID": lambda e: e.job_id,
    "JobModifyIndex": lambda e: e.job_modify_index,
    "NodeID": lambda e: e.node_id,
    "Status": lambda e: e.status,
    "StatusDescription": lambda e: e.status_description,
    "NextEval": lambda e: e.next_eval,
    "PreviousEval": lambda e: e.previous_eval,
    "BlockedEval": lambda e: e.blocked_eval,
    "SnapshotIndex": lambda e: e.snapshot_index,
    "CreateIndex": lambda e: e.create_index,
    "ModifyIndex": lambda e: e.modify_index,
    "CreateTime": lambda e: e.create_time,
    "ModifyTime": lambda e: e.modify_time,
}
_JOB_EVALUATE_REQUEST: Final = Struct(
    "structs.JobEvaluateRequest",
    {
        "JobID": STRING,
        "EvalOptions": Struct("structs.EvalOptions", {"ForceReschedule": BOOL}),
        "Region": STRING,
        "Namespace": STRING,
        "AuthToken": STRING,
        "IdempotencyToken": STRING,
    },
)


def _page(
    options: QueryOptions,
    evaluations: list[SimEval],
    *,
    by_id: bool,
    reverse: bool,
    predicate: Callable[[Any], bool] | None,
) -> tuple[list[SimEval], str]:
    """Nomad's paginator over evaluations: from ``next_token`` on, the filter's matches,
    ``per_page`` of them, and the token of the first one left out."""

    def token(e: SimEval) -> str:
        return e.id if by_id else f"{e.create_index}.{e.id}"

    def before_token(e: SimEval) -> bool:
        if by_id:
            order = (e.id > options.next_token) - (e.id < options.next_token)
        else:
            index, dot, eval_id = options.next_token.partition(".")
            if not dot or not index.isdigit():
                return True  # a malformed token matches nothing
            key, target = (e.create_index, e.id), (int(index), eval_id)
            order = (key > target) - (key < target)
        return order > 0 if reverse else order < 0

    ordered = sorted(evaluations, key=(lambda e: e.id) if by_id else (lambda e: (e.create_index, e.id)))
    if reverse:
        ordered.reverse()
    selected = [
        e
        for e in ordered
        if not (options.next_token and before_token(e)) and (predicate is None or predicate(e))
    ]
    if options.per_page <= 0 or len(selected) <= options.per_page:
        return selected, ""
    return selected[: options.per_page], token(selected[options.per_page])


class EvaluationRoutes:
    """The evaluation routes of one server."""

    def __init__(self, cluster: ClusterHandle, helpers: ServerHelpers) -> None:
        self.cluster = cluster
        self.state = cluster.state
        self.scheduler = cluster.scheduler
        self.helpers = helpers

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add the routes to a server's router."""
        add("/v1/evaluations", "GET", self.list_evaluations)
        add("/v1/job/{job_id}/evaluations", "GET", self.job_evaluations)
        add("/v1/evaluation/{eval_id}/allocations", "GET", self.evaluation_allocations)
        add("/v1/job/{job_id}/evaluate", "PUT POST", self.evaluate_job)

    async def list_evaluations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/evaluations``."""
        job_id, status = request.arg("job"), request.arg("status")
        if request.arg("filter") and (job_id or status):
            raise NomadError(400, "Filter expression cannot be used with other filter parameters")
        options, index = await self.helpers.read(request, lambda: self.state.table_index["evals"])
        predicate = compile_filter(options.filter, EVAL_FIELDS)
        namespace = request.arg("namespace") or "default"
        evaluations = [
            e
            for e in self.state.every_evaluation()
            if (namespace == "*" or e.namespace == namespace)
            and e.id.startswith(options.prefix)
            and (not job_id or e.job_id == job_id)
            and (not status or e.status == status)
        ]
        page, next_token = _page(
            options,
            evaluations,
            by_id=bool(options.prefix),
            reverse=bool(query_bool(request, "reverse")),
            predicate=predicate,
        )
        headers = self.helpers.headers(index) + ((("X-Nomad-NextToken", next_token),) if next_token else ())
        return json_response([eval_full(e) for e in page], headers=headers)

    async def job_evaluations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/job/:id/evaluations``."""
        _, index = await self.helpers.read(request, lambda: self.state.table_index["evals"])
        namespace, job_id = request.arg("namespace") or "default", params["job_id"]
        evaluations = sorted(
            (e for e in self.state.every_evaluation() if e.namespace == namespace and e.job_id == job_id),
            key=lambda e: (e.status, e.id),
        )
        return json_response([eval_full(e) for e in evaluations], headers=self.helpers.headers(index))

    async def evaluation_allocations(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/evaluation/:id/allocations``."""
        _, index = await self.helpers.read(request, lambda: self.state.table_index["allocs"])
        eval_id = params["eval_id"]
        allocs = sorted((a for a in self.state.every_alloc() if a.eval_id == eval_id), key=lambda a: a.id)
        body = b"[" + b",".join(orjson.dumps(alloc_stub(a, resources=False)) for a in allocs) + b"]"
        return Response(200, body, "application/json", self.helpers.headers(index))

    async def evaluate_job(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/job/:id/evaluate``: a body is optional (older clients send none)."""
        job_id, force = params["job_id"], False
        if request.body:
            body = decode_request(request.body, _JOB_EVALUATE_REQUEST)
            if not body.get("JobID"):
                raise NomadError(400, "Job ID must be specified")
            if body["JobID"] != job_id:
                raise NomadError(400, "JobID not same as job name")
            force = bool((body.get("EvalOptions") or {}).get("ForceReschedule"))
        self.helpers.require_leader(request)
        state = self.state
        key = (request.arg("namespace") or "default", job_id)
        job = state.jobs.get(key)
        if job is None:
            raise NomadError(500, "job not found")
        modify_index = job.modify_index
        with state.write("AllocationUpdateDesiredStatus") as tx:
            if force:
                for alloc in state.allocs_by_job.get(key, {}).values():
                    policy = reschedule_policy(job.spec, job.group(alloc.task_group) or {})
                    enabled = policy.get("Unlimited") or int(policy.get("Attempts") or 0) > 0
                    if (
                        enabled
                        and alloc.client_status == "failed"
                        and not alloc.next_allocation
                        and not alloc.desired_transition.get("ForceReschedule")
                    ):
                        transition = {**alloc.desired_transition, "ForceReschedule": True}
                        state.alloc_changed(tx, alloc, desired_transition=transition)
            evaluation = state.new_eval(tx, key, "job-register", job_modify_index=modify_index)
        self.scheduler.enqueue(evaluation)
        result = {
            "EvalCreateIndex": evaluation.create_index,
            "EvalID": evaluation.id,
            "Index": evaluation.create_index,
            "JobModifyIndex": modify_index,
            "KnownLeader": False,
            "LastContact": 0,
            "NextToken": "",
            "Warnings": "",
        }
        return json_response(result, headers=(("X-Nomad-Index", str(evaluation.create_index)),))
