"""``POST /v1/jobs/parse`` and ``PUT|POST /v1/validate/job`` as Nomad 1.10.5's agent answers them
(``command/agent/job_endpoint.go`` ``JobsParseRequest`` and ``ValidateJobRequest``,
``nomad/job_endpoint.go`` ``Job.Validate``).

- parse: the body is ``api.JobsParseRequest`` (``JobHCL``, ``Variables``, ``Canonicalize``; any
  other key is ignored, as Go's decoder ignores it: 1.10 has no ``HCLv1``); an empty ``JobHCL``
  is 400 ``Job spec is empty``, a jobspec ``jobspec2`` refuses 400 ``Failed to parse job: <hcl's
  diagnostics>``. The answer is the ``api.Job``, canonicalized by the ``api`` package when asked.
  It needs ``parse-job`` or ``submit-job`` in the query's namespace; the agent answers it alone.
  ``Variables`` sets the jobspec's variables (a var file's content; a syntax error in it is 400
  ``Failed to parse job: unable to parse var content: ...``).
- validate: the body is ``api.JobValidateRequest`` (``Job``); no job is 400 ``Job must be
  specified``. The job is canonicalized and validated as registration does it, and the answer is
  200 ``{"DriverConfigValidated": true, "ValidationErrors": [...] or null, "Error": "<multierror
  text>" or "", "Warnings": ""}``: a job that registration refuses gets the text of that 500
  here. It needs ``read-job`` in the job's namespace, and a leader (the RPC is forwarded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..http.gojson import BOOL, STRING, Struct
from ..http.request_types import JOB_REGISTER_REQUEST, decode_request
from ..http.server import Request, Response, json_response
from ..jobspec.canonical import canonical_api_job
from ..jobspec.decode import parse_job
from ..jobspec.hcl import parse_config
from ..jobspec.tree import HclError
from ..scheduling.canonical import canonical_job
from ..scheduling.jobs import registration_problems
from ..scheduling.validation import multierror_text

__all__ = ["JobspecRoutes"]

JOBS_PARSE_REQUEST: Final = Struct(
    "api.JobsParseRequest", {"JobHCL": STRING, "Variables": STRING, "Canonicalize": BOOL}
)
JOB_VALIDATE_REQUEST: Final = Struct(
    "api.JobValidateRequest",
    {
        "Job": JOB_REGISTER_REQUEST.fields["Job"],
        "Region": STRING,
        "Namespace": STRING,
        "SecretID": STRING,
    },
)


def validation(job: dict[str, Any]) -> dict[str, Any]:
    """``Job.Validate``'s reply for an ``api.Job``: the problems registration would refuse it for."""
    namespace = job.get("Namespace") or "default"
    region = job.get("Region") or "global"
    spec = canonical_job(job, namespace=namespace, region=region)
    problems = registration_problems(spec)
    return {
        "DriverConfigValidated": True,
        "ValidationErrors": problems or None,
        "Error": multierror_text(problems) if problems else "",
        "Warnings": "",
    }


class JobspecRoutes:
    """The jobspec's routes on one server."""

    def __init__(self, cluster: ClusterHandle) -> None:
        self.cluster = cluster

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add the routes to a server's router."""
        add("/v1/jobs/parse", "PUT POST", self.parse)
        add("/v1/validate/job", "PUT POST", self.validate)

    async def parse(self, request: Request, params: dict[str, str]) -> Response:
        """``/v1/jobs/parse``: the jobspec's ``api.Job``."""
        body = decode_request(request.body, JOBS_PARSE_REQUEST)
        source = body.get("JobHCL") or ""
        if not source:
            raise NomadError(400, "Job spec is empty")
        variables = body.get("Variables") or ""
        if variables:
            try:
                parse_config(variables)
            except HclError as error:
                raise NomadError(
                    400, f"Failed to parse job: unable to parse var content: {error.text}"
                ) from None
        try:
            job = parse_job(source, variables=variables)
        except HclError as error:
            raise NomadError(400, f"Failed to parse job: {error.text}") from None
        return json_response(canonical_api_job(job) if body.get("Canonicalize") else job)

    async def validate(self, request: Request, params: dict[str, str]) -> Response:
        """``/v1/validate/job``: what registration would say of the job, as a 200."""
        body = decode_request(request.body, JOB_VALIDATE_REQUEST)
        job = body.get("Job")
        if job is None:
            raise NomadError(400, "Job must be specified")
        if self.cluster.leader is None:
            raise NomadError(500, "No cluster leader")
        return json_response(validation(job))
