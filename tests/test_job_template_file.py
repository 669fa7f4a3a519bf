"""The job template file read (JSON directly, HCL through Nomad's parse) and the runner jobs checked
by Nomad at startup, against a fake of ``/v1/jobs/parse`` and ``/v1/validate/job``.

Virtual time (``autojump_clock``) where a retry waits; no test sleeps for real."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
import trio.testing

from supervisor.base.errors import ConfigError, NomadNotFound, NomadRequestError, NomadUnavailableError
from supervisor.core.config import NomadSection, Settings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.job_template import POSEIDON_TEMPLATE
from supervisor.effects.job_template_file import job_refusals, read_job_template, startup_job_shape
from supervisor.nomad import NomadClient, NomadSettings, RetryPolicy
from supervisor.ops.check_nomad import check_runner_jobs, runner_needs
from supervisor.ops.check_result import Status
from supervisor.ops.check_token import daemon_needs

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 1, 20.0, 256, False, ())
HCL = 'job "template-0" {\n  datacenters = ["eu"]\n}\n'


class FakeNomad:
    """Nomad's parse and validate: the parse answers ``parsed`` (or raises ``parse_error``, after
    ``unavailable`` failures); the validation objects to jobs whose ID is in ``objections``."""

    def __init__(self, parsed: Mapping[str, Any] | None = None) -> None:
        self.parsed = dict(parsed or {})
        self.parse_error: Exception | None = None
        self.unavailable = 0
        self.parsed_texts: list[str] = []
        self.validated: list[str] = []
        self.objections: dict[str, list[str]] = {}
        self.validate_error: Exception | None = None

    async def parse_job(self, hcl: str) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        if self.unavailable:
            self.unavailable -= 1
            raise NomadUnavailableError("no leader", status_code=500)
        if self.parse_error is not None:
            raise self.parse_error
        self.parsed_texts.append(hcl)
        return copy.deepcopy(self.parsed)

    async def validate_job(self, job: Mapping[str, Any]) -> list[str]:
        await trio.lowlevel.checkpoint()
        if self.validate_error is not None:
            raise self.validate_error
        self.validated.append(job["ID"])
        return self.objections.get(job["ID"], [])


def settings(path: Path | None, *environments: ExecutionEnvironment) -> Settings:
    nomad = NomadSection(job_template=str(path) if path else "")
    return Settings(nomad=nomad, environments=environments)


async def test_a_json_template_is_read_bare_or_wrapped(tmp_path: Path) -> None:
    template = {**copy.deepcopy(dict(POSEIDON_TEMPLATE)), "Datacenters": ["eu"]}
    for name, document in (("bare.json", template), ("wrapped.json", {"Job": template})):
        path = tmp_path / name
        path.write_bytes(orjson.dumps(document))
        job = await read_job_template(FakeNomad(), str(path))
        assert job["Datacenters"] == ["eu"]


async def test_an_hcl_template_is_parsed_by_nomad(tmp_path: Path) -> None:
    path = tmp_path / "job.hcl"
    path.write_text(HCL)
    nomad = FakeNomad({"ID": "template-0", "Datacenters": ["eu"], "TaskGroups": None})
    shape = await startup_job_shape(nomad, settings(path, ENVIRONMENT))
    assert nomad.parsed_texts == [HCL]
    assert orjson.loads(shape.template)["Datacenters"] == ["eu"]
    assert nomad.validated == ["10-check", "template-10"], "its runner job and its template job"


async def test_an_hcl_template_waits_for_a_nomad_that_does_not_answer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "job.nomad"
    path.write_text(HCL)
    nomad = FakeNomad({"Datacenters": ["eu"]})
    nomad.unavailable = 2
    shape = await startup_job_shape(nomad, settings(path))
    assert orjson.loads(shape.template)["Datacenters"] == ["eu"]
    assert trio.current_time() > 0, "it waited between the tries"


@pytest.mark.parametrize(
    ("name", "content", "parse_error", "message"),
    [
        ("missing.hcl", None, None, r"^nomad\.job_template .*missing\.hcl: No such file"),
        ("bad.json", "{", None, r"^nomad\.job_template .*bad\.json: not JSON"),
        (
            "bad.hcl",
            "job {",
            NomadRequestError("parse", status_code=400, body="input.hcl:1,5-6: Missing name for job"),
            r"Nomad cannot parse it: input\.hcl:1,5-6: Missing name for job$",
        ),
        (
            "exec.json",
            '{"TaskGroups": [{"Name": "default-group", "Tasks": [{"Name": "default-task", '
            '"Driver": "exec"}]}]}',
            None,
            r"runs the driver 'exec'; runners need docker$",
        ),
    ],
)
async def test_a_template_that_cannot_be_used_is_one_line_naming_the_file(
    tmp_path: Path, name: str, content: str | None, parse_error: Exception | None, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    nomad = FakeNomad()
    nomad.parse_error = parse_error
    with pytest.raises(ConfigError, match=message) as raised:
        await startup_job_shape(nomad, settings(path))
    assert "\n" not in str(raised.value)


async def test_a_job_nomad_refuses_stops_startup_naming_the_environment() -> None:
    nomad = FakeNomad()
    nomad.objections["10-check"] = ["1 error occurred:\n\t* Task group default-group validation failed"]
    with pytest.raises(ConfigError, match=r"^Nomad refuses the job 10-check of environment 10: ") as raised:
        await startup_job_shape(nomad, settings(None, ENVIRONMENT))
    assert "Task group default-group validation failed" in str(raised.value)
    assert "\n" not in str(raised.value)


async def test_without_environments_the_template_itself_is_checked() -> None:
    nomad = FakeNomad()
    nomad.objections["0-check"] = ["Missing job datacenters"]
    refusals = await job_refusals(nomad, (await startup_job_shape(FakeNomad(), settings(None))), ())
    assert refusals == ["Nomad refuses the job 0-check of the job template: Missing job datacenters"]


async def test_a_nomad_that_cannot_check_leaves_the_jobs_unchecked() -> None:
    nomad = FakeNomad()
    nomad.validate_error = NomadNotFound("no such route", status_code=404)
    shape = await startup_job_shape(nomad, settings(None, ENVIRONMENT))
    assert orjson.loads(shape.template)["Datacenters"] == ["dc1"]
    nomad.validate_error = NomadRequestError("validate", status_code=400, body="json: cannot unmarshal")
    with pytest.raises(ConfigError, match="json: cannot unmarshal"):
        await startup_job_shape(nomad, settings(None, ENVIRONMENT))


# -- supervisor check ---------------------------------------------------------------------------


async def test_check_fails_naming_the_environment_nomad_refuses(tmp_path: Path) -> None:
    nomad = FakeNomad()
    nomad.objections["template-10"] = ["1 error occurred:\n\t* Task group config validation failed"]
    result, shape = await check_runner_jobs(nomad, settings(None, ENVIRONMENT))
    assert result.status is Status.FAIL
    assert result.detail.startswith("Nomad refuses the job template-10 of environment 10: ")
    assert "Task group config validation failed" in result.detail
    assert shape is not None


async def test_check_fails_on_a_template_that_cannot_carry_a_runner_and_passes_a_good_one(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"Type": "system"}')
    result, shape = await check_runner_jobs(FakeNomad(), settings(bad, ENVIRONMENT))
    assert (result.status, shape) == (Status.FAIL, None)
    assert "type is 'system'" in result.detail
    good = tmp_path / "good.hcl"
    good.write_text(HCL)
    nomad = FakeNomad({"Datacenters": ["eu"], "NodePool": "runners"})
    result, shape = await check_runner_jobs(nomad, settings(good, ENVIRONMENT))
    assert result.status is Status.OK
    assert result.detail == f"from the job template {good}: Nomad takes 1 environments' jobs."
    assert shape is not None
    assert runner_needs(settings(good, ENVIRONMENT), shape) == (("eu",), "runners", ("docker",))


def test_an_hcl_template_needs_the_token_to_parse_jobs(tmp_path: Path) -> None:
    assert "parse the job template" not in [n.label for n in daemon_needs(Settings())]
    assert "parse the job template" not in [n.label for n in daemon_needs(settings(tmp_path / "a.json"))]
    needs = {n.label: n for n in daemon_needs(settings(tmp_path / "a.hcl"))}
    assert needs["parse the job template"].namespace == ("parse-job",)


# -- the client's calls, against httpx.MockTransport as Nomad answers ----------------------------


def nomad_client(handler: Callable[[httpx.Request], httpx.Response]) -> NomadClient:
    settings = NomadSettings(namespace="poseidon", retry=RetryPolicy(attempts=1))
    return NomadClient(settings, transport=httpx.MockTransport(handler))


async def test_the_client_parses_hcl_through_nomad_and_reads_its_parse_error() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if b"job {" in request.content:
            return httpx.Response(
                400, text="input.hcl:1,5-6: Missing name for job; All job blocks need 1 label"
            )
        return httpx.Response(200, content=orjson.dumps({"ID": "template-0", "Datacenters": ["eu"]}))

    async with nomad_client(handler) as client:
        assert await client.parse_job(HCL) == {"ID": "template-0", "Datacenters": ["eu"]}
        with pytest.raises(NomadRequestError) as raised:
            await client.parse_job("job {")
    assert (seen[0].method, seen[0].url.path) == ("POST", "/v1/jobs/parse")
    assert orjson.loads(seen[0].content) == {"JobHCL": HCL, "Canonicalize": False}
    assert seen[0].url.params["namespace"] == "poseidon"
    assert "Missing name for job" in raised.value.body


async def test_the_client_validates_a_job_and_returns_nomads_objections() -> None:
    answers = [
        {"DriverConfigValidated": False, "ValidationErrors": None, "Error": "", "Warnings": ""},
        {
            "DriverConfigValidated": False,
            "ValidationErrors": ["Missing job datacenters", "Task group config validation failed"],
            "Error": "2 errors occurred:\n\t* Missing job datacenters\n\t* ...",
            "Warnings": "",
        },
        {"ValidationErrors": [], "Error": "job type must be batch"},
    ]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=orjson.dumps(answers[len(seen) - 1]))

    async with nomad_client(handler) as client:
        assert await client.validate_job({"ID": "a"}) == []
        assert await client.validate_job({"ID": "b"}) == [
            "Missing job datacenters",
            "Task group config validation failed",
        ]
        assert await client.validate_job({"ID": "c"}) == ["job type must be batch"]
    assert (seen[0].method, seen[0].url.path) == ("PUT", "/v1/validate/job")
    assert orjson.loads(seen[0].content) == {"Job": {"ID": "a"}}
