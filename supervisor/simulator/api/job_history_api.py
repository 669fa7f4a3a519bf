"""A job's summary and versions on one simulated server (``command/agent/job_endpoint.go``).

- ``GET /v1/job/:id/summary``: the JobSummary: per group how many allocations are starting,
  running, complete, failed, lost or unknown, and how many the last evaluation left queued; a
  blocking query; 404 ``job not found``.
- ``GET /v1/job/:id/versions``: the tracked versions (Nomad keeps six), newest first, each as it
  last stood, in a JobVersionsResponse with its query meta; 404 ``job versions not found``. With
  ``diffs=true`` Nomad adds the diff of each version to the one before; the simulator answers
  ``Diffs: null``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..http.query import go_quote, query_bool
from ..http.server import Request, Response, json_response
from ..state.encode import empty_summary, summary_state
from ..state.objects import SimAlloc, SimJob
from .server_helpers import ServerHelpers

__all__ = ["JobHistoryRoutes", "job_summary"]

_UINT: Final = re.compile(r"[0-9]+")


def job_summary(job: SimJob, allocs: list[SimAlloc]) -> dict[str, Any]:
    """The job's JobSummary from its allocations and its groups' queued counts."""
    summary = empty_summary([str(g.get("Name", "")) for g in job.task_groups])
    for group, queued in job.queued.items():
        if group in summary:
            summary[group]["Queued"] = queued
    for alloc in allocs:
        counts = summary.setdefault(alloc.task_group, empty_summary([alloc.task_group])[alloc.task_group])
        counts[summary_state(alloc)] += 1
    return {
        "Children": {"Dead": 0, "Pending": 0, "Running": 0},
        "CreateIndex": job.create_index,
        "JobID": job.id,
        "ModifyIndex": _summary_index(job, allocs),
        "Namespace": job.namespace,
        "Summary": summary,
    }


def _summary_index(job: SimJob, allocs: list[SimAlloc]) -> int:
    """When the summary last changed, at the latest: the job's registration, its allocations'
    changes, its queued counts."""
    return max([job.job_modify_index, job.create_index, job.queued_index, *(a.modify_index for a in allocs)])


class JobHistoryRoutes:
    """A job's summary and versions."""

    def __init__(self, cluster: ClusterHandle, helpers: ServerHelpers) -> None:
        self.cluster = cluster
        self.state = cluster.state
        self.helpers = helpers

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add the routes to a server's router."""
        add("/v1/job/{job_id}/summary", "GET", self.summary)
        add("/v1/job/{job_id}/versions", "GET", self.versions)

    def _job(self, request: Request, params: dict[str, str]) -> tuple[tuple[str, str], SimJob | None]:
        key = (request.arg("namespace") or "default", params["job_id"])
        return key, self.state.job(key)

    async def summary(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/job/:id/summary``."""
        key, _ = self._job(request, params)

        def current_index() -> int:
            job = self.state.job(key)
            if job is None:
                return self.state.table_index["jobs"]
            return _summary_index(job, list(self.state.job_allocs(key)))

        _, index = await self.helpers.read(request, current_index)
        job = self.state.job(key)
        if job is None:
            raise self.helpers.not_found("job not found", index)
        summary = job_summary(job, list(self.state.job_allocs(key)))
        return json_response(summary, headers=self.helpers.headers(index))

    async def versions(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/job/:id/versions``."""
        query_bool(request, "diffs")  # parsed as Nomad parses it, for its errors; no diffs follow
        if (raw := request.arg("diff_version")) and (not _UINT.fullmatch(raw) or int(raw) >= 2**64):
            raise NomadError(
                500,
                f'Failed to parse value of "diff_version" ({raw}) as a uint64: '
                f"strconv.ParseUint: parsing {go_quote(raw)}: invalid syntax",
            )
        key, _ = self._job(request, params)

        def current_index() -> int:
            job = self.state.job(key)
            if job is None or not job.versions:
                return self.state.table_index["jobs"]
            return max(int(v.get("ModifyIndex") or 0) for v in job.versions.values())

        _, index = await self.helpers.read(request, current_index)
        job = self.state.job(key)
        versions = [job.versions[v] for v in sorted(job.versions, reverse=True)] if job else []
        if not versions:
            raise self.helpers.not_found("job versions not found", index)
        body = {
            "Diffs": None,
            "Index": index,
            "KnownLeader": self.cluster.leader is not None,
            "LastContact": 0,
            "NextToken": "",
            "Versions": versions,
        }
        return json_response(body, headers=self.helpers.headers(index))
