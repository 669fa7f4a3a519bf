"""``POST /v1/jobs/parse`` and ``PUT|POST /v1/validate/job`` on the simulated cluster, over HTTP.

What Nomad does, and where (hashicorp/nomad v1.10.5): ``command/agent/job_endpoint.go``
(``JobsParseRequest``: ``Job spec is empty``, ``Failed to parse job: ...``, the ``api`` package's
``Canonicalize``; ``ValidateJobRequest``: ``Job must be specified``), ``nomad/job_endpoint.go``
(``Job.Validate``: the validators' multierror as ``ValidationErrors`` and ``Error`` in a 200,
``read-job`` in the job's namespace), ``api/jobs.go`` (``JobValidateResponse``).

Rules of these tests: pytest-trio's ``trio_mode``; ``autojump_clock`` where a job is placed; the
cluster's servers listen on 127.0.0.1, port 0, started with ``nursery.start``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.simulator.config import AclPolicy, AclToken

from .conftest import batch_job, settle
from .test_jobspec import POSEIDON_JOB, POSEIDON_TEMPLATE, VARIABLES_TEMPLATE

ROOT = "root-secret"


async def call(
    cluster: SimulatedCluster,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str = "",
    content: bytes = b"",
) -> httpx.Response:
    headers = {"X-Nomad-Token": token} if token else {}
    async with httpx.AsyncClient(base_url=cluster.addresses[0], headers=headers, timeout=30) as http:
        if content:
            return await http.request(method, path, content=content)
        return await http.request(method, path, json=body)


async def test_poseidons_template_parses_to_its_api_job(cluster: SimulatedCluster) -> None:
    answer = await call(cluster, "POST", "/v1/jobs/parse", {"JobHCL": POSEIDON_TEMPLATE})
    assert (answer.status_code, answer.headers["content-type"]) == (200, "application/json")
    assert answer.json() == POSEIDON_JOB


async def test_a_canonical_parsed_job_registers_and_its_runner_is_placed(
    cluster: SimulatedCluster, autojump_clock: trio.testing.MockClock
) -> None:
    template = POSEIDON_TEMPLATE.replace('"template-0"', '"template-7"')
    parsed = await call(cluster, "PUT", "/v1/jobs/parse", {"JobHCL": template, "Canonicalize": True})
    job = parsed.json()
    assert (job["Region"], job["Namespace"], job["Priority"]) == ("global", "default", 50)
    assert job["TaskGroups"][0]["Tasks"][0]["LogConfig"]["Disabled"] is False
    registered = await call(cluster, "PUT", "/v1/jobs", {"Job": job})
    assert registered.status_code == 200, registered.text
    await settle(cluster, lambda: any(a.job_id == "template-7" for a in cluster.state.every_alloc()))
    stored = (await call(cluster, "GET", "/v1/job/template-7")).json()
    assert stored["TaskGroups"][0]["EphemeralDisk"]["SizeMB"] == 10
    assert stored["TaskGroups"][0]["Spreads"] == [
        {"Attribute": "${node.unique.name}", "SpreadTarget": None, "Weight": 100}
    ]


async def test_the_requests_variables_set_the_jobspecs(cluster: SimulatedCluster) -> None:
    body = {"JobHCL": VARIABLES_TEMPLATE, "Variables": 'runners = 2\ndatacenters = ["dc1", "dc2"]'}
    answer = await call(cluster, "POST", "/v1/jobs/parse", body)
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert (job["Datacenters"], job["TaskGroups"][0]["Count"]) == (["dc1", "dc2"], 2)
    unset = await call(cluster, "POST", "/v1/jobs/parse", {"JobHCL": VARIABLES_TEMPLATE})
    assert (unset.status_code, unset.text.split(";")[0]) == (
        400,
        'Failed to parse job: <nil>: Unset variable "runners"',
    )


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({"JobHCL": ""}, 400, "Job spec is empty"),
        ({"Canonicalize": True}, 400, "Job spec is empty"),
        (
            {"JobHCL": 7},
            400,
            "json: cannot unmarshal number into Go struct field JobsParseRequest.JobHCL of type string",
        ),
        (
            {"JobHCL": 'job "x" {\n  priorty = 1\n}\n'},
            400,
            'Failed to parse job: input.hcl:2,3-10: Unsupported argument; An argument named "priorty" is not '
            'expected here. Did you mean "priority"?',
        ),
        (
            {"JobHCL": 'job "x" {}', "Variables": "a = "},
            400,
            "Failed to parse job: unable to parse var content: input.hcl:1,5-5: Missing expression; "
            "Expected the start of an expression, but found the end of the file.",
        ),
    ],
)
async def test_a_parse_nomad_refuses_is_a_400_with_its_text(
    cluster: SimulatedCluster, body: dict[str, Any], status: int, text: str
) -> None:
    answer = await call(cluster, "POST", "/v1/jobs/parse", body)
    assert (answer.status_code, answer.text) == (status, text)


async def test_parse_takes_no_other_method_and_no_truncated_body(cluster: SimulatedCluster) -> None:
    answer = await call(cluster, "GET", "/v1/jobs/parse")
    assert (answer.status_code, answer.text) == (405, "Invalid method")
    answer = await call(cluster, "POST", "/v1/jobs/parse", content=b'{"JobHCL": "job')
    assert (answer.status_code, answer.text) == (400, "unexpected EOF")


async def test_validate_answers_a_valid_job_with_no_errors(cluster: SimulatedCluster) -> None:
    answer = await call(cluster, "POST", "/v1/validate/job", {"Job": batch_job("runner-1")})
    assert answer.status_code == 200
    assert answer.json() == {
        "DriverConfigValidated": True,
        "ValidationErrors": None,
        "Error": "",
        "Warnings": "",
    }


async def test_validate_lists_what_registration_refuses_in_the_same_texts(cluster: SimulatedCluster) -> None:
    job = batch_job("runner-2") | {"Priority": 200}
    job["TaskGroups"][0]["Count"] = -1
    job["TaskGroups"][0]["EphemeralDisk"] = {"SizeMB": 5}
    validated = await call(cluster, "PUT", "/v1/validate/job", {"Job": job})
    registered = await call(cluster, "PUT", "/v1/jobs", {"Job": job})
    assert registered.status_code == 500
    answer = validated.json()
    assert validated.status_code == 200
    assert answer["Error"] == registered.text
    assert answer["Error"].startswith("2 errors occurred:\n\t* Task group default-group validation failed: ")
    assert len(answer["ValidationErrors"]) == 2
    assert answer["ValidationErrors"][1] == "job priority must be between [1, 100]"
    assert "Task group count can't be negative" in answer["ValidationErrors"][0]
    assert "minimum DiskMB value is 10; got 5" in answer["ValidationErrors"][0]
    assert (answer["DriverConfigValidated"], answer["Warnings"]) == (True, "")


async def test_validate_refuses_a_docker_option_as_registration_does(cluster: SimulatedCluster) -> None:
    job = batch_job("runner-4")
    task = job["TaskGroups"][0]["Tasks"][0]
    task["Driver"] = "docker"
    task["Config"] = {"image": "python:3.12-slim", "network_mode": "none", "force_pul": True}
    validated = await call(cluster, "PUT", "/v1/validate/job", {"Job": job})
    registered = await call(cluster, "PUT", "/v1/jobs", {"Job": job})
    assert registered.status_code == 500
    assert validated.json()["Error"] == registered.text
    assert "force_pul" in registered.text


async def test_validate_needs_a_job(cluster: SimulatedCluster) -> None:
    answer = await call(cluster, "POST", "/v1/validate/job", {})
    assert (answer.status_code, answer.text) == (400, "Job must be specified")
    answer = await call(cluster, "POST", "/v1/validate/job", {"Job": {"Priority": "high"}})
    assert answer.status_code == 400
    assert answer.text == "json: cannot unmarshal string into Go struct field Job.Job.Priority of type int"


@pytest.mark.parametrize(
    "sim_config",
    [
        SimConfig(
            seed=7,
            acl_token=ROOT,
            acl_policies=(
                AclPolicy("reader", 'namespace "default" { policy = "read" }'),
                AclPolicy("lister", 'namespace "default" { capabilities = ["list-jobs"] }'),
            ),
            acl_tokens=(AclToken("reader-secret", ("reader",)), AclToken("lister-secret", ("lister",))),
        )
    ],
)
async def test_parse_needs_parse_job_and_validate_read_job(cluster: SimulatedCluster) -> None:
    parse = {"JobHCL": POSEIDON_TEMPLATE}
    validate = {"Job": batch_job("runner-3")}
    for token, allowed in (("reader-secret", True), ("lister-secret", False), ("", False)):
        parsed = await call(cluster, "POST", "/v1/jobs/parse", parse, token=token)
        validated = await call(cluster, "POST", "/v1/validate/job", validate, token=token)
        expected = 200 if allowed else 403
        assert (parsed.status_code, validated.status_code) == (expected, expected), token
        if not allowed:
            assert (parsed.text, validated.text) == ("Permission denied", "Permission denied")
