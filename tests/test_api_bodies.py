"""No 5xx from bad input, by construction: every request body is read in one place
(``supervisor/api/request_bodies.py``), and whatever is wrong with it is a 400 naming the field.

Each body of the OpenAPI document (every route that takes one, found from the app's routes) is sent
with each of its fields, at every depth, replaced by values of the wrong type and text that no
field should take, written as raw JSON bytes: lone surrogates as ``\\ud800`` escapes, NUL bytes,
numbers past a double's range, integers past 64 bits, a megabyte of text, nesting. The body's own
schema in the document is the oracle: a body it refuses must be a 400 whose message starts with the
field's path; one it takes must not be a 5xx (a body can be refused for more than its schema says:
a path out of the workspace). Every refusal is a JSON object with a message.

The app runs in process over a RunnerService with a Nomad double (no cluster, no clock of its own):
a runner is never found (410), an environment not stored (404), and Nomad cannot be reached when an
environment is written (500 NOMAD_UNREACHABLE, the only 5xx a body the schema takes may get).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Final

import httpx
import jsonschema
import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.definitions import OPENAPI_30

from supervisor.api.app import create_app, error_code
from supervisor.api.body_fields import Array, Model, StringMap, fields_of
from supervisor.api.openapi import routed_operations
from supervisor.api.operations import OPERATIONS
from supervisor.api.request_bodies import ENVIRONMENT, EXECUTION, FILE_PATCH, RUNNER_CLAIM, read_body
from supervisor.base.errors import InvalidRequest, NomadUnavailableError, NomadUnreachable
from supervisor.core.config import Settings
from supervisor.core.environments import ExecutionEnvironment, environment_from_dict
from supervisor.desk.service import RunnerService
from supervisor.nomad.models import JobRegisterResponse

from .nomad_double import NomadDouble

# A body each route takes, with one of each field it may hold; environment 99 does not exist.
VALID: Final[Mapping[type, dict[str, Any]]] = {
    RUNNER_CLAIM.cls: {"executionEnvironmentId": 99, "inactivityTimeout": 0},
    EXECUTION.cls: {
        "command": "true",
        "privilegedExecution": False,
        "environment": {"A": "x"},
        "timeLimit": 0,
    },
    FILE_PATCH.cls: {"delete": ["a"], "copy": [{"path": "b", "content": "aGk="}]},
    ENVIRONMENT.cls: {
        "id": 7,
        "image": "python:3.12-slim",
        "prewarmingPoolSize": 0,
        "cpuLimit": 100,
        "memoryLimit": 256,
        "networkAccess": False,
        "exposedPorts": [80],
    },
}
# Raw JSON for a value, by what it is.
VALUES: Final = {
    "null": "null",
    "true": "true",
    "zero": "0",
    "negative": "-1",
    "fraction": "1.5",
    "integer past 64 bits": "1" + "0" * 30,
    "number past a double": "1e400",
    "negative number past a double": "-1e400",
    "largest double": "1.7976931348623157e308",
    "empty string": '""',
    "blank": '"   "',
    "non-ASCII": '"é€😀"',
    "lone surrogate": '"\\ud800"',
    "lone low surrogate": '"a\\udc00b"',
    "NUL": '"a\\u0000b"',
    "single quote": '"\'"',
    "numeric string": '"10"',
    "megabyte": '"' + "x" * 1_000_000 + '"',
    "empty array": "[]",
    "array": '["x", 1]',
    "empty object": "{}",
    "object": '{"a": 1}',
    "nested arrays": "[" * 200 + "]" * 200,
    "nested objects": '{"a":' * 200 + "1" + "}" * 200,
}
# Raw JSON for an object's key.
NAMES: Final = {
    "empty": '""',
    "non-ASCII": '"é"',
    "lone surrogate": '"\\ud800"',
    "NUL": '"a\\u0000"',
    "digit first": '"1A"',
    "long": '"' + "A" * 100_000 + '"',
}
_HOLE: Final = "\x00hole\x00"
_KEY: Final = "\x00key\x00"


class _UnreachableNomad(NomadDouble):
    """Nomad, as the client finds it after its retries: not answering a write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        self.writes += 1
        raise NomadUnavailableError("PUT /v1/jobs: ConnectError: connection refused")


@pytest.fixture
async def api(nursery: trio.Nursery) -> AsyncIterator[tuple[httpx.AsyncClient, _UnreachableNomad, Any]]:
    settings = Settings()
    nomad = _UnreachableNomad()
    service = RunnerService(nomad, settings, execution_nursery=nursery)
    service.informer.synced.set()
    app = create_app(service, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        yield http, nomad, app


def _routes(app: Any) -> list[Any]:
    inner = app
    while not hasattr(inner, "routes"):
        inner = inner.app
    return list(inner.routes)


def _body_routes(app: Any) -> list[tuple[str, str, Model[Any]]]:
    """(method, path, body) of every route that takes a body, its path's IDs filled in."""
    found = []
    for item in routed_operations(_routes(app)):
        if item.operation.body is not None:
            path = item.path.replace("{runnerId}", "10-x").replace("{executionEnvironmentId}", "7")
            found.append((item.method.upper(), path, item.operation.body))
    return found


def _holes(model: Model[Any], document: dict[str, Any], path: str = "") -> Iterator[tuple[str, Any, str]]:
    """(path, document with a hole there, kind of hole) for every field of ``document``, at every depth:
    a hole is a value to replace, or (in an object of free names) a name."""
    for field in fields_of(model.cls):
        here = f"{path}.{field.name}" if path else field.name
        yield here, {**document, field.name: _HOLE}, "value"
        value, kind = document[field.name], field.kind
        if isinstance(kind, Array) and value:
            for item_path, item, hole in _items(kind, value[0], f"{here}[0]"):
                yield item_path, {**document, field.name: [item, *value[1:]]}, hole
        elif isinstance(kind, StringMap) and value:
            (key, item), *rest = value.items()
            yield f"{here}.{key}", {**document, field.name: {key: _HOLE, **dict(rest)}}, "value"
            yield here, {**document, field.name: {_KEY: item, **dict(rest)}}, "name"


def _items(kind: Array, item: Any, path: str) -> Iterator[tuple[str, Any, str]]:
    yield path, _HOLE, "value"
    if isinstance(kind.items, Model):
        yield from _holes(kind.items, item, path)


def _filled(document: Any, raw: str, hole: str) -> bytes:
    text = orjson.dumps(document).decode()
    marker = orjson.dumps(_HOLE if hole == "value" else _KEY).decode()
    assert text.count(marker) == 1
    return text.replace(marker, raw).encode()


def _schema_of(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.0 schema as JSON Schema (draft 7): references resolved, ``nullable`` and a
    boolean ``exclusiveMinimum`` in draft 7's words."""
    if "$ref" in schema:
        return _schema_of(document, document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("nullable", "exclusiveMinimum", "format"):
            continue
        if key == "properties":
            value = {name: _schema_of(document, item) for name, item in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            value = _schema_of(document, value)
        converted[key] = value
    if schema.get("nullable"):
        converted["type"] = [schema["type"], "null"]
    if schema.get("exclusiveMinimum") is True:
        converted["exclusiveMinimum"] = converted.pop("minimum")
    return converted


def _takes(validator: jsonschema.Draft7Validator, body: bytes) -> bool:
    """Whether the schema takes the body: a number past a double or a lone surrogate it cannot
    tell from a number or a string, and no field takes either."""
    document = json.loads(body)
    if _has_no_text(document):
        return False
    return bool(validator.is_valid(document))


def _has_no_text(value: Any) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, str):
        return not value.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, list):
        return any(_has_no_text(item) for item in value)
    if isinstance(value, dict):
        return any(_has_no_text(k) or _has_no_text(v) for k, v in value.items())
    return False


def _assert_refusal_is_json(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert isinstance(body, dict), response.text[:300]
    assert isinstance(body.get("message"), str), response.text[:300]
    return body


async def test_every_field_of_every_body_takes_only_what_its_schema_says(
    api: tuple[httpx.AsyncClient, _UnreachableNomad, Any],
) -> None:
    http, nomad, app = api
    document = (await http.get("/api/v1/openapi.json")).json()
    routes = _body_routes(app)
    assert {body.cls for _, _, body in routes} == set(VALID), "a valid example of every body"
    tried = 0
    for method, path, body in routes:
        schema = document["paths"][path_template(path)][method.lower()]["requestBody"]
        validator = jsonschema.Draft7Validator(
            _schema_of(document, schema["content"]["application/json"]["schema"])
        )
        for field, holed, hole in _holes(body, VALID[body.cls]):
            for what, raw in (VALUES if hole == "value" else NAMES).items():
                content = _filled(holed, raw, hole)
                writes = nomad.writes
                response = await http.request(method, path, content=content)
                case = f"{method} {path} with {field} = {what}: {response.status_code} {response.text[:200]}"
                tried += 1
                if response.status_code >= 400:
                    _assert_refusal_is_json(response)
                if _takes(validator, content):
                    assert response.status_code < 500 or error_of(response) == "NOMAD_UNREACHABLE", case
                else:
                    assert response.status_code == 400, case
                    assert response.json()["message"].startswith(field), case
                    assert nomad.writes == writes, f"a refused body reached Nomad: {case}"
    assert tried > 400


def path_template(path: str) -> str:
    return path.replace("10-x", "{runnerId}").replace("/7", "/{executionEnvironmentId}")


def error_of(response: httpx.Response) -> str:
    return str(response.json().get("errorCode"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the request body is empty"),
        (b" \n", "the request body is empty"),
        (b"{nope", "the request body is not JSON: "),
        (b"[" * 2000 + b"]" * 2000, "the request body is nested more than 1,024 deep"),
        (b'{"command": NaN}', "the request body is not JSON"),
        (
            b'{"command": "true", "timeLimit": 1e400, "x": "\\ud800"}',
            "the request body has an unknown field 'x'",
        ),
        (
            b'{"command": "true", "timeLimit": 1e400}',
            "timeLimit must be an integer from 0 to 2147483647, got ",
        ),
        (b'{"command": "\xff"}', "the request body is not UTF-8: invalid start byte at byte 13"),
        (
            b'{"command": "\\ud83d\\ude00 \\ud800"}',
            "command is not Unicode text: it has a lone surrogate (\\ud800)",
        ),
        (b'"command"', "the request body must be a JSON object, got 'command'"),
    ],
)
def test_what_is_wrong_with_a_body_is_said(content: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read_body(content, EXECUTION)
    assert str(refused.value).startswith(message), str(refused.value)


def test_a_number_past_a_double_is_out_of_range_and_named() -> None:
    body = dict(VALID[ENVIRONMENT.cls])
    raw = orjson.dumps({**body, "cpuLimit": _HOLE}).decode().replace(orjson.dumps(_HOLE).decode(), "1e400")
    with pytest.raises(InvalidRequest) as refused:
        read_body(raw.encode(), ENVIRONMENT)
    assert str(refused.value) == (
        "cpuLimit must be a number above 0 and at most 2147483647, got 1e400 (a number out of range)"
    )


def test_an_integer_past_64_bits_is_shown_as_sent() -> None:
    with pytest.raises(InvalidRequest, match=r"got 1180591620717411303425$"):
        read_body(b'{"executionEnvironmentId": 1180591620717411303425}', RUNNER_CLAIM)


def test_a_patch_reads_into_paths_and_bytes() -> None:
    patch = read_body(
        b'{"delete": null, "copy": [{"path": "a/"}, {"path": "b", "content": "aGk="}]}', FILE_PATCH
    )
    assert patch.delete == ()
    assert [(entry.path, entry.content) for entry in patch.copy] == [("a/", b""), ("b", b"hi")]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NomadUnreachable("the event stream stayed down"), "NOMAD_UNREACHABLE"),
        (NomadUnavailableError("GET /v1/jobs: ConnectError: refused"), "NOMAD_UNREACHABLE"),
        (
            NomadUnavailableError("GET /v1/jobs", status_code=500, body="No cluster leader"),
            "NOMAD_UNREACHABLE",
        ),
        (NomadUnavailableError("GET /v1/jobs", status_code=503, body="unavailable"), "NOMAD_UNREACHABLE"),
        (
            NomadUnavailableError("GET /v1/jobs", status_code=500, body="rpc error: EOF"),
            "NOMAD_INTERNAL_SERVER_ERROR",
        ),
    ],
)
async def test_error_codes_say_what_happened(nursery: trio.Nursery, error: Exception, code: str) -> None:
    assert error_code(error) == code  # type: ignore[arg-type]

    class Failing(NomadDouble):
        async def list_jobs(
            self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
        ) -> Any:
            raise error

    settings = Settings()
    app = create_app(RunnerService(Failing(), settings, execution_nursery=nursery), settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        response = await http.get("/api/v1/execution-environments", params={"fetch": "true"})
    assert (response.status_code, response.json()["errorCode"]) == (500, code)
    assert ("retry-after" in response.headers) == (code == "NOMAD_UNREACHABLE")


async def test_a_bug_is_a_json_500(nursery: trio.Nursery) -> None:
    class Broken(NomadDouble):
        async def list_jobs(
            self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
        ) -> Any:
            raise ZeroDivisionError("a bug")

    settings = Settings()
    app = create_app(RunnerService(Broken(), settings, execution_nursery=nursery), settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        response = await http.get("/api/v1/execution-environments", params={"fetch": "true"})
    assert response.status_code == 500
    assert response.json()["errorCode"] == "UNKNOWN"


async def test_the_document_is_openapi_3_with_a_summary_for_every_operation(
    api: tuple[httpx.AsyncClient, _UnreachableNomad, Any],
) -> None:
    http, _, app = api
    document = (await http.get("/api/v1/openapi.json")).json()
    assert jsonschema.Draft4Validator(OPENAPI_30).is_valid(document)
    operations = [
        item for path in document["paths"].values() for item in path.values() if "operationId" in item
    ]
    assert all(operation["summary"] for operation in operations)
    assert {item.name for item in routed_operations(_routes(app))} == set(OPERATIONS), (
        "every operation described has its route, and every route its operation"
    )
    references = set(re.findall(r'"\$ref": "#/components/(\w+)/(\w+)"', json.dumps(document)))
    assert references
    assert all(name in document["components"][kind] for kind, name in references)


_ANY_VALUE: Final = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 10_000, 10_001, 65535, 65536, 2**31 - 1, 2**31, 2**63 - 1, 2**63]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.sampled_from(["python:3.12-slim", " ", "", "a\x00", "\ud800", "é"]),
    st.lists(st.integers(min_value=-2, max_value=70_000), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*VALID[ENVIRONMENT.cls], "colour"]), _ANY_VALUE, max_size=9).map(
        lambda fields: {**VALID[ENVIRONMENT.cls], **fields}
    ),
    st.sets(st.sampled_from(list(VALID[ENVIRONMENT.cls])), max_size=2),
)
def test_the_api_reads_an_environment_as_its_other_readers_do(
    document: dict[str, Any], left_out: set[str]
) -> None:
    """The config file and Nomad's template jobs hold environments too (``environment_from_dict``):
    an environment the API takes, they take the same, and what one refuses the other refuses."""
    document = {name: value for name, value in document.items() if name not in left_out}
    try:
        ours: ExecutionEnvironment | None = read_body(json.dumps(document).encode(), ENVIRONMENT).environment(
            7
        )
    except InvalidRequest:
        ours = None
    try:
        theirs: ExecutionEnvironment | None = environment_from_dict(document, environment_id=7)
    except InvalidRequest:
        theirs = None
    assert ours == theirs
